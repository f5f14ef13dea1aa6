package wire

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// Planted secrets: one per secret field, at create and at update. None
// may ever come back in a response, a log line or the database in clear.
var plantedSecrets = map[string]string{
	"static token":          "PLANTED_static_bearer_token_a1",
	"static token update":   "PLANTED_static_bearer_token_a2",
	"access token":          "PLANTED_oauth_access_token_b1",
	"access token update":   "PLANTED_oauth_access_token_b2",
	"refresh token":         "PLANTED_oauth_refresh_token_c1",
	"refresh token update":  "PLANTED_oauth_refresh_token_c2",
	"client secret":         "PLANTED_oauth_client_secret_d1",
	"client secret update":  "PLANTED_oauth_client_secret_d2",
	"secret value":          "PLANTED env secret value e1",
	"secret value update":   "PLANTED env secret value e2",
	"refused create secret": "PLANTED_refused_create_token_f1",
}

// scanForSecrets fails the test when any planted secret occurs in text.
func scanForSecrets(t *testing.T, where, text string) {
	t.Helper()
	for name, v := range plantedSecrets {
		if strings.Contains(text, v) {
			t.Errorf("%s contains the planted %s", where, name)
		}
	}
}

// vaultsRun holds the state TestVaultsAndCredentials's steps share: the
// vaults and credentials made so far and every response body kept for the
// secret scan.
type vaultsRun struct {
	client   anthropic.Client
	ctx      context.Context
	creds    anthropic.BetaVaultCredentialService
	v        *anthropic.BetaManagedAgentsVault
	static   *anthropic.BetaManagedAgentsCredential
	oauth    *anthropic.BetaManagedAgentsCredential
	envVault *anthropic.BetaManagedAgentsVault
	envCred  *anthropic.BetaManagedAgentsCredential
	bodies   []string
}

func (r *vaultsRun) keep(raw string) { r.bodies = append(r.bodies, raw) }

// TestVaultsAndCredentials drives the Vaults and Credentials APIs through
// the SDK with a planted secret in every secret field, then scans every
// response body, the server's logs and the database for them.
func TestVaultsAndCredentials(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	srv := testserver.Start(t, testserver.WithLogs(logs))
	client := newClient(t, srv)
	r := &vaultsRun{client: client, ctx: context.Background(), creds: client.Beta.Vaults.Credentials}

	r.createVault(t)
	r.createCredentials(t)
	r.refusedCreates(t)
	r.updateCredentials(t)
	r.environmentVariableCredential(t)
	r.reads(t)
	r.sessionVaults(t)
	r.archiveAndDelete(t)
	r.nothingLeaked(t, logs, srv.DatabaseURL)

	dv, err := client.Beta.Vaults.Delete(r.ctx, r.v.ID, anthropic.BetaVaultDeleteParams{})
	if err != nil || dv.ID != r.v.ID || dv.Type != "vault_deleted" {
		t.Fatalf("delete vault = %v, %v", dv, err)
	}
	_, err = client.Beta.Vaults.Get(r.ctx, r.v.ID, anthropic.BetaVaultGetParams{})
	wantAPIError(t, err, http.StatusNotFound)
}

// createVault creates the vault and updates its name and metadata.
func (r *vaultsRun) createVault(t *testing.T) {
	t.Helper()
	v, err := r.client.Beta.Vaults.New(r.ctx, anthropic.BetaVaultNewParams{DisplayName: "team", Metadata: map[string]string{"owner": "a"}})
	if err != nil {
		t.Fatalf("create vault: %v", err)
	}
	if !strings.HasPrefix(v.ID, "vlt_") || v.DisplayName != "team" || v.Metadata["owner"] != "a" || !v.ArchivedAt.IsZero() || v.Type != "vault" {
		t.Fatalf("vault = %s; want vlt_ id, the name and metadata, not archived", v.RawJSON())
	}
	v, err = r.client.Beta.Vaults.Update(r.ctx, v.ID, anthropic.BetaVaultUpdateParams{DisplayName: anthropic.String("team 2"),
		Metadata: map[string]string{"env": "prod"}})
	if err != nil || v.DisplayName != "team 2" || v.Metadata["owner"] != "a" || v.Metadata["env"] != "prod" {
		t.Fatalf("update vault = %v, %v; want the new name and both metadata keys", v, err)
	}
	r.v = v
}

// createCredentials creates a static_bearer and an mcp_oauth credential.
func (r *vaultsRun) createCredentials(t *testing.T) {
	t.Helper()
	ctx, creds, v := r.ctx, r.creds, r.v
	static, err := creds.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{DisplayName: anthropic.String("tracker"),
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: plantedSecrets["static token"], MCPServerURL: "https://tracker.example.com/mcp"}}})
	if err != nil {
		t.Fatalf("create static_bearer credential: %v", err)
	}
	r.keep(static.RawJSON())
	if sb, ok := static.Auth.AsAny().(anthropic.BetaManagedAgentsStaticBearerAuthResponse); !ok || sb.MCPServerURL != "https://tracker.example.com/mcp" ||
		!strings.HasPrefix(static.ID, "vcrd_") || static.VaultID != v.ID || static.DisplayName != "tracker" {
		t.Fatalf("static credential = %s", static.RawJSON())
	}
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	oauth, err := creds.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthCreateParams{
			AccessToken: plantedSecrets["access token"], MCPServerURL: "https://chat.example.com/mcp", ExpiresAt: anthropic.Time(expires),
			Refresh: anthropic.BetaManagedAgentsMCPOAuthRefreshParams{ClientID: "client-1", RefreshToken: plantedSecrets["refresh token"],
				TokenEndpoint: "https://auth.example.com/token", Scope: anthropic.String("read"),
				TokenEndpointAuth: anthropic.BetaManagedAgentsMCPOAuthRefreshParamsTokenEndpointAuthUnion{
					OfClientSecretPost: &anthropic.BetaManagedAgentsTokenEndpointAuthPostParam{ClientSecret: plantedSecrets["client secret"]}}}}}})
	if err != nil {
		t.Fatalf("create mcp_oauth credential: %v", err)
	}
	r.keep(oauth.RawJSON())
	mo, ok := oauth.Auth.AsAny().(anthropic.BetaManagedAgentsMCPOAuthAuthResponse)
	if !ok || !mo.ExpiresAt.Equal(expires) || mo.Refresh.ClientID != "client-1" || mo.Refresh.TokenEndpoint != "https://auth.example.com/token" ||
		mo.Refresh.TokenEndpointAuth.Type != "client_secret_post" || mo.Refresh.Scope != "read" {
		t.Fatalf("oauth credential = %s", oauth.RawJSON())
	}
	r.static, r.oauth = static, oauth
}

// refusedCreates: a conflicting credential and bad input are refused.
func (r *vaultsRun) refusedCreates(t *testing.T) {
	t.Helper()
	ctx, creds, v := r.ctx, r.creds, r.v
	// A second live credential for the same server conflicts.
	_, err := creds.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: plantedSecrets["refused create secret"], MCPServerURL: "https://tracker.example.com/mcp"}}})
	r.keep(apiErrorWithStatus(t, err, http.StatusConflict).RawJSON())
	// Bad input names the JSON path, never the secret.
	_, err = creds.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: plantedSecrets["refused create secret"], MCPServerURL: "http://tracker.example.com/mcp"}}})
	if e := apiErrorWithStatus(t, err, http.StatusBadRequest); !strings.Contains(e.RawJSON(), "auth.mcp_server_url") {
		t.Errorf("plain-http server URL: %s; want an error naming auth.mcp_server_url", e.RawJSON())
	} else {
		r.keep(e.RawJSON())
	}
	_, err = creds.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthCreateParams{
			AccessToken: plantedSecrets["refused create secret"], MCPServerURL: "https://x.example.com/mcp",
			Refresh: anthropic.BetaManagedAgentsMCPOAuthRefreshParams{ClientID: "c", RefreshToken: plantedSecrets["refused create secret"],
				TokenEndpoint: "ftp://auth.example.com/token",
				TokenEndpointAuth: anthropic.BetaManagedAgentsMCPOAuthRefreshParamsTokenEndpointAuthUnion{
					OfNone: &anthropic.BetaManagedAgentsTokenEndpointAuthNoneParam{}}}}}})
	if e := apiErrorWithStatus(t, err, http.StatusBadRequest); !strings.Contains(e.RawJSON(), "auth.refresh.token_endpoint") {
		t.Errorf("ftp token endpoint: %s; want an error naming auth.refresh.token_endpoint", e.RawJSON())
	} else {
		r.keep(e.RawJSON())
	}
}

// updateCredentials: updates replace secrets and keep the rest.
func (r *vaultsRun) updateCredentials(t *testing.T) {
	t.Helper()
	ctx, creds, v := r.ctx, r.creds, r.v
	static, err := creds.Update(ctx, r.static.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID, DisplayName: anthropic.String("tracker 2"),
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerUpdateParams{
			Token: anthropic.String(plantedSecrets["static token update"])}}})
	if err != nil || static.DisplayName != "tracker 2" || static.Auth.MCPServerURL != "https://tracker.example.com/mcp" {
		t.Fatalf("update static credential = %v, %v", static, err)
	}
	r.static = static
	r.keep(static.RawJSON())
	oauth, err := creds.Update(ctx, r.oauth.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID,
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthUpdateParams{
			AccessToken: anthropic.String(plantedSecrets["access token update"]),
			Refresh: anthropic.BetaManagedAgentsMCPOAuthRefreshUpdateParams{RefreshToken: anthropic.String(plantedSecrets["refresh token update"]),
				TokenEndpointAuth: anthropic.BetaManagedAgentsMCPOAuthRefreshUpdateParamsTokenEndpointAuthUnion{
					OfClientSecretBasic: &anthropic.BetaManagedAgentsTokenEndpointAuthBasicUpdateParam{ClientSecret: anthropic.String(plantedSecrets["client secret update"])}}}}}})
	if err != nil || oauth.Auth.Refresh.TokenEndpointAuth.Type != "client_secret_post" || oauth.Auth.Refresh.ClientID != "client-1" {
		t.Fatalf("update oauth credential = %v, %v; want the stored auth type kept", oauth, err)
	}
	r.oauth = oauth
	r.keep(oauth.RawJSON())
	_, err = creds.Update(ctx, oauth.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID,
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerUpdateParams{
			Token: anthropic.String(plantedSecrets["refused create secret"])}}})
	r.keep(apiErrorWithStatus(t, err, http.StatusBadRequest).RawJSON())
}

// environmentVariableCredential: the environment_variable credential
// lives in a vault of its own.
func (r *vaultsRun) environmentVariableCredential(t *testing.T) {
	t.Helper()
	ctx, creds := r.ctx, r.creds
	envVault, err := r.client.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "env"})
	if err != nil {
		t.Fatal(err)
	}
	r.envVault = envVault
	envCred, err := creds.New(ctx, envVault.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfEnvironmentVariable: &anthropic.BetaManagedAgentsEnvironmentVariableCreateParams{
			SecretName: "API_TOKEN", SecretValue: plantedSecrets["secret value"],
			Networking: anthropic.BetaManagedAgentsCredentialNetworkingParamsOfLimited([]string{"api.example.com"})}}})
	if err != nil {
		t.Fatalf("create environment_variable credential: %v", err)
	}
	r.keep(envCred.RawJSON())
	ev, ok := envCred.Auth.AsAny().(anthropic.BetaManagedAgentsEnvironmentVariableAuthResponse)
	if !ok || ev.SecretName != "API_TOKEN" || ev.Networking.Type != "limited" || !slices.Equal(ev.Networking.AllowedHosts, []string{"api.example.com"}) ||
		!ev.InjectionLocation.Header {
		t.Fatalf("environment variable credential = %s", envCred.RawJSON())
	}
	envCred, err = creds.Update(ctx, envCred.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: envVault.ID,
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfEnvironmentVariable: &anthropic.BetaManagedAgentsEnvironmentVariableUpdateParams{
			SecretValue:       anthropic.String(plantedSecrets["secret value update"]),
			InjectionLocation: anthropic.BetaManagedAgentsInjectionLocationUpdateParams{Body: anthropic.Bool(true)}}}})
	if err != nil || !envCred.Auth.InjectionLocation.Body || !envCred.Auth.InjectionLocation.Header {
		t.Fatalf("update environment variable credential = %v, %v", envCred, err)
	}
	r.envCred = envCred
	r.keep(envCred.RawJSON())
}

// reads gets each credential, lists the vault's credentials and the vaults.
func (r *vaultsRun) reads(t *testing.T) {
	t.Helper()
	ctx, creds, v := r.ctx, r.creds, r.v
	for _, c := range []*anthropic.BetaManagedAgentsCredential{r.static, r.oauth} {
		got, err := creds.Get(ctx, c.ID, anthropic.BetaVaultCredentialGetParams{VaultID: v.ID})
		if err != nil || got.ID != c.ID {
			t.Fatalf("get credential %s = %v, %v", c.ID, got, err)
		}
		r.keep(got.RawJSON())
	}
	page, err := creds.List(ctx, v.ID, anthropic.BetaVaultCredentialListParams{})
	if err != nil || len(page.Data) != 2 || page.Data[0].ID != r.oauth.ID {
		t.Fatalf("list credentials = %v, %v; want the two, newest first", page, err)
	}
	r.keep(page.RawJSON())
	vpage, err := r.client.Beta.Vaults.List(ctx, anthropic.BetaVaultListParams{Limit: anthropic.Int(1)})
	if err != nil || len(vpage.Data) != 1 || vpage.Data[0].ID != r.envVault.ID || vpage.NextPage == "" {
		t.Fatalf("list vaults (limit 1) = %v, %v; want the newest and a next page", vpage, err)
	}
}

// sessionVaults: sessions take vault_ids; an environment_variable
// credential needs an egress gateway no provider has.
func (r *vaultsRun) sessionVaults(t *testing.T) {
	t.Helper()
	client, ctx, v := r.client, r.ctx, r.v
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "vaults", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "vaults-" + agent.ID})
	if err != nil {
		t.Fatal(err)
	}
	newSession := func(vaultIDs ...string) (*anthropic.BetaManagedAgentsSession, error) {
		return client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID, VaultIDs: vaultIDs})
	}
	sess, err := newSession(v.ID)
	if err != nil || !slices.Equal(sess.VaultIDs, []string{v.ID}) {
		t.Fatalf("session with a vault = %v, %v; want vault_ids [%s]", sess, err, v.ID)
	}
	_, err = newSession(v.ID, "vlt_000000nosuchvault000000")
	if e := apiErrorWithStatus(t, err, http.StatusBadRequest); !strings.Contains(e.RawJSON(), "vault_ids[1]") {
		t.Errorf("unknown vault: %s; want an error naming vault_ids[1]", e.RawJSON())
	}
	_, err = newSession(r.envVault.ID)
	if e := apiErrorWithStatus(t, err, http.StatusUnprocessableEntity); !strings.Contains(e.RawJSON(), r.envCred.ID) || !strings.Contains(e.RawJSON(), `provider \"local\"`) {
		t.Errorf("vault with an environment_variable credential: %s; want 422 naming %s and the provider", e.RawJSON(), r.envCred.ID)
	}
	other, err := client.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "other"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err = client.Beta.Sessions.Update(ctx, sess.ID, anthropic.BetaSessionUpdateParams{VaultIDs: []string{other.ID, v.ID}})
	if err != nil || !slices.Equal(sess.VaultIDs, []string{other.ID, v.ID}) {
		t.Fatalf("session update vault_ids = %v, %v; want [%s %s]", sess, err, other.ID, v.ID)
	}
	if _, err := client.Beta.Vaults.Archive(ctx, other.ID, anthropic.BetaVaultArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	_, err = client.Beta.Sessions.Update(ctx, sess.ID, anthropic.BetaSessionUpdateParams{VaultIDs: []string{v.ID, other.ID}})
	if e := apiErrorWithStatus(t, err, http.StatusBadRequest); !strings.Contains(e.RawJSON(), "vault_ids[1]") || !strings.Contains(e.RawJSON(), "archived") {
		t.Errorf("archived vault: %s; want an error naming vault_ids[1] as archived", e.RawJSON())
	}
	got, err := client.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
	if err != nil || !slices.Equal(got.VaultIDs, []string{other.ID, v.ID}) {
		t.Fatalf("session get vault_ids = %v, %v", got, err)
	}
}

// archiveAndDelete archives the static credential and deletes the oauth one.
func (r *vaultsRun) archiveAndDelete(t *testing.T) {
	t.Helper()
	ctx, creds, v := r.ctx, r.creds, r.v
	archived, err := creds.Archive(ctx, r.static.ID, anthropic.BetaVaultCredentialArchiveParams{VaultID: v.ID})
	if err != nil || archived.ArchivedAt.IsZero() {
		t.Fatalf("archive credential = %v, %v", archived, err)
	}
	r.keep(archived.RawJSON())
	if page, err := creds.List(ctx, v.ID, anthropic.BetaVaultCredentialListParams{}); err != nil || len(page.Data) != 1 {
		t.Fatalf("list after archive = %v, %v; want one live credential", page, err)
	}
	del, err := creds.Delete(ctx, r.oauth.ID, anthropic.BetaVaultCredentialDeleteParams{VaultID: v.ID})
	if err != nil || del.ID != r.oauth.ID || del.Type != "vault_credential_deleted" {
		t.Fatalf("delete credential = %v, %v", del, err)
	}
	_, err = creds.Get(ctx, r.oauth.ID, anthropic.BetaVaultCredentialGetParams{VaultID: v.ID})
	wantAPIError(t, err, http.StatusNotFound)
}

// nothingLeaked scans the kept responses, the server's logs and the
// database for the planted secrets.
func (r *vaultsRun) nothingLeaked(t *testing.T, logs *lockedBuffer, databaseURL string) {
	t.Helper()
	ctx := r.ctx
	for i, b := range r.bodies {
		scanForSecrets(t, "response "+string(rune('A'+i)), b)
	}
	scanForSecrets(t, "the server log", logs.String())
	if !strings.Contains(logs.String(), "/credentials") {
		t.Errorf("the server log has no request lines for /credentials; the log scan would see nothing")
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var stored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM vault_credential_secrets`).Scan(&stored); err != nil || stored == 0 {
		t.Fatalf("stored secrets = %d, %v; want some to scan", stored, err)
	}
	for name, val := range plantedSecrets {
		var leaks int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM vault_credential_secrets WHERE position($1::bytea IN sealed) > 0)
			+ (SELECT count(*) FROM vault_credentials WHERE position($2 IN auth::text) > 0 OR position($2 IN metadata::text) > 0)`,
			[]byte(val), val).Scan(&leaks); err != nil {
			t.Fatal(err)
		}
		if leaks != 0 {
			t.Errorf("%d rows hold the planted %s in clear", leaks, name)
		}
	}
}

// TestCredentialsWithoutVaultKeys: a server without MANGO_VAULT_KEYS
// cannot store secrets, so creating a credential answers 422.
func TestCredentialsWithoutVaultKeys(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_VAULT_KEYS", ""))
	client := newClient(t, srv)
	ctx := context.Background()
	v, err := client.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "keyless"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Beta.Vaults.Credentials.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: plantedSecrets["static token"], MCPServerURL: "https://tracker.example.com/mcp"}}})
	e := apiErrorWithStatus(t, err, http.StatusUnprocessableEntity)
	if !strings.Contains(e.RawJSON(), "auth.token") {
		t.Errorf("422 body %s; want it to name auth.token", e.RawJSON())
	}
	scanForSecrets(t, "the 422 body", e.RawJSON())
}

// TestCredentialValidation: bad vault and credential input answers 400
// naming the JSON path, and never repeats a secret.
func TestCredentialValidation(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	r := do(t, srv, http.MethodPost, "/v1/vaults", "application/json", []byte(`{"display_name":"v"}`), nil)
	var v struct{ ID string }
	if err := json.Unmarshal(r.body, &v); err != nil || v.ID == "" {
		t.Fatalf("create vault: %s", r.body)
	}
	const secret = "PLANTED_validation_secret_z9"
	sb := func(extra string) string {
		return `{"auth":{"type":"static_bearer","mcp_server_url":"https://m.example.com/mcp","token":"` + secret + `"` + extra + `}}`
	}
	oauth := func(refresh string) string {
		return `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://m.example.com/mcp","access_token":"` + secret + `","refresh":` + refresh + `}}`
	}
	env := func(members string) string {
		return `{"auth":{"type":"environment_variable","secret_value":"` + secret + `"` + members + `}}`
	}
	tests := []struct {
		name, path, body string
		status           int
		message          string
	}{
		{"vault without name", "/v1/vaults", `{}`, 400, "display_name: is required"},
		{"vault name too long", "/v1/vaults", `{"display_name":"` + strings.Repeat("x", 256) + `"}`, 400, "display_name"},
		{"missing auth", "", `{}`, 400, "auth: is required"},
		{"unknown type", "", `{"auth":{"type":"basic","token":"` + secret + `"}}`, 400, "auth.type"},
		{"foreign member", "", sb(`,"secret_name":"X"`), 400, "auth.secret_name"},
		{"missing token", "", `{"auth":{"type":"static_bearer","mcp_server_url":"https://m.example.com/mcp"}}`, 400, "auth.token: is required"},
		{"token with spaces", "", `{"auth":{"type":"static_bearer","mcp_server_url":"https://m.example.com/mcp","token":"a ` + secret + `"}}`, 400, "auth.token"},
		{"url with user", "", `{"auth":{"type":"static_bearer","mcp_server_url":"https://u:p@m.example.com/mcp","token":"` + secret + `"}}`, 400, "auth.mcp_server_url"},
		{"refresh without client id", "", oauth(`{"refresh_token":"` + secret + `","token_endpoint":"https://a.example.com/t","token_endpoint_auth":{"type":"none"}}`), 400, "auth.refresh.client_id"},
		{"refresh without endpoint auth", "", oauth(`{"client_id":"c","refresh_token":"` + secret + `","token_endpoint":"https://a.example.com/t"}`), 400, "auth.refresh.token_endpoint_auth"},
		{"post without secret", "", oauth(`{"client_id":"c","refresh_token":"` + secret + `","token_endpoint":"https://a.example.com/t","token_endpoint_auth":{"type":"client_secret_post"}}`), 400, "auth.refresh.token_endpoint_auth.client_secret"},
		{"bad secret name", "", env(`,"secret_name":"1X","networking":{"type":"unrestricted"}`), 400, "auth.secret_name"},
		{"missing networking", "", env(`,"secret_name":"X"`), 400, "auth.networking"},
		{"limited without hosts", "", env(`,"secret_name":"X","networking":{"type":"limited"}`), 400, "auth.networking.allowed_hosts"},
		{"no injection location", "", env(`,"secret_name":"X","networking":{"type":"unrestricted"},"injection_location":{"body":false,"header":false}`), 400, "auth.injection_location"},
		{"unknown vault", "/v1/vaults/vlt_000000000000000000000000/credentials", sb(""), 404, "vault"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/vaults/" + v.ID + "/credentials"
			}
			r := do(t, srv, http.MethodPost, path, "application/json", []byte(tc.body), nil)
			if r.status != tc.status || !strings.Contains(string(r.body), tc.message) {
				t.Fatalf("status %d body %s; want %d naming %q", r.status, r.body, tc.status, tc.message)
			}
			if strings.Contains(string(r.body), secret) {
				t.Fatalf("the error repeats the secret: %s", r.body)
			}
		})
	}
}
