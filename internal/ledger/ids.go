package ledger

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"sync"
	"time"
)

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// newID returns prefix + 26 characters: a 48-bit millisecond timestamp then
// 80 random bits, so ids sort roughly by creation and index well.
func newID(prefix string) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return prefix + idEncoding.EncodeToString(b[:])
}

// ValidOperationID reports whether id has the form of an operation id,
// ^op_[0-9a-z]{26}$ (newID's, with base32's other letters accepted). Every
// call that names an operation checks it, so it is written out: a regular
// expression costs ten times as much (docs/performance.md, finding 29).
func ValidOperationID(id string) bool {
	if len(id) != 29 || id[:3] != "op_" {
		return false
	}
	for i := 3; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

// DownstreamKey derives the idempotency key sent to the downstream for an
// operation from its business identity: HMAC-SHA256 of the server secret
// over the tenant, the tool, the caller's idempotency key and the request
// fingerprint (each length-prefixed, after a version label). It depends on
// nothing the database issues, so an operation row lost with a failed-over
// or restored database, prepared again under the same key with the same
// arguments, sends the same key and the downstream dedupes it. It is
// computed once at Prepare and stored, so every attempt on every replica
// sends the same key, and rotating the secret only affects operations
// prepared afterwards.
func DownstreamKey(secret []byte, tenant, tool, idempotencyKey, fingerprint string) string {
	m := hmac.New(sha256.New, secret)
	var n [binary.MaxVarintLen64]byte
	for _, part := range []string{"opledger downstream key v2", tenant, tool, idempotencyKey, fingerprint} {
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		m.Write([]byte(part))
	}
	return "opk_" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// keyDeriver computes DownstreamKey for one secret, as Prepare does once per
// new operation, without hashing the secret into a new HMAC and without a
// buffer per part each time: it keeps keyed HMAC states, each with a buffer
// for its input, for reuse. TestKeyDeriverIsDownstreamKey holds it to
// DownstreamKey.
type keyDeriver struct{ macs sync.Pool }

type keyMAC struct {
	mac hash.Hash
	in  []byte
}

func newKeyDeriver(secret []byte) *keyDeriver {
	secret = bytes.Clone(secret)
	d := &keyDeriver{}
	d.macs.New = func() any { return &keyMAC{mac: hmac.New(sha256.New, secret), in: make([]byte, 0, 512)} }
	return d
}

func (d *keyDeriver) key(tenant, tool, idempotencyKey, fingerprint string) string {
	k := d.macs.Get().(*keyMAC)
	b := k.in[:0]
	for _, part := range [...]string{"opledger downstream key v2", tenant, tool, idempotencyKey, fingerprint} {
		b = binary.AppendUvarint(b, uint64(len(part)))
		b = append(b, part...)
	}
	k.mac.Reset()
	k.mac.Write(b)
	var sum [sha256.Size]byte
	k.mac.Sum(sum[:0])
	if cap(b) <= 4<<10 {
		k.in = b
	}
	d.macs.Put(k)
	var out [len("opk_") + 43]byte // 43: 32 bytes in unpadded base64
	copy(out[:], "opk_")
	base64.RawURLEncoding.Encode(out[len("opk_"):], sum[:])
	return string(out[:])
}

// NewAPIKey returns a fresh API key (256 random bits), its SHA-256 (the only
// form stored) and a short prefix people can recognise it by.
func NewAPIKey() (key string, hash []byte, prefix string) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	key = "opl_" + base64.RawURLEncoding.EncodeToString(b[:])
	return key, HashAPIKey(key), key[:12]
}

// HashAPIKey is the stored form of an API key. Keys carry 256 random bits,
// so a plain SHA-256 (no salt, no stretching) resists guessing.
func HashAPIKey(key string) []byte {
	sum := hashAPIKey(key)
	return sum[:]
}

// keyHash is HashAPIKey's value as an array, which a map takes as its key
// without a copy to the heap (the authentication cache's).
type keyHash = [sha256.Size]byte

func hashAPIKey(key string) keyHash { return sha256.Sum256([]byte(key)) }

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}
