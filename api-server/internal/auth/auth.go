// Package auth checks API keys. Keys arrive as `x-api-key: <key>` or
// `Authorization: Bearer <key>`; only their SHA-256 hashes are stored, and
// a short-lived cache keeps the database out of the hot path.
package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ErrInvalidKey reports an unknown or revoked key.
var ErrInvalidKey = errors.New("invalid api key")

// Hash returns the stored form of a key.
func Hash(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

// FromRequest extracts the presented key, preferring x-api-key.
func FromRequest(r *http.Request) (string, bool) {
	if k := strings.TrimSpace(r.Header.Get("x-api-key")); k != "" {
		return k, true
	}
	h := r.Header.Get("Authorization")
	if scheme, token, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
		if t := strings.TrimSpace(token); t != "" {
			return t, true
		}
	}
	return "", false
}

// Lookup finds the key id for a key hash, returning ErrInvalidKey when the
// hash is unknown or revoked.
type Lookup func(ctx context.Context, hash []byte) (keyID string, err error)

// Verifier checks keys against a Lookup with a positive cache.
type Verifier struct {
	lookup Lookup
	ttl    time.Duration

	mu    sync.Mutex
	cache map[[sha256.Size]byte]entry
}

type entry struct {
	keyID   string
	expires time.Time
}

// NewVerifier returns a Verifier caching valid keys for ttl. A revoked key
// stops working within ttl.
func NewVerifier(lookup Lookup, ttl time.Duration) *Verifier {
	return &Verifier{lookup: lookup, ttl: ttl, cache: map[[sha256.Size]byte]entry{}}
}

// Verify returns the id of the key, or ErrInvalidKey.
func (v *Verifier) Verify(ctx context.Context, key string) (string, error) {
	var h [sha256.Size]byte
	copy(h[:], Hash(key))
	now := time.Now()
	v.mu.Lock()
	e, ok := v.cache[h]
	v.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.keyID, nil
	}
	id, err := v.lookup(ctx, h[:])
	if err != nil {
		return "", err
	}
	v.mu.Lock()
	if len(v.cache) > 10_000 {
		clear(v.cache)
	}
	v.cache[h] = entry{keyID: id, expires: now.Add(v.ttl)}
	v.mu.Unlock()
	return id, nil
}
