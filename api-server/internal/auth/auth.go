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
	cache  *Cache[string]
}

// NewVerifier returns a Verifier caching valid keys for ttl. A revoked key
// stops working within ttl.
func NewVerifier(lookup Lookup, ttl time.Duration) *Verifier {
	return &Verifier{lookup: lookup, cache: NewCache[string](ttl)}
}

// Verify returns the id of the key, or ErrInvalidKey.
func (v *Verifier) Verify(ctx context.Context, key string) (string, error) {
	h := Hash(key)
	if id, ok := v.cache.Get(h); ok {
		return id, nil
	}
	id, err := v.lookup(ctx, h)
	if err != nil {
		return "", err
	}
	v.cache.Put(h, id)
	return id, nil
}
