package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Kind is the kind of a presented credential, told apart by its prefix
// before any lookup.
type Kind int

// Credential kinds.
const (
	// KindAPIKey is an API key (anything without a known prefix).
	KindAPIKey Kind = iota
	// KindEnvironmentKey is an environment key (EnvironmentKeyPrefix),
	// bound to one self-hosted environment.
	KindEnvironmentKey
	// KindWorkToken is the sessions token of a work item's secret
	// (WorkTokenPrefix), bound to one work item and its session.
	KindWorkToken
)

// Prefixes of the credentials Mango mints for self-hosted environments.
const (
	EnvironmentKeyPrefix = "mango_envkey_"
	WorkTokenPrefix      = "mango_wst_"
)

// String names the kind for messages.
func (k Kind) String() string {
	switch k {
	case KindEnvironmentKey:
		return "environment key"
	case KindWorkToken:
		return "work item secret"
	}
	return "API key"
}

// KindOf tells the kind of a presented credential by its prefix.
func KindOf(credential string) Kind {
	switch {
	case strings.HasPrefix(credential, EnvironmentKeyPrefix):
		return KindEnvironmentKey
	case strings.HasPrefix(credential, WorkTokenPrefix):
		return KindWorkToken
	}
	return KindAPIKey
}

// randomToken returns prefix followed by 43 random URL-safe characters
// (32 random bytes, base64url without padding).
func randomToken(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("auth: crypto/rand failed: " + err.Error()) // never fails on supported platforms
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// NewEnvironmentKey returns a fresh environment key secret and its stored
// hash. The secret is shown once, to whoever created the key.
func NewEnvironmentKey() (secret string, hash []byte) {
	s := randomToken(EnvironmentKeyPrefix)
	return s, Hash(s)
}

// WorkSecret is what a poll hands out with a work item.
type WorkSecret struct {
	// Secret is the poll response's `secret`: base64url (no padding) of
	// the JSON {"sessions_token": Token}, as the SDK's worker reads it.
	Secret string
	// Hash is the stored form of Token.
	Hash []byte
}

// NewWorkSecret mints a fresh work item secret carrying a sessions token.
func NewWorkSecret() WorkSecret {
	token := randomToken(WorkTokenPrefix)
	payload, err := json.Marshal(map[string]string{"sessions_token": token})
	if err != nil {
		panic(fmt.Sprintf("auth: encode work secret: %v", err)) // a map of strings always encodes
	}
	return WorkSecret{Secret: base64.RawURLEncoding.EncodeToString(payload), Hash: Hash(token)}
}

// Cache remembers the values of credentials for a short time, keyed by
// their hashes, so that the database stays out of the hot path. A revoked
// credential keeps working for at most the TTL.
type Cache[V any] struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cached[V]
}

type cached[V any] struct {
	value   V
	expires time.Time
}

// NewCache returns a cache keeping values for ttl.
func NewCache[V any](ttl time.Duration) *Cache[V] {
	return &Cache[V]{ttl: ttl, now: time.Now, entries: map[[sha256.Size]byte]cached[V]{}}
}

// Get returns the value cached for hash, if any and fresh.
func (c *Cache[V]) Get(hash []byte) (V, bool) {
	var k [sha256.Size]byte
	copy(k[:], hash)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || !c.now().Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.value, true
}

// Put caches value for hash.
func (c *Cache[V]) Put(hash []byte, value V) {
	var k [sha256.Size]byte
	copy(k[:], hash)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) > 10_000 {
		clear(c.entries)
	}
	c.entries[k] = cached[V]{value: value, expires: c.now().Add(c.ttl)}
}
