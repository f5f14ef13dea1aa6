// Package envelope encrypts the secrets the api-server stores (repository
// tokens of session resources, and later vault credentials) with envelope
// encryption: every secret gets a random 256-bit data key, the secret is
// sealed with it (AES-256-GCM), and the data key is wrapped by a
// key-encryption key (AES-256-GCM too) named by an id. Only the wrapped data
// key and the key's id are stored beside the ciphertext, so an operator
// rotates key-encryption keys without touching the secrets' ciphertext.
//
// Keys come from MANGO_VAULT_KEYS: a comma-separated list of id:base64 pairs
// (32 bytes each, standard or URL base64). The first key seals; every key
// listed opens. Rotation: put the new key first, keep the old ones until
// everything was re-wrapped.
package envelope

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// EnvKeys is the variable holding the key-encryption keys.
const EnvKeys = "MANGO_VAULT_KEYS"

// Errors.
var (
	// ErrNoKeys reports a Keyring with no key: nothing can be sealed.
	ErrNoKeys = errors.New("no key-encryption key is configured")
	// ErrUnknownKey reports a sealed value wrapped by a key the Keyring
	// does not hold; the error names the key id.
	ErrUnknownKey = errors.New("sealed with an unknown key")
	// ErrCorrupt reports a sealed value that fails authentication or
	// cannot be parsed.
	ErrCorrupt = errors.New("sealed value is corrupt or was sealed for another purpose")
)

// version is the first byte of every sealed value.
const version = 1

var keyID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Keyring holds the key-encryption keys. The zero value holds none.
type Keyring struct {
	ids  []string
	keys map[string]cipher.AEAD
}

// Parse reads a key list in the MANGO_VAULT_KEYS format. An empty string
// gives an empty Keyring (which opens and seals nothing). Errors name the
// offending entry by position and id, never the key material.
func Parse(spec string) (*Keyring, error) {
	k := &Keyring{keys: map[string]cipher.AEAD{}}
	if strings.TrimSpace(spec) == "" {
		return k, nil
	}
	for i, entry := range strings.Split(spec, ",") {
		id, b64, ok := strings.Cut(strings.TrimSpace(entry), ":")
		if !ok || !keyID.MatchString(id) {
			return nil, fmt.Errorf("%s entry %d: want id:base64 with an id of letters, digits, '.', '_' or '-'", EnvKeys, i+1)
		}
		raw, err := decodeKey(b64)
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("%s entry %d (%s): the key must be 32 bytes in base64", EnvKeys, i+1, id)
		}
		if _, dup := k.keys[id]; dup {
			return nil, fmt.Errorf("%s entry %d: key id %s is listed twice", EnvKeys, i+1, id)
		}
		aead, err := newAEAD(raw)
		if err != nil {
			return nil, fmt.Errorf("%s entry %d (%s): %w", EnvKeys, i+1, id, err)
		}
		k.ids = append(k.ids, id)
		k.keys[id] = aead
	}
	return k, nil
}

func decodeKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Empty reports whether the Keyring holds no key.
func (k *Keyring) Empty() bool { return k == nil || len(k.ids) == 0 }

// Has reports whether the Keyring holds the key named id.
func (k *Keyring) Has(id string) bool {
	_, ok := k.lookup(id)
	return ok
}

// Primary returns the id of the key that seals ("" when empty).
func (k *Keyring) Primary() string {
	if k.Empty() {
		return ""
	}
	return k.ids[0]
}

// Seal encrypts plaintext under a fresh data key wrapped by the primary
// key. purpose binds the value to its use (for example the row it is
// stored in): Open with another purpose fails.
//
// Layout: version(1) | len(id)(1) | id | wrapped data key (nonce 12 +
// 32 + tag 16) | nonce(12) | ciphertext+tag.
func (k *Keyring) Seal(plaintext []byte, purpose string) ([]byte, error) {
	if k.Empty() {
		return nil, ErrNoKeys
	}
	id := k.ids[0]
	dataKey := make([]byte, 32)
	if _, err := rand.Read(dataKey); err != nil {
		return nil, fmt.Errorf("generate data key: %w", err)
	}
	wrapped, err := seal(k.keys[id], dataKey, wrapAAD(id, purpose))
	if err != nil {
		return nil, err
	}
	aead, err := newAEAD(dataKey)
	if err != nil {
		return nil, err
	}
	body, err := seal(aead, plaintext, []byte(purpose))
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 2+len(id)+len(wrapped)+len(body))
	out = append(out, version, byte(len(id)))
	out = append(out, id...)
	out = append(out, wrapped...)
	return append(out, body...), nil
}

// Open decrypts a value sealed with purpose by any key of the Keyring.
func (k *Keyring) Open(sealed []byte, purpose string) ([]byte, error) {
	id, wrapped, body, err := split(sealed)
	if err != nil {
		return nil, err
	}
	kek, ok := k.lookup(id)
	if !ok {
		return nil, fmt.Errorf("key %s: %w", id, ErrUnknownKey)
	}
	dataKey, err := open(kek, wrapped, wrapAAD(id, purpose))
	if err != nil {
		return nil, err
	}
	aead, err := newAEAD(dataKey)
	if err != nil {
		return nil, ErrCorrupt
	}
	return open(aead, body, []byte(purpose))
}

// KeyID returns the id of the key that wrapped a sealed value.
func KeyID(sealed []byte) (string, error) {
	id, _, _, err := split(sealed)
	return id, err
}

// Rewrap re-wraps a sealed value's data key under the primary key, leaving
// its ciphertext as it is. A value already under the primary key is
// returned unchanged (changed false).
func (k *Keyring) Rewrap(sealed []byte, purpose string) (out []byte, changed bool, err error) {
	if k.Empty() {
		return nil, false, ErrNoKeys
	}
	id, wrapped, body, err := split(sealed)
	if err != nil {
		return nil, false, err
	}
	if id == k.ids[0] {
		return sealed, false, nil
	}
	kek, ok := k.lookup(id)
	if !ok {
		return nil, false, fmt.Errorf("key %s: %w", id, ErrUnknownKey)
	}
	dataKey, err := open(kek, wrapped, wrapAAD(id, purpose))
	if err != nil {
		return nil, false, err
	}
	primary := k.ids[0]
	rewrapped, err := seal(k.keys[primary], dataKey, wrapAAD(primary, purpose))
	if err != nil {
		return nil, false, err
	}
	out = make([]byte, 0, 2+len(primary)+len(rewrapped)+len(body))
	out = append(out, version, byte(len(primary)))
	out = append(out, primary...)
	out = append(out, rewrapped...)
	return append(out, body...), true, nil
}

func (k *Keyring) lookup(id string) (cipher.AEAD, bool) {
	if k == nil {
		return nil, false
	}
	a, ok := k.keys[id]
	return a, ok
}

// wrapAAD binds a wrapped data key to its key id and purpose.
func wrapAAD(id, purpose string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(id)))
	b = append(b, id...)
	return append(b, purpose...)
}

const wrappedLen = 12 + 32 + 16

func split(sealed []byte) (id string, wrapped, body []byte, err error) {
	if len(sealed) < 2 || sealed[0] != version {
		return "", nil, nil, ErrCorrupt
	}
	n := int(sealed[1])
	rest := sealed[2:]
	if n == 0 || len(rest) < n+wrappedLen+12+16 {
		return "", nil, nil, ErrCorrupt
	}
	return string(rest[:n]), rest[n : n+wrappedLen], rest[n+wrappedLen:], nil
}

func seal(aead cipher.AEAD, plaintext, aad []byte) ([]byte, error) {
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("generate nonce: %w", err)
	}
	return aead.Seal(nonce, nonce, plaintext, aad), nil
}

func open(aead cipher.AEAD, sealed, aad []byte) ([]byte, error) {
	ns := aead.NonceSize()
	if len(sealed) < ns+aead.Overhead() {
		return nil, ErrCorrupt
	}
	out, err := aead.Open(nil, sealed[:ns], sealed[ns:], aad)
	if err != nil {
		return nil, ErrCorrupt
	}
	return out, nil
}
