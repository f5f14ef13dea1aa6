package credentials_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/api-server/internal/credentials"
	"github.com/mangohq/mango/db"
)

// TestExchangeFailureNamesTheStep: a refresh that gets no usable answer
// (TLS refused, connection refused, answer cut short) is an error naming
// the step that failed and holding no secret; an endpoint's refusal is a
// *RefusedError with the redacted answer.
func TestExchangeFailureNamesTheStep(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{credentials.FieldRefreshToken: "refresh-SECRET-1", credentials.FieldClientSecret: "client-SECRET-2"}
	tests := []struct {
		name     string
		endpoint func(t *testing.T) string
		wantStep string // "" : a refusal
	}{
		{"untrusted TLS certificate", func(t *testing.T) string {
			srv := httptest.NewTLSServer(http.NotFoundHandler())
			t.Cleanup(srv.Close)
			return srv.URL + "/token"
		}, "send"},
		{"connection refused", func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			_ = l.Close()
			return "http://" + addr + "/token"
		}, "send"},
		{"answer cut short", func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "1000")
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte(`{"access_token":"acc`))
			}))
			t.Cleanup(srv.Close)
			return srv.URL + "/token"
		}, "read the answer"},
		{"refused", func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"error":"invalid_grant","echo":"` + r.PostFormValue("refresh_token") + `"}`))
			}))
			t.Cleanup(srv.Close)
			return srv.URL + "/token"
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &credentials.Refresh{ClientID: "client-1", TokenEndpoint: tt.endpoint(t),
				TokenEndpointAuth: credentials.TokenEndpointAuth{Type: "client_secret_post"}}
			tok, err := credentials.Exchange(context.Background(), &http.Client{}, r, secrets, credentials.Redactor(secrets))
			if tok != nil || err == nil {
				t.Fatalf("Exchange = %+v, %v; want no tokens and an error", tok, err)
			}
			var refused *credentials.RefusedError
			if tt.wantStep == "" {
				if !errors.As(err, &refused) || refused.Response.StatusCode != http.StatusBadRequest ||
					!strings.Contains(refused.Response.Body, "invalid_grant") {
					t.Fatalf("Exchange error = %v; want a *RefusedError with the 400 invalid_grant answer", err)
				}
				if strings.Contains(refused.Response.Body, "refresh-SECRET-1") {
					t.Errorf("refusal body %q holds the refresh token; want it redacted", refused.Response.Body)
				}
			} else {
				if errors.As(err, &refused) {
					t.Fatalf("Exchange error = %v, a refusal; want a failure to %s", err, tt.wantStep)
				}
				if !strings.Contains(err.Error(), "token endpoint") || !strings.Contains(err.Error(), tt.wantStep) {
					t.Errorf("Exchange error = %q; want it to name the token endpoint and the step %q", err, tt.wantStep)
				}
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("Exchange error %q holds the secret %q", err, s)
				}
			}
		})
	}
}

// TestMCPTokenRefreshUnreachable: a refresh whose token endpoint cannot be
// reached is an AuthError whose public reason says so and whose cause
// (for the log) names the failed step, neither holding a secret.
func TestMCPTokenRefreshUnreachable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tokenURL := "http://" + l.Addr().String() + "/token"
	_ = l.Close()
	const url = "https://mcp.example.com/mcp"
	f.vault(t, "vlt_u")
	f.credential(t, "vlt_u", "vcrd_u", db.CredentialMCPOAuth, url, oauth(url, tokenURL, f.now.Add(-time.Minute)),
		map[string]string{"access_token": "access-0", "refresh_token": "refresh-0", "client_secret": "client-secret-PLANTED"})
	f.session(t, "sesn_u", "vlt_u")

	_, err = f.svc.MCPToken(context.Background(), "sesn_u", url, nil)
	var ae *credentials.AuthError
	if !errors.As(err, &ae) || !strings.Contains(ae.Reason, "could not be reached") {
		t.Fatalf("refresh at an unreachable endpoint: err = %v; want an AuthError saying it could not be reached", err)
	}
	if ae.Cause == nil || !strings.Contains(ae.Cause.Error(), "token endpoint: send") {
		t.Fatalf("AuthError cause = %v; want the failed send to the token endpoint", ae.Cause)
	}
	for _, secret := range []string{"access-0", "refresh-0", "client-secret-PLANTED"} {
		if strings.Contains(ae.Reason, secret) || strings.Contains(err.Error(), secret) {
			t.Errorf("AuthError %q holds the secret %q", err, secret)
		}
	}
}
