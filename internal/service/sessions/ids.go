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

// volumeSlug is the volume of a new session of this deployment. The
// deployment is in it because the key is only the tenant's and the
// session's id: two stacks sharing a provider, with the same tenants,
// would otherwise mount one volume, and one's cleanup would delete the
// other's. A session keeps the slug it was created with (its record holds
// it), so sessions made before deployment ids keep their volumes.
func volumeSlug(deployment, key string) string { return "ws-" + keyHash(deployment+"\x00"+key, 24) }

// sandboxName is a new sandbox of the session. Each sandbox gets its own
// name, and so its own ledger entry: an entry closed by the cleanup can
// never be the one a run has just begun for its next sandbox.
func sandboxName(key string) string { return "ss-" + keyHash(key, 16) + "-" + ids.Random(8) }

// newMark is the line marker of a run's result: random per run (160 bits),
// so code that does not know it cannot forge a result by printing it.
func newMark() string { return "sandstep-result-" + ids.Random(32) + ":" }
