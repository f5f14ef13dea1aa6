package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/auth"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/httpapi"
	"github.com/mangohq/mango/db/dbtest"
)

const validateKeys = "v1:dmFsaWRhdGUta2V5LTAxMjM0NTY3ODlhYmNkZWYwMTI="

// oauthServers are an MCP server accepting one access token and a token
// endpoint rotating refresh tokens (a used one is revoked).
type oauthServers struct {
	mcp, token *httptest.Server

	mu      sync.Mutex
	access  string // the access token the MCP server accepts
	refresh string // the refresh token the endpoint accepts
	issued  int
	// during, when set, runs while the endpoint handles a refresh.
	during func()
}

func newOAuthServers(t *testing.T) *oauthServers {
	t.Helper()
	o := &oauthServers{refresh: "PLANTED_refresh_1"}
	o.mcp = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		ok := o.access != "" && r.Header.Get("Authorization") == "Bearer "+o.access
		o.mu.Unlock()
		if !ok {
			// A careless server echoes the token it rejected.
			http.Error(w, "rejected "+r.Header.Get("Authorization"), http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"t","version":"1"}}}`))
	}))
	o.token = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		during := o.during
		o.during = nil
		o.mu.Unlock()
		if during != nil {
			during()
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if r.PostForm.Get("grant_type") != "refresh_token" || r.PostForm.Get("refresh_token") != o.refresh ||
			r.PostForm.Get("client_id") != "client-1" || r.PostForm.Get("client_secret") != "PLANTED_client_secret" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant","seen":"` + r.PostForm.Get("refresh_token") + `"}`))
			return
		}
		o.issued++
		o.access = "fresh_access_" + string(rune('0'+o.issued))
		o.refresh = "PLANTED_refresh_" + string(rune('1'+o.issued))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": o.access, "refresh_token": o.refresh, "expires_in": 3600})
	}))
	t.Cleanup(o.mcp.Close)
	t.Cleanup(o.token.Close)
	return o
}

func newValidateAPI(t *testing.T, outbound *http.Client) anthropic.Client {
	t.Helper()
	keys, err := envelope.Parse(validateKeys)
	if err != nil {
		t.Fatal(err)
	}
	verifier := auth.NewVerifier(func(context.Context, []byte) (string, error) { return "key_test", nil }, time.Minute)
	api := httpapi.New(httpapi.Deps{Store: dbtest.Store(t), Keys: verifier, Secrets: keys, MaxBodyBytes: 1 << 20, Outbound: outbound})
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("k"), option.WithMaxRetries(0))
}

// TestCredentialValidate: a stale access token gets a 401 from the MCP
// server; the refresh succeeds and the rotated tokens are stored, so the
// next validation is valid; a revoked refresh token makes it invalid. No
// secret appears in a response, even when the servers echo them.
func TestCredentialValidate(t *testing.T) {
	t.Parallel()
	o := newOAuthServers(t)
	client := newValidateAPI(t, &http.Client{Timeout: 5 * time.Second})
	ctx := context.Background()
	v, err := client.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "v"})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := client.Beta.Vaults.Credentials.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthCreateParams{
			AccessToken: "PLANTED_stale_access", MCPServerURL: o.mcp.URL + "/mcp", ExpiresAt: anthropic.Time(time.Now().Add(-time.Minute)),
			Refresh: anthropic.BetaManagedAgentsMCPOAuthRefreshParams{ClientID: "client-1", RefreshToken: "PLANTED_refresh_1", TokenEndpoint: o.token.URL,
				TokenEndpointAuth: anthropic.BetaManagedAgentsMCPOAuthRefreshParamsTokenEndpointAuthUnion{
					OfClientSecretPost: &anthropic.BetaManagedAgentsTokenEndpointAuthPostParam{ClientSecret: "PLANTED_client_secret"}}}}}})
	if err != nil {
		t.Fatalf("create credential: %v", err)
	}
	validate := func() *anthropic.BetaManagedAgentsCredentialValidation {
		t.Helper()
		res, err := client.Beta.Vaults.Credentials.MCPOAuthValidate(ctx, cred.ID, anthropic.BetaVaultCredentialMCPOAuthValidateParams{VaultID: v.ID})
		if err != nil {
			t.Fatalf("validate: %v", err)
		}
		if strings.Contains(res.RawJSON(), "PLANTED") {
			t.Fatalf("the validation holds a secret: %s", res.RawJSON())
		}
		return res
	}

	res := validate()
	if res.Status != "unknown" || res.MCPProbe.HTTPResponse.StatusCode != 401 || res.MCPProbe.Method != "initialize" ||
		res.Refresh.Status != "succeeded" || !res.HasRefreshToken || res.CredentialID != cred.ID || res.VaultID != v.ID {
		t.Fatalf("first validation = %s; want unknown after a 401 and a successful refresh", res.RawJSON())
	}
	if !strings.Contains(res.MCPProbe.HTTPResponse.Body, "[redacted]") {
		t.Errorf("the probe body %q should show the echoed token redacted", res.MCPProbe.HTTPResponse.Body)
	}
	got, err := client.Beta.Vaults.Credentials.Get(ctx, cred.ID, anthropic.BetaVaultCredentialGetParams{VaultID: v.ID})
	if err != nil || got.Auth.ExpiresAt.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("credential after refresh = %v, %v; want expires_at about an hour ahead", got, err)
	}

	// The rotated access token is stored: valid.
	if res := validate(); res.Status != "valid" || res.JSON.MCPProbe.Raw() != "null" || res.JSON.Refresh.Raw() != "null" {
		t.Fatalf("second validation = %s; want valid without probe failure or refresh", res.RawJSON())
	}

	// The server forgets the token and the refresh token is revoked.
	o.mu.Lock()
	o.access, o.refresh = "", "revoked"
	o.mu.Unlock()
	res = validate()
	if res.Status != "invalid" || res.Refresh.Status != "failed" || res.Refresh.HTTPResponse.StatusCode != 400 {
		t.Fatalf("validation with a revoked refresh token = %s; want invalid, refresh failed with the endpoint's 400", res.RawJSON())
	}

	// Static bearer credentials are not validated.
	sb, err := client.Beta.Vaults.Credentials.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: "PLANTED_static", MCPServerURL: "https://s.example.com/mcp"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Beta.Vaults.Credentials.MCPOAuthValidate(ctx, sb.ID, anthropic.BetaVaultCredentialMCPOAuthValidateParams{VaultID: v.ID})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("validate a static_bearer credential: %v; want 400", err)
	}
}

// TestCredentialValidateGuard: the default outbound client refuses
// loopback addresses, so the probe gets no response (unknown).
func TestCredentialValidateGuard(t *testing.T) {
	t.Parallel()
	o := newOAuthServers(t)
	client := newValidateAPI(t, nil)
	ctx := context.Background()
	v, err := client.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "v"})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := client.Beta.Vaults.Credentials.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthCreateParams{
			AccessToken: "PLANTED_access", MCPServerURL: o.mcp.URL + "/mcp"}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Beta.Vaults.Credentials.MCPOAuthValidate(ctx, cred.ID, anthropic.BetaVaultCredentialMCPOAuthValidateParams{VaultID: v.ID})
	if err != nil || res.Status != "unknown" || res.MCPProbe.JSON.HTTPResponse.Raw() != "null" || res.HasRefreshToken {
		t.Fatalf("validate against a loopback server with the default client = %v, %v; want unknown without a response", res, err)
	}
}

// TestCredentialValidateKeepsNewerRefreshToken: when the refresh token is
// replaced while a validation's refresh is in flight, the newer one stays
// stored and the validation's rotated tokens are dropped.
func TestCredentialValidateKeepsNewerRefreshToken(t *testing.T) {
	t.Parallel()
	o := newOAuthServers(t)
	client := newValidateAPI(t, &http.Client{Timeout: 5 * time.Second})
	ctx := context.Background()
	v, err := client.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "v"})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := client.Beta.Vaults.Credentials.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthCreateParams{
			AccessToken: "PLANTED_stale_access", MCPServerURL: o.mcp.URL + "/mcp",
			Refresh: anthropic.BetaManagedAgentsMCPOAuthRefreshParams{ClientID: "client-1", RefreshToken: "PLANTED_refresh_1", TokenEndpoint: o.token.URL,
				TokenEndpointAuth: anthropic.BetaManagedAgentsMCPOAuthRefreshParamsTokenEndpointAuthUnion{
					OfClientSecretPost: &anthropic.BetaManagedAgentsTokenEndpointAuthPostParam{ClientSecret: "PLANTED_client_secret"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	o.during = func() {
		_, err := client.Beta.Vaults.Credentials.Update(ctx, cred.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID,
			Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthUpdateParams{
				Refresh: anthropic.BetaManagedAgentsMCPOAuthRefreshUpdateParams{RefreshToken: anthropic.String("PLANTED_refresh_newer")}}}})
		if err != nil {
			t.Errorf("update during the refresh: %v", err)
		}
	}
	o.mu.Unlock()
	validate := func() *anthropic.BetaManagedAgentsCredentialValidation {
		t.Helper()
		res, err := client.Beta.Vaults.Credentials.MCPOAuthValidate(ctx, cred.ID, anthropic.BetaVaultCredentialMCPOAuthValidateParams{VaultID: v.ID})
		if err != nil {
			t.Fatalf("validate: %v", err)
		}
		return res
	}
	if res := validate(); res.Refresh.Status != "succeeded" {
		t.Fatalf("first validation = %s; want a successful refresh", res.RawJSON())
	}
	// Only the newer refresh token works now: it must be the stored one.
	o.mu.Lock()
	o.access, o.refresh = "", "PLANTED_refresh_newer"
	o.mu.Unlock()
	if res := validate(); res.Refresh.Status != "succeeded" {
		t.Fatalf("validation after the concurrent update = %s; want the newer refresh token used (refresh succeeded)", res.RawJSON())
	}
}
