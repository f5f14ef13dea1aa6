package credentials_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/api-server/internal/credentials"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// tokenEndpoint rotates refresh tokens: each works once.
type tokenEndpoint struct {
	mu        sync.Mutex
	valid     map[string]bool
	n         int
	refreshes int
	refuse    bool
}

func newTokenEndpoint(t *testing.T, initial string) (*tokenEndpoint, string) {
	e := &tokenEndpoint{valid: map[string]bool{initial: true}}
	srv := httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(srv.Close)
	return e, srv.URL + "/token"
}

func (e *tokenEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	id, secret, ok := r.BasicAuth()
	rt := r.PostFormValue("refresh_token")
	w.Header().Set("Content-Type", "application/json")
	if !ok || id != "client-1" || secret != "client-secret-PLANTED" || r.PostFormValue("grant_type") != "refresh_token" {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
		return
	}
	if e.refuse || !e.valid[rt] {
		w.WriteHeader(http.StatusBadRequest)
		// Echoes the refused token, as some servers do: it must not leak.
		_, _ = fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"refresh token %s is not valid"}`, rt)
		return
	}
	delete(e.valid, rt)
	e.n++
	e.refreshes++
	next := fmt.Sprintf("refresh-%d", e.n)
	e.valid[next] = true
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": fmt.Sprintf("access-%d", e.n), "refresh_token": next,
		"token_type": "Bearer", "expires_in": 3600})
}

func (e *tokenEndpoint) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refreshes
}

type fixture struct {
	store *db.Store
	keys  *envelope.Keyring
	svc   *credentials.Service
	now   time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	keys, err := envelope.Parse("k1:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32))))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: dbtest.Store(t), keys: keys, now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	f.svc = &credentials.Service{Store: f.store, Secrets: keys, HTTP: http.DefaultClient, Now: func() time.Time { return f.now }}
	return f
}

func (f *fixture) vault(t *testing.T, id string) {
	t.Helper()
	if _, err := f.store.VaultCreate(context.Background(), &db.Vault{ID: id, DisplayName: id, CreatedAt: f.now, UpdatedAt: f.now}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) credential(t *testing.T, vaultID, id, typ, serverURL string, auth any, secrets map[string]string) {
	t.Helper()
	raw, err := json.Marshal(auth)
	if err != nil {
		t.Fatal(err)
	}
	sealed := db.Secrets{}
	for field, v := range secrets {
		if sealed[field], err = f.keys.Seal([]byte(v), db.CredentialSecretPurpose(id, field)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.store.CredentialCreate(context.Background(), &db.Credential{ID: id, VaultID: vaultID, AuthType: typ,
		MCPServerURL: serverURL, Auth: raw, CreatedAt: f.now, UpdatedAt: f.now}, sealed); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) session(t *testing.T, id string, vaults ...string) {
	t.Helper()
	if _, _, err := f.store.SessionCreate(context.Background(), db.SessionCreateParams{ID: id, AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{}`), Provider: "local", Metadata: map[string]string{}, Now: f.now, VaultIDs: vaults}, nil); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) stored(t *testing.T, credID, field string) string {
	t.Helper()
	sealed, err := f.store.CredentialSecrets(context.Background(), credID)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := f.svc.Open(credID, sealed)
	if err != nil {
		t.Fatal(err)
	}
	return secrets[field]
}

func sum(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func oauth(serverURL, tokenURL string, expires time.Time) credentials.MCPOAuth {
	return credentials.MCPOAuth{Type: "mcp_oauth", MCPServerURL: serverURL, ExpiresAt: &expires,
		Refresh: &credentials.Refresh{ClientID: "client-1", TokenEndpoint: tokenURL, TokenEndpointAuth: credentials.TokenEndpointAuth{Type: "client_secret_basic"}}}
}

// TestMCPTokenMatch: the first vault of the session, in its order, with a
// live credential for the server's URL (compared normalized) wins; a
// server no credential covers gets none; a refused static token is an
// authentication failure.
func TestMCPTokenMatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.vault(t, "vlt_a")
	f.vault(t, "vlt_b")
	f.credential(t, "vlt_a", "vcrd_a", db.CredentialStaticBearer, "https://mcp.example.com/mcp",
		credentials.StaticBearer{Type: "static_bearer", MCPServerURL: "https://mcp.example.com/mcp"}, map[string]string{"token": "token-a"})
	f.credential(t, "vlt_b", "vcrd_b", db.CredentialStaticBearer, "https://MCP.example.com:443/mcp/",
		credentials.StaticBearer{Type: "static_bearer", MCPServerURL: "https://MCP.example.com:443/mcp/"}, map[string]string{"token": "token-b"})
	f.session(t, "sesn_ba", "vlt_b", "vlt_a")
	f.session(t, "sesn_a", "vlt_a")
	f.session(t, "sesn_none")

	for _, tc := range []struct{ session, url, wantCred, wantToken string }{
		{"sesn_ba", "https://mcp.example.com/mcp", "vcrd_b", "token-b"},
		{"sesn_a", "https://mcp.example.com/mcp/", "vcrd_a", "token-a"},
		{"sesn_a", "https://other.example.com/mcp", "", ""},
		{"sesn_none", "https://mcp.example.com/mcp", "", ""},
	} {
		got, err := f.svc.MCPToken(ctx, tc.session, tc.url, nil)
		if err != nil || got.CredentialID != tc.wantCred || got.Token != tc.wantToken {
			t.Errorf("MCPToken(%s, %s) = %+v, %v; want %s with %q", tc.session, tc.url, got, err, tc.wantCred, tc.wantToken)
		}
	}
	_, err := f.svc.MCPToken(ctx, "sesn_a", "https://mcp.example.com/mcp", sum("token-a"))
	var ae *credentials.AuthError
	if !errors.As(err, &ae) || !errors.Is(err, credentials.ErrAuthFailed) || ae.CredentialID != "vcrd_a" || strings.Contains(err.Error(), "token-a") {
		t.Errorf("refused static token: err = %v; want an AuthError naming vcrd_a without the token", err)
	}
	if _, err := f.svc.MCPToken(ctx, "sesn_missing", "https://mcp.example.com/mcp", nil); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("unknown session: err = %v; want ErrNotFound", err)
	}
}

// TestMCPTokenRefresh: an access token close to its expiry, or refused by
// the server, is refreshed once and the rotated tokens are stored; a
// token already replaced is not refreshed again; a refused refresh is an
// AuthError that leaks no secret and leaves the tokens as they were.
func TestMCPTokenRefresh(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ep, tokenURL := newTokenEndpoint(t, "refresh-0")
	const url = "https://mcp.example.com/mcp"
	f.vault(t, "vlt_o")
	f.credential(t, "vlt_o", "vcrd_o", db.CredentialMCPOAuth, url, oauth(url, tokenURL, f.now.Add(10*time.Minute)),
		map[string]string{"access_token": "access-0", "refresh_token": "refresh-0", "client_secret": "client-secret-PLANTED"})
	f.session(t, "sesn_o", "vlt_o")

	got, err := f.svc.MCPToken(ctx, "sesn_o", url, nil)
	if err != nil || got.Token != "access-0" || ep.count() != 0 || got.CacheFor != credentials.MaxCache {
		t.Fatalf("fresh token = %+v, %v (refreshes %d); want access-0 cached a minute, no refresh", got, err, ep.count())
	}
	f.now = f.now.Add(9*time.Minute + 30*time.Second) // within the skew of the expiry
	got, err = f.svc.MCPToken(ctx, "sesn_o", url, nil)
	if err != nil || got.Token != "access-1" || ep.count() != 1 {
		t.Fatalf("expiring token = %+v, %v (refreshes %d); want access-1 after one refresh", got, err, ep.count())
	}
	if want := f.now.Add(time.Hour); got.ExpiresAt == nil || !got.ExpiresAt.Equal(want) {
		t.Errorf("expires_at = %v; want %v", got.ExpiresAt, want)
	}
	if a, r := f.stored(t, "vcrd_o", "access_token"), f.stored(t, "vcrd_o", "refresh_token"); a != "access-1" || r != "refresh-1" {
		t.Errorf("stored = %s, %s; want the rotated access-1, refresh-1", a, r)
	}
	// A stale token that was already replaced: the current one, no refresh.
	if got, err := f.svc.MCPToken(ctx, "sesn_o", url, sum("access-0")); err != nil || got.Token != "access-1" || ep.count() != 1 {
		t.Errorf("stale old token = %+v, %v (refreshes %d); want access-1 without a refresh", got, err, ep.count())
	}
	// The server refused the current one: refreshed although not expired.
	if got, err := f.svc.MCPToken(ctx, "sesn_o", url, sum("access-1")); err != nil || got.Token != "access-2" || ep.count() != 2 {
		t.Errorf("refused token = %+v, %v (refreshes %d); want access-2 after a second refresh", got, err, ep.count())
	}

	if _, err := f.store.WebhookEndpointCreate(ctx, &db.WebhookEndpoint{ID: "whep_refresh", URL: "https://example.com/hook",
		EnabledEvents: []string{"vault_credential.refresh_failed"}, SecretSealed: []byte("sealed")}, f.now); err != nil {
		t.Fatal(err)
	}
	ep.mu.Lock()
	ep.refuse = true
	ep.mu.Unlock()
	for range 2 { // a retry of the failing refresh notifies once
		_, err = f.svc.MCPToken(ctx, "sesn_o", url, sum("access-2"))
	}
	if !errors.Is(err, credentials.ErrAuthFailed) || !strings.Contains(err.Error(), "400 invalid_grant") || !strings.Contains(err.Error(), tokenURL) {
		t.Fatalf("refused refresh: err = %v; want an AuthError naming the endpoint and invalid_grant", err)
	}
	for _, secret := range []string{"access-2", "refresh-2", "client-secret-PLANTED"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q holds the secret %q", err, secret)
		}
	}
	if a, r := f.stored(t, "vcrd_o", "access_token"), f.stored(t, "vcrd_o", "refresh_token"); a != "access-2" || r != "refresh-2" {
		t.Errorf("after a refused refresh stored = %s, %s; want access-2, refresh-2 kept", a, r)
	}
	ds, err := f.store.WebhookDeliveries(ctx, "whep_refresh", 10)
	if err != nil || len(ds) != 1 || ds[0].EventType != "vault_credential.refresh_failed" || ds[0].ResourceID != "vcrd_o" {
		t.Errorf("deliveries after two refused refreshes: %+v, %v; want one vault_credential.refresh_failed of vcrd_o", ds, err)
	}
}

// TestMCPTokenConcurrentRefresh: many callers (as from several workers
// and replicas) asking at once for an expired token cause one refresh;
// all get the new token, and the stored refresh token is the newest (a
// rotating endpoint refuses reuse, so a lost one would end the
// credential).
func TestMCPTokenConcurrentRefresh(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ep, tokenURL := newTokenEndpoint(t, "refresh-0")
	const url = "https://mcp.example.com/mcp"
	f.vault(t, "vlt_c")
	f.credential(t, "vlt_c", "vcrd_c", db.CredentialMCPOAuth, url, oauth(url, tokenURL, f.now.Add(-time.Minute)),
		map[string]string{"access_token": "access-0", "refresh_token": "refresh-0", "client_secret": "client-secret-PLANTED"})
	f.session(t, "sesn_c", "vlt_c")
	// Two services, as two api-server replicas, sharing the database.
	other := *f.svc
	svcs := []*credentials.Service{f.svc, &other}
	var wg sync.WaitGroup
	tokens := make([]string, 8)
	errs := make([]error, 8)
	for i := range tokens {
		wg.Go(func() {
			got, err := svcs[i%2].MCPToken(ctx, "sesn_c", url, nil)
			tokens[i], errs[i] = got.Token, err
		})
	}
	wg.Wait()
	for i := range tokens {
		if errs[i] != nil || tokens[i] != "access-1" {
			t.Errorf("caller %d: %q, %v; want access-1", i, tokens[i], errs[i])
		}
	}
	if n := ep.count(); n != 1 {
		t.Errorf("refreshes = %d; want 1", n)
	}
	if r := f.stored(t, "vcrd_c", "refresh_token"); r != "refresh-1" {
		t.Errorf("stored refresh token = %s; want the newest, refresh-1", r)
	}
}
