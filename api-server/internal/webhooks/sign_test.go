package webhooks

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// idledBody is a thin payload as Mango sends it.
const idledBody = `{"type":"event","id":"wevt_01","created_at":"2026-01-02T03:04:05Z",` +
	`"data":{"type":"session.status_idled","id":"sesn_01","organization_id":"org_1","workspace_id":"wrkspc_1"}}`

// unwrap verifies body and headers as an SDK client holding secret does.
func unwrap(body []byte, h http.Header, secret string) (*anthropic.UnwrapWebhookEvent, error) {
	client := anthropic.NewClient(option.WithWebhookKey(secret))
	return client.Beta.Webhooks.Unwrap(body, h)
}

// newSecret returns a fresh secret or fails t.
func newSecret(t *testing.T) string {
	t.Helper()
	s, err := NewSecret()
	if err != nil {
		t.Fatalf("NewSecret: %v", err)
	}
	return s
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	a, b := newSecret(t), newSecret(t)
	for _, s := range []string{a, b} {
		enc, ok := strings.CutPrefix(s, SecretPrefix)
		if !ok {
			t.Fatalf("secret %q lacks the prefix %q", s, SecretPrefix)
		}
		key, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || len(key) != 32 {
			t.Fatalf("secret key decodes to %d bytes (err %v), want 32 bytes of standard base64", len(key), err)
		}
	}
	if a == b {
		t.Fatalf("two NewSecret calls returned the same secret %q", a)
	}
}

// TestSignVector checks the Standard Webhooks library's own test vector.
func TestSignVector(t *testing.T) {
	t.Parallel()
	got, err := Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}

func TestHeadersVerifyWithSDK(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	body := []byte(idledBody)
	h, err := Headers(secret, "wevt_01", time.Now(), body)
	if err != nil {
		t.Fatalf("Headers: %v", err)
	}
	for name, want := range map[string]string{"Content-Type": "application/json", "User-Agent": UserAgent, HeaderID: "wevt_01"} {
		if got := h.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	ev, err := unwrap(body, h, secret)
	if err != nil {
		t.Fatalf("SDK Unwrap of a signed body: %v, want success", err)
	}
	if ev.ID != "wevt_01" || ev.Data.Type != "session.status_idled" {
		t.Fatalf("SDK decoded id %q type %q, want wevt_01 session.status_idled", ev.ID, ev.Data.Type)
	}
	if got := ev.Data.AsSessionStatusIdled(); got.ID != "sesn_01" || got.WorkspaceID != "wrkspc_1" {
		t.Fatalf("SDK decoded data id %q workspace %q, want sesn_01 wrkspc_1", got.ID, got.WorkspaceID)
	}
}

func TestSDKRejects(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	body := []byte(idledBody)
	cases := []struct {
		name   string
		body   []byte
		secret string
		ts     time.Time
	}{
		{"tampered body", []byte(strings.Replace(idledBody, "sesn_01", "sesn_02", 1)), secret, time.Now()},
		{"wrong secret", body, newSecret(t), time.Now()},
		{"timestamp older than 5 minutes", body, secret, time.Now().Add(-6 * time.Minute)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h, err := Headers(secret, "wevt_01", c.ts, body)
			if err != nil {
				t.Fatalf("Headers: %v", err)
			}
			if _, err := unwrap(c.body, h, c.secret); err == nil {
				t.Fatalf("SDK Unwrap succeeded, want a verification error")
			}
		})
	}
}

func TestSignMalformedSecret(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{
		"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", // no prefix
		"whsec_not*base64!",
		"whsec_",
	} {
		_, err := Sign(secret, "wevt_01", time.Now(), []byte("{}"))
		if !errors.Is(err, ErrMalformedSecret) {
			t.Errorf("Sign with secret %q: error %v, want ErrMalformedSecret", secret, err)
			continue
		}
		if rest := strings.TrimPrefix(secret, SecretPrefix); rest != "" && strings.Contains(err.Error(), rest) {
			t.Errorf("Sign error %q contains the secret", err)
		}
		if _, err := Headers(secret, "wevt_01", time.Now(), nil); !errors.Is(err, ErrMalformedSecret) {
			t.Errorf("Headers with secret %q: error %v, want ErrMalformedSecret", secret, err)
		}
	}
}
