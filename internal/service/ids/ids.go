// Package ids holds the rules of sandstep's ids: what a client-chosen id
// (job, session and run ids) may be, how the internal key of a tenant's job
// or session is derived from it, and the shape of generated ids.
//
// A client's id is unique within its tenant only. Everything that is shared
// between tenants (store keys, Step Functions execution names, sandbox names,
// ledger owners) uses the key, which is derived from the tenant and the id
// together: two tenants using the same id get two keys, and neither key
// tells anything about the other tenant or the id.
package ids

import (
	"crypto/rand"
	"crypto/sha256"
	"time"
)

// MaxLen is the longest client id.
const MaxLen = 64

// Valid reports whether id is 1 to 64 of [A-Za-z0-9._-], and not "." or
// ".." (no URL can address those).
func Valid(id string) bool {
	if id == "" || len(id) > MaxLen || id == "." || id == ".." {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Key prefixes name the kind of a key, so that a job key never reads as a
// session key.
const (
	jobPrefix     = "j-"
	sessionPrefix = "s-"
)

// hashChars is how many base32 characters of the hash a key keeps: 130
// bits, so that even 2^40 keys collide with a probability below 2^-50.
const hashChars = 26

// KeyLen is the length of every key: a prefix of two and the hash. It fits
// the strictest name rule among the places a key goes: a Step Functions
// execution name (80 of [A-Za-z0-9_-]), a Modal sandbox name (64 of
// [A-Za-z0-9._-]), a Deno slug (2 to 32 of [a-z0-9-], no leading or
// trailing '-'), a DNS label, a DynamoDB key.
const KeyLen = 2 + hashChars

// JobKey is the internal key of the tenant's job whose client id is id: the
// job record's store key, its execution name, its sandbox's name and its
// ledger owner.
func JobKey(tenant, id string) string { return key(jobPrefix, tenant, id) }

// SessionKey is the internal key of the tenant's session whose client id is
// id: its store key, from which its volume and sandbox names derive.
func SessionKey(tenant, id string) string { return key(sessionPrefix, tenant, id) }

// key is prefix and the lower base32 of SHA-256(tenant NUL id), truncated.
// Tenant names have no NUL, so no two (tenant, id) pairs hash the same
// input.
func key(prefix, tenant, id string) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(id))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	b := make([]byte, 0, KeyLen)
	b = append(b, prefix...)
	return string(appendBase32(b, sum[:], hashChars))
}

// crockford is Crockford's base32 in lower case: only [0-9a-z], and its
// digits sort in ASCII order, so ids that start with the time sort in time
// order.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// appendBase32 appends the first n base32 characters of data's bits, most
// significant first.
func appendBase32(dst, data []byte, n int) []byte {
	var acc uint64
	bits := 0
	for _, x := range data {
		acc = acc<<8 | uint64(x)
		bits += 8
		for bits >= 5 {
			if n == 0 {
				return dst
			}
			bits -= 5
			dst = append(dst, crockford[(acc>>bits)&31])
			n--
		}
	}
	return dst
}

// Random returns n random base32 characters.
func Random(n int) string {
	rnd := make([]byte, n)
	_, _ = rand.Read(rnd) // crypto/rand.Read never fails
	for i, x := range rnd {
		rnd[i] = crockford[x&31]
	}
	return string(rnd)
}

// New returns a ULID-shaped id for now: 10 characters of Unix milliseconds
// then 16 of randomness (80 bits), lower case so that it is valid wherever
// a client id is. Generated job ids and run ids are these.
func New(now time.Time) string {
	var b [26]byte
	ms := uint64(now.UnixMilli())
	for i := 9; i >= 0; i-- {
		b[i] = crockford[ms&31]
		ms >>= 5
	}
	var rnd [10]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails
	appendBase32(b[:10], rnd[:], 16)
	return string(b[:])
}
