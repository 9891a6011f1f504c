package sessions

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/ids"
)

// MaxIDLen is the longest session (and run) id.
const MaxIDLen = ids.MaxLen

// ValidID reports whether id is a session or run id (the rule of package
// ids).
func ValidID(id string) bool { return ids.Valid(id) }

// sessionKey is a session's key in the store: sessions belong to their
// tenant, so two tenants may use the same id without meeting. Tenant names
// have no "/".
func sessionKey(tenant, id string) string { return tenant + "/" + id }

func splitKey(key string) (tenant, id string, ok bool) {
	return strings.Cut(key, "/")
}

// sessionOwner is the ledger owner of a session's sandboxes.
func sessionOwner(key string) string { return "session:" + key }

// keyHash names a session in provider resources. Slugs follow the
// strictest rules among the providers (Deno: 2 to 32 of [a-z0-9-]), so
// they are a hash of the key rather than the key; labels carry the
// readable tenant and id.
func keyHash(key string, n int) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])[:n]
}

// volumeSlug is the session's volume.
func volumeSlug(key string) string { return "ws-" + keyHash(key, 24) }

// sandboxName is a new sandbox of the session. Each sandbox gets its own
// name, and so its own ledger entry: an entry closed by the cleanup can
// never be the one a run has just begun for its next sandbox.
func sandboxName(key string) string { return "ss-" + keyHash(key, 16) + "-" + randomBase32(8) }

// crockford is Crockford's base32 in lower case: its digits sort in ASCII
// order, so ids that start with the time sort in time order.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// newRunID returns a ULID-shaped id: 10 characters of Unix milliseconds,
// then 16 random ones.
func newRunID(now time.Time) string {
	var b [10]byte
	ms := uint64(now.UnixMilli())
	for i := 9; i >= 0; i-- {
		b[i] = crockford[ms&31]
		ms >>= 5
	}
	return string(b[:]) + randomBase32(16)
}

func randomBase32(n int) string {
	rnd := make([]byte, n)
	_, _ = rand.Read(rnd) // crypto/rand.Read never fails
	for i, x := range rnd {
		rnd[i] = crockford[x&31]
	}
	return string(rnd)
}

// newMark is the line marker of a run's result: random per run, so code
// that does not know it cannot forge a result by printing it.
func newMark() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "sandstep-result-" + hex.EncodeToString(b) + ":"
}
