package local

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// isID and validSlug are the patterns they replace, checked by hand.
func TestIDAndSlugChecks(t *testing.T) {
	idRE := regexp.MustCompile(`^sbx-[0-9a-f]{16}$`)
	slugRE := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	cases := []string{"", "sbx-", "sbx-0123456789abcdef", "sbx-0123456789ABCDEF", "sbx-0123456789abcde",
		"sbx-0123456789abcdef0", "xbx-0123456789abcdef", "sbx-0123456789abcdeg", newID(),
		"a", "A.b_c-d", ".a", "-a", "_a", "a b", "a/b", "é", strings.Repeat("a", 128), strings.Repeat("a", 129), "9" + strings.Repeat(".", 127)}
	const alphabet = "sbx-0123456789abcdefABCDEF._/ é"
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		b := []byte("sbx-")
		if rng.IntN(2) == 0 {
			b = b[:0]
		}
		for range rng.IntN(20) {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		cases = append(cases, string(b))
	}
	for _, c := range cases {
		if got, want := isID(c), idRE.MatchString(c); got != want {
			t.Errorf("isID(%q) = %v, want %v", c, got, want)
		}
		if got, want := validSlug(c), slugRE.MatchString(c); got != want {
			t.Errorf("validSlug(%q) = %v, want %v", c, got, want)
		}
	}
}
