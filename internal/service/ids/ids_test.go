package ids

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// The name rules of the places a key goes (see KeyLen).
var (
	stepFunctionsName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)
	modalName         = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	denoSlug          = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}[a-z0-9]$`)
	dnsLabel          = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

func TestKeysFitEveryNameRule(t *testing.T) {
	for _, c := range []struct{ tenant, id string }{
		{"acme", "job-1"}, {"dev", "a"}, {"t", strings.Repeat("Z", MaxLen)}, {"globex", "..."}, {"x", "01J0ABCDEF"},
	} {
		for _, k := range []string{JobKey(c.tenant, c.id), SessionKey(c.tenant, c.id)} {
			if len(k) != KeyLen {
				t.Errorf("key %q is %d long, want %d", k, len(k), KeyLen)
			}
			for name, re := range map[string]*regexp.Regexp{"Step Functions execution name": stepFunctionsName, "Modal sandbox name": modalName, "Deno slug": denoSlug, "DNS label": dnsLabel} {
				if !re.MatchString(k) {
					t.Errorf("key %q is not a valid %s", k, name)
				}
			}
			// Deno refuses "--" at positions 3-4.
			if k[2:4] == "--" {
				t.Errorf("key %q has -- at positions 3-4", k)
			}
			if !Valid(k) {
				t.Errorf("key %q is not a valid id", k)
			}
		}
	}
}

func TestKeysAreDerivedFromTenantAndID(t *testing.T) {
	if JobKey("acme", "job-1") != JobKey("acme", "job-1") {
		t.Fatal("a key must be the same every time")
	}
	distinct := map[string]string{}
	add := func(what, k string) {
		t.Helper()
		if prev, ok := distinct[k]; ok {
			t.Fatalf("%s and %s have the same key %s", prev, what, k)
		}
		distinct[k] = what
	}
	add("job acme/job-1", JobKey("acme", "job-1"))
	add("job globex/job-1", JobKey("globex", "job-1"))
	add("session acme/job-1", SessionKey("acme", "job-1"))
	// The separator keeps (tenant, id) pairs apart that concatenate alike.
	add("job ab/c", JobKey("ab", "c"))
	add("job a/bc", JobKey("a", "bc"))
	if !strings.HasPrefix(JobKey("acme", "x"), "j-") || !strings.HasPrefix(SessionKey("acme", "x"), "s-") {
		t.Fatal("keys are prefixed by their kind")
	}
	// A key tells nothing readable: neither the tenant nor the id shows.
	if k := JobKey("acme", "quarterly-report"); strings.Contains(k, "acme") || strings.Contains(k, "quarterly") {
		t.Fatalf("key %q shows its tenant or id", k)
	}
	// A pinned value: changing the rule strands every stored job.
	if got := JobKey("acme", "job-1"); got != pinnedAcmeJob1 {
		t.Fatalf("JobKey(acme, job-1) = %s, want %s (the rule changed: stored keys no longer match)", got, pinnedAcmeJob1)
	}
}

func TestNoCollisionsAmongManyKeys(t *testing.T) {
	seen := make(map[string]bool, 200000)
	for _, tenant := range []string{"acme", "globex"} {
		for i := range 100000 {
			k := JobKey(tenant, "job-"+itoa(i))
			if seen[k] {
				t.Fatalf("collision at %s/%d", tenant, i)
			}
			seen[k] = true
		}
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func TestNewIsValidAndSortsByTime(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	a, b := New(t0), New(t0.Add(time.Millisecond))
	if len(a) != 26 || !Valid(a) || !dnsLabel.MatchString(a) {
		t.Fatalf("New = %q, want 26 lower-case base32 characters", a)
	}
	if a >= b {
		t.Fatalf("ids do not sort by time: %s >= %s", a, b)
	}
	if New(t0) == New(t0) {
		t.Fatal("two ids of the same millisecond are equal")
	}
	if r := Random(16); len(r) != 16 || !dnsLabel.MatchString(r) {
		t.Fatalf("Random(16) = %q", r)
	}
}

// pinnedAcmeJob1 is JobKey("acme", "job-1"), computed independently:
// Crockford base32 (lower case) of the first 130 bits of
// SHA-256("acme\x00job-1").
const pinnedAcmeJob1 = "j-p7pcmfzadtxrdjjzb7rcmg7x2z"
