package sessions

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/sandstep/sandstep/internal/service/ids"
)

// keyHash names a session in provider resources. Slugs follow the
// strictest rules among the providers (Deno: 2 to 32 of [a-z0-9-]), so
// they are a hash of the key rather than the key; labels carry the
// readable tenant and id. The hash is kept as it was first made: existing
// sessions' volumes are found by it.
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

// newMark is the line marker of a run's result: random per run (160 bits),
// so code that does not know it cannot forge a result by printing it.
func newMark() string { return "sandstep-result-" + ids.Random(32) + ":" }
