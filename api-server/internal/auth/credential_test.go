package auth

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Kind
	}{
		{"mango_envkey_abc", KindEnvironmentKey},
		{"mango_wst_abc", KindWorkToken},
		{"mango-test-key-0123456789abcdef", KindAPIKey},
		{"mango_env", KindAPIKey},
		{"", KindAPIKey},
	} {
		if got := KindOf(tc.in); got != tc.want {
			t.Errorf("KindOf(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestNewEnvironmentKey(t *testing.T) {
	s, h := NewEnvironmentKey()
	body, ok := strings.CutPrefix(s, EnvironmentKeyPrefix)
	if !ok || len(body) != 43 {
		t.Fatalf("key %q: want %s + 43 characters", s, EnvironmentKeyPrefix)
	}
	if string(h) != string(Hash(s)) {
		t.Error("hash is not the SHA-256 of the key")
	}
	if s2, _ := NewEnvironmentKey(); s2 == s {
		t.Error("two keys are equal")
	}
}

// TestWorkSecretDecodesAsTheSDKReadsIt decodes the secret as the SDK's
// sessionsTokenFromSecret does (base64url without padding, then JSON).
func TestWorkSecretDecodesAsTheSDKReadsIt(t *testing.T) {
	ws := NewWorkSecret()
	if strings.Contains(ws.Secret, "=") {
		t.Errorf("secret %q has padding", ws.Secret)
	}
	raw, err := base64.RawURLEncoding.DecodeString(ws.Secret)
	if err != nil {
		t.Fatalf("decode secret: %v", err)
	}
	var p struct {
		SessionsToken string `json:"sessions_token"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("secret payload %s: %v", raw, err)
	}
	if KindOf(p.SessionsToken) != KindWorkToken || len(p.SessionsToken) != len(WorkTokenPrefix)+43 {
		t.Errorf("sessions_token %q: want %s + 43 characters", p.SessionsToken, WorkTokenPrefix)
	}
	if string(ws.Hash) != string(Hash(p.SessionsToken)) {
		t.Error("hash is not the SHA-256 of the sessions token")
	}
}

func TestCacheExpires(t *testing.T) {
	c := NewCache[string](time.Minute)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	h := Hash("k")
	if _, ok := c.Get(h); ok {
		t.Fatal("empty cache hit")
	}
	c.Put(h, "v")
	if v, ok := c.Get(h); !ok || v != "v" {
		t.Fatalf("Get = %q, %v; want v, true", v, ok)
	}
	now = now.Add(time.Minute)
	if _, ok := c.Get(h); ok {
		t.Error("entry still served after its TTL")
	}
}
