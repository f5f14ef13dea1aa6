package envelope_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/envelope"
)

func key(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func TestSealOpen(t *testing.T) {
	k, err := envelope.Parse("k1:" + key(t))
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("ghp_planted_secret_value")
	sealed, err := k.Seal(secret, "resource/sesrsc_1")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, secret) {
		t.Fatal("sealed value contains the plaintext")
	}
	got, err := k.Open(sealed, "resource/sesrsc_1")
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open = %q, %v; want %q", got, err, secret)
	}
	if _, err := k.Open(sealed, "resource/sesrsc_2"); !errors.Is(err, envelope.ErrCorrupt) {
		t.Fatalf("Open with another purpose: err = %v, want ErrCorrupt", err)
	}
	tampered := append([]byte(nil), sealed...)
	tampered[len(tampered)-1] ^= 1
	if _, err := k.Open(tampered, "resource/sesrsc_1"); !errors.Is(err, envelope.ErrCorrupt) {
		t.Fatalf("Open of a tampered value: err = %v, want ErrCorrupt", err)
	}
	again, _ := k.Seal(secret, "resource/sesrsc_1")
	if bytes.Equal(again, sealed) {
		t.Fatal("two seals of one secret are equal: data keys or nonces are reused")
	}
}

func TestRotation(t *testing.T) {
	oldKey, newKey := key(t), key(t)
	old, _ := envelope.Parse("old:" + oldKey)
	sealed, err := old.Seal([]byte("s3cret"), "p")
	if err != nil {
		t.Fatal(err)
	}
	both, err := envelope.Parse("new:" + newKey + ",old:" + oldKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := both.Open(sealed, "p"); err != nil || string(got) != "s3cret" {
		t.Fatalf("a second key does not open: %q, %v", got, err)
	}
	rewrapped, changed, err := both.Rewrap(sealed, "p")
	if err != nil || !changed {
		t.Fatalf("Rewrap = changed %v, err %v; want changed", changed, err)
	}
	if id, _ := envelope.KeyID(rewrapped); id != "new" {
		t.Fatalf("rewrapped under %q, want new", id)
	}
	if _, changed, _ := both.Rewrap(rewrapped, "p"); changed {
		t.Fatal("Rewrap of a value under the primary key changed it")
	}
	onlyNew, _ := envelope.Parse("new:" + newKey)
	if got, err := onlyNew.Open(rewrapped, "p"); err != nil || string(got) != "s3cret" {
		t.Fatalf("after rotation the new key alone does not open: %q, %v", got, err)
	}
	_, err = onlyNew.Open(sealed, "p")
	if !errors.Is(err, envelope.ErrUnknownKey) || !strings.Contains(err.Error(), "old") {
		t.Fatalf("open under a removed key: err = %v, want ErrUnknownKey naming old", err)
	}
}

func TestParseErrors(t *testing.T) {
	good := key(t)
	for _, spec := range []string{"nokey", "k1:notbase64!!", "k1:" + base64.StdEncoding.EncodeToString([]byte("short")),
		"k1:" + good + ",k1:" + good, "bad id:" + good} {
		_, err := envelope.Parse(spec)
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", spec)
			continue
		}
		if strings.Contains(err.Error(), good) {
			t.Errorf("Parse error reveals key material: %v", err)
		}
	}
	empty, err := envelope.Parse("")
	if err != nil || !empty.Empty() {
		t.Fatalf("Parse(\"\") = %v, %v; want an empty keyring", empty, err)
	}
	if _, err := empty.Seal([]byte("x"), "p"); !errors.Is(err, envelope.ErrNoKeys) {
		t.Fatalf("Seal with no keys: err = %v, want ErrNoKeys", err)
	}
}
