package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// A cursor is the place a listing stopped, opaque to the client:
//
//	base64url( version | listing | tenant tag | created_at | key | check )
//
// version is 1; listing is 'j' (jobs) or 's' (sessions); the tenant tag is
// the first 8 bytes of SHA-256 of the tenant, so a cursor handed to another
// tenant is refused rather than read; created_at is the last item's
// creation in Unix milliseconds (8 bytes, big-endian) and key its internal
// key; check is the first 8 bytes of SHA-256 of everything before it, so a
// cursor cut short or garbled is refused.
//
// No secret is needed: the listing's partition is always the caller's
// tenant, from the token, so a forged cursor can only move the caller to
// another place in their own listing.
const (
	cursorVersion  = 1
	cursorJobs     = 'j'
	cursorSessions = 's'
	cursorTagLen   = 8
	cursorCheckLen = 8
	cursorDomain   = "sandstep list cursor\x00"
	maxCursorKey   = 256 // the store's longest key
)

var cursorEncoding = base64.RawURLEncoding

func tenantTag(tenant string) []byte {
	sum := sha256.Sum256([]byte(tenant))
	return sum[:cursorTagLen]
}

func cursorCheck(payload []byte) []byte {
	h := sha256.New()
	h.Write([]byte(cursorDomain))
	h.Write(payload)
	return h.Sum(nil)[:cursorCheckLen]
}

func encodeCursor(pos store.ListPosition, kind byte, tenant string) string {
	b := make([]byte, 0, 2+cursorTagLen+8+len(pos.Key)+cursorCheckLen)
	b = append(b, cursorVersion, kind)
	b = append(b, tenantTag(tenant)...)
	b = binary.BigEndian.AppendUint64(b, uint64(pos.CreatedAt.UnixMilli()))
	b = append(b, pos.Key...)
	b = append(b, cursorCheck(b)...)
	return cursorEncoding.EncodeToString(b)
}

// Why a cursor is refused; the message names the cursor field.
var (
	errCursorGarbled      = errors.New("it is not a cursor, or it was cut short or changed")
	errCursorOtherListing = errors.New("it belongs to another listing")
	errCursorOtherTenant  = errors.New("it belongs to another tenant")
)

func decodeCursor(s string, kind byte, tenant string) (store.ListPosition, error) {
	b, err := cursorEncoding.DecodeString(s)
	const head = 2 + cursorTagLen + 8
	if err != nil || len(b) <= head+cursorCheckLen || len(b) > head+maxCursorKey+cursorCheckLen {
		return store.ListPosition{}, errCursorGarbled
	}
	payload, check := b[:len(b)-cursorCheckLen], b[len(b)-cursorCheckLen:]
	if !bytes.Equal(check, cursorCheck(payload)) || payload[0] != cursorVersion {
		return store.ListPosition{}, errCursorGarbled
	}
	if payload[1] != kind {
		return store.ListPosition{}, errCursorOtherListing
	}
	if !bytes.Equal(payload[2:2+cursorTagLen], tenantTag(tenant)) {
		return store.ListPosition{}, errCursorOtherTenant
	}
	ms := int64(binary.BigEndian.Uint64(payload[2+cursorTagLen : head]))
	return store.ListPosition{CreatedAt: time.UnixMilli(ms).UTC(), Key: string(payload[head:])}, nil
}
