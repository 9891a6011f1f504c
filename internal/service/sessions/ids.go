package sessions

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/sandstep/sandstep/internal/service/ids"
)

// MaxIDLen is the longest session (and run) id.
const MaxIDLen = ids.MaxLen

// ValidID reports whether id is a session or run id (the rule of package
// ids).
func ValidID(id string) bool { return ids.Valid(id) }

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
func sandboxName(key string) string { return "ss-" + keyHash(key, 16) + "-" + ids.Random(8) }

// newRunID returns a run id: ULID-shaped, so that runs sort by time.
func newRunID(now time.Time) string { return ids.New(now) }

// newMark is the line marker of a run's result: random per run, so code
// that does not know it cannot forge a result by printing it.
func newMark() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "sandstep-result-" + hex.EncodeToString(b) + ":"
}
