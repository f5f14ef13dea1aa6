package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/mangohq/mango/api-server/internal/testserver"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// TestVaultLifecycle: a vault created through the console's form (its
// HTML name shown escaped, its metadata as sent) is listed and opened; a
// refused form comes back with what was wrong and the values sent; the
// vault is archived, then deleted.
func TestVaultLifecycle(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	client := fileSDK(srv)
	ctx := context.Background()

	if status, body := v.get("/console/vaults"); status != http.StatusOK || !strings.Contains(body, "No vaults") {
		t.Fatalf("empty vaults page: %d, want 200 saying No vaults", status)
	}
	if status, body := v.get("/console/vaults/new"); status != http.StatusOK || !strings.Contains(body, `name="display_name"`) {
		t.Fatalf("new vault page: %d, want the form", status)
	}
	id := vaultFromForm(t, v, "<script>x</script>", "team = infra\n\nenv=prod\n")
	got, err := client.Beta.Vaults.Get(ctx, id, anthropic.BetaVaultGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if got.DisplayName != "<script>x</script>" || len(got.Metadata) != 2 || got.Metadata["team"] != "infra" || got.Metadata["env"] != "prod" {
		t.Errorf("created vault = %s; want the name and metadata team=infra, env=prod", got.RawJSON())
	}
	for _, path := range []string{"/console/vaults", "/console/vaults/" + id} {
		status, body := v.get(path)
		if status != http.StatusOK || !strings.Contains(body, "&lt;script&gt;x&lt;/script&gt;") || strings.Contains(body, "<script>x</script>") {
			t.Errorf("%s: %d; want 200 with the name escaped, never raw", path, status)
		}
		for _, want := range []string{id, "<code>team</code> = infra", "<code>env</code> = prod", "active"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s lacks %q", path, want)
			}
		}
	}

	checkVaultFormRefused(t, v)

	if status, loc, _ := v.post("/console/vaults/"+id+"/archive", nil); status != http.StatusSeeOther || loc != "/console/vaults/"+id {
		t.Fatalf("archive: %d → %q", status, loc)
	}
	if got, err = client.Beta.Vaults.Get(ctx, id, anthropic.BetaVaultGetParams{}); err != nil || got.ArchivedAt.IsZero() {
		t.Errorf("archived vault through the SDK: %v, archived_at %v; want it set", err, got.ArchivedAt)
	}
	_, page := v.get("/console/vaults/" + id)
	if !strings.Contains(page, ">archived<") || strings.Contains(page, "/credentials/new") || strings.Contains(page, "Archive vault") {
		t.Errorf("archived vault's page: want it marked archived, without the add-credential links or the archive button")
	}
	if _, list := v.get("/console/vaults"); strings.Contains(list, id) {
		t.Errorf("the vaults list shows archived vault %s without include archived", id)
	}
	if _, list := v.get("/console/vaults?archived=1"); !strings.Contains(list, id) {
		t.Errorf("the vaults list with archived ones lacks %s", id)
	}

	if status, loc, _ := v.post("/console/vaults/"+id+"/delete", nil); status != http.StatusSeeOther || loc != "/console/vaults" {
		t.Fatalf("delete: %d → %q", status, loc)
	}
	if _, err := client.Beta.Vaults.Get(ctx, id, anthropic.BetaVaultGetParams{}); !sdkNotFound(err) {
		t.Errorf("deleted vault through the SDK: %v, want 404", err)
	}
	if status, _ := v.get("/console/vaults/" + id); status != http.StatusNotFound {
		t.Errorf("deleted vault's page: %d, want 404", status)
	}
}

// checkVaultFormRefused: a new-vault form the console or the API refuses
// comes back with an alert saying what was wrong and the values sent.
func checkVaultFormRefused(t *testing.T, v *visitor) {
	t.Helper()
	refused := []struct {
		name, displayName, metadata string
		status                      int
		want                        string
	}{
		{"metadata without =", "kept name", "team infra", http.StatusBadRequest, "metadata, line 1: &#34;team infra&#34; is not key=value"},
		{"metadata twice", "kept name", "a=1\na=2", http.StatusBadRequest, "key &#34;a&#34; is already on an earlier line"},
		{"no name", "", "a=1", http.StatusBadRequest, "display_name"},
	}
	for _, tc := range refused {
		status, _, body := v.post("/console/vaults", url.Values{"display_name": {tc.displayName}, "metadata": {tc.metadata}})
		if status != tc.status || !strings.Contains(body, tc.want) || !strings.Contains(body, `role="alert"`) {
			t.Errorf("%s: %d, want %d with an alert saying %q:\n%s", tc.name, status, tc.status, tc.want, body)
		}
		if tc.displayName != "" && !strings.Contains(body, `value="`+tc.displayName+`"`) {
			t.Errorf("%s: the form shown again lost the display name %q", tc.name, tc.displayName)
		}
	}
}

// Secrets posted in TestCredentialsNeverShowSecrets: none may come back
// in any page.
var postedSecrets = []string{"tok-STATIC-7f3a91", "tok-ACCESS-2b8c44", "tok-REFRESH-9d1e07", "tok-CLIENT-5c6f28", "val-ENV-0a4b39",
	"tok-REFUSED-CONFLICT-81ad", "tok-REFUSED-URL-3e9f", "tok-REPLACED-6b2d"}

// TestCredentialsNeverShowSecrets adds one credential of each type
// through the console's forms, and refused ones; the vault page shows
// each credential's non-secret fields (as the API stored them), the
// refused forms come back with the API's message and their other values
// but empty secret inputs, and no secret posted ever appears in a page.
func TestCredentialsNeverShowSecrets(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	client := fileSDK(srv)
	id := vaultFromForm(t, v, "Secrets", "")
	var pages []string
	seen := func(body string) { pages = append(pages, body) }

	for _, kind := range []string{"", "static_bearer", "mcp_oauth", "environment_variable"} {
		status, body := v.get("/console/vaults/" + id + "/credentials/new?type=" + kind)
		if status != http.StatusOK || !strings.Contains(body, `type="password" autocomplete="off"`) {
			t.Errorf("add-credential form %q: %d, want 200 with a password input that is not autocompleted", kind, status)
		}
		seen(body)
	}
	add := func(form url.Values) (int, string) {
		t.Helper()
		status, loc, body := v.post("/console/vaults/"+id+"/credentials", form)
		seen(body)
		if status == http.StatusSeeOther && loc != "/console/vaults/"+id {
			t.Errorf("add credential: redirected to %q, want the vault", loc)
		}
		return status, body
	}
	for _, form := range []url.Values{
		{"type": {"static_bearer"}, "display_name": {"Docs <b>MCP</b>"}, "mcp_server_url": {"https://docs.example.com/mcp"}, "token": {" " + postedSecrets[0] + " "}},
		{"type": {"mcp_oauth"}, "mcp_server_url": {"https://tracker.example.com/mcp"}, "access_token": {postedSecrets[1]}, "expires_at": {"2030-01-02T03:04"},
			"client_id": {"console-client"}, "token_endpoint": {"https://auth.example.com/token"}, "refresh_token": {postedSecrets[2]},
			"token_endpoint_auth": {"client_secret_basic"}, "client_secret": {postedSecrets[3]}, "scope": {"read write"}, "metadata": {"owner=ops"}},
		{"type": {"environment_variable"}, "secret_name": {"SEARCH_API_KEY"}, "secret_value": {postedSecrets[4]}, "networking": {"limited"},
			"allowed_hosts": {"api.search.example\n*.cdn.example:8443"}, "inject_header": {"1"}, "inject_body": {"1"}},
	} {
		if status, body := add(form); status != http.StatusSeeOther {
			t.Fatalf("add %s credential: %d, want 303:\n%s", form.Get("type"), status, body)
		}
	}
	checkStoredCredentials(t, client, id)

	// Refused: the API's message, the form's other values kept, its
	// secret inputs empty.
	status, body := add(url.Values{"type": {"static_bearer"}, "display_name": {"Second docs"}, "mcp_server_url": {"https://docs.example.com/mcp"},
		"token": {postedSecrets[5]}})
	if status != http.StatusConflict || !strings.Contains(body, "another live credential of vault") || !strings.Contains(body, `value="Second docs"`) ||
		!strings.Contains(body, `value="https://docs.example.com/mcp"`) {
		t.Errorf("a second credential for one MCP server: %d, want 409 with the API's message and the values kept:\n%s", status, body)
	}
	status, body = add(url.Values{"type": {"mcp_oauth"}, "mcp_server_url": {"ftp://files.example.com"}, "access_token": {postedSecrets[6]}, "client_id": {"kept-client"}})
	if status != http.StatusBadRequest || !strings.Contains(body, "auth.mcp_server_url") || !strings.Contains(body, `value="kept-client"`) {
		t.Errorf("a credential with an ftp URL: %d, want 400 naming auth.mcp_server_url, client id kept:\n%s", status, body)
	}

	_, page := v.get("/console/vaults/" + id)
	seen(page)
	for _, want := range []string{"Docs &lt;b&gt;MCP&lt;/b&gt;", "static_bearer", "https://docs.example.com/mcp", "mcp_oauth", "https://tracker.example.com/mcp",
		"2030-01-02T03:04:00Z", "console-client", "https://auth.example.com/token", "client_secret_basic", "read write", "<code>owner</code> = ops",
		"environment_variable", "SEARCH_API_KEY", "api.search.example", "*.cdn.example:8443", "request headers and request bodies"} {
		if !strings.Contains(page, want) {
			t.Errorf("vault page lacks %q", want)
		}
	}
	creds := credentialIDs(t, client, id)
	status, loc, body := v.post("/console/vaults/"+id+"/credentials/"+creds["static_bearer"]+"/secret",
		url.Values{"type": {"static_bearer"}, "secret": {postedSecrets[7]}})
	seen(body)
	if status != http.StatusSeeOther || loc != "/console/vaults/"+id {
		t.Errorf("replace the token: %d → %q, want 303 to the vault", status, loc)
	}
	for _, path := range []string{"/console/vaults", "/console/vaults/" + id, "/console/vaults/" + id + "?archived=1"} {
		_, body := v.get(path)
		seen(body)
	}
	for i, body := range pages {
		for _, secret := range postedSecrets {
			if strings.Contains(body, secret) {
				t.Errorf("page %d shows the secret %q", i, secret)
			}
		}
	}
}

// checkStoredCredentials checks through the SDK that the credentials of
// vault id are what the console's forms said.
func checkStoredCredentials(t *testing.T, client anthropic.Client, id string) {
	t.Helper()
	l, err := client.Beta.Vaults.Credentials.List(context.Background(), id, anthropic.BetaVaultCredentialListParams{})
	if err != nil || len(l.Data) != 3 {
		t.Fatalf("credentials of the vault: %v, %d; want 3", err, len(l.Data))
	}
	for _, c := range l.Data {
		a := c.Auth
		var ok bool
		switch a.Type {
		case "static_bearer":
			ok = a.MCPServerURL == "https://docs.example.com/mcp" && c.DisplayName == "Docs <b>MCP</b>"
		case "mcp_oauth":
			ok = a.MCPServerURL == "https://tracker.example.com/mcp" && a.ExpiresAt.Format("2006-01-02T15:04") == "2030-01-02T03:04" &&
				a.Refresh.ClientID == "console-client" && a.Refresh.TokenEndpoint == "https://auth.example.com/token" &&
				a.Refresh.TokenEndpointAuth.Type == "client_secret_basic" && a.Refresh.Scope == "read write" && c.Metadata["owner"] == "ops"
		case "environment_variable":
			ok = a.SecretName == "SEARCH_API_KEY" && a.Networking.Type == "limited" && len(a.Networking.AllowedHosts) == 2 &&
				a.InjectionLocation.Header && a.InjectionLocation.Body
		}
		if !ok {
			t.Errorf("credential %s = %s; not what the form said", c.ID, c.RawJSON())
		}
	}
}

// credentialIDs returns the ids of vault id's live credentials by type.
func credentialIDs(t *testing.T, client anthropic.Client, id string) map[string]string {
	t.Helper()
	l, err := client.Beta.Vaults.Credentials.List(context.Background(), id, anthropic.BetaVaultCredentialListParams{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range l.Data {
		out[c.Auth.Type] = c.ID
	}
	return out
}

// TestCredentialSecretReachesWorker: the token typed into the console
// (pasted with spaces around it) is the one a session's worker gets for
// the MCP server; a replaced one replaces it; an archived credential is
// shown archived (on request) and gives no token any more; a deleted one
// is gone.
func TestCredentialSecretReachesWorker(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	client := fileSDK(srv)
	ctx := context.Background()
	id := vaultFromForm(t, v, "Worker tokens", "")
	const server = "https://mcp.example.com/sse"
	if status, _, body := v.post("/console/vaults/"+id+"/credentials", url.Values{"type": {"static_bearer"}, "mcp_server_url": {server},
		"token": {"  first-token-1a2b\n"}}); status != http.StatusSeeOther {
		t.Fatalf("add credential: %d\n%s", status, body)
	}
	cred := credentialIDs(t, client, id)["static_bearer"]
	sid := sessionWithVault(t, client, id)
	if got := workerToken(t, srv, sid, server); got != "first-token-1a2b" {
		t.Errorf("the worker's token = %q, want the one typed, trimmed", got)
	}

	base := "/console/vaults/" + id + "/credentials/" + cred
	if status, _, body := v.post(base+"/secret", url.Values{"type": {"static_bearer"}, "secret": {"   "}}); status != http.StatusBadRequest ||
		!strings.Contains(body, "enter the new secret") {
		t.Errorf("replace with a blank secret: %d, want 400 asking for the secret", status)
	}
	if status, _, _ := v.post(base+"/secret", url.Values{"type": {"static_bearer"}, "secret": {"second-token-3c4d"}}); status != http.StatusSeeOther {
		t.Fatalf("replace the token: %d", status)
	}
	if got := workerToken(t, srv, sid, server); got != "second-token-3c4d" {
		t.Errorf("the worker's token after replacing it = %q, want second-token-3c4d", got)
	}

	if status, loc, _ := v.post(base+"/archive", nil); status != http.StatusSeeOther || loc != "/console/vaults/"+id {
		t.Fatalf("archive credential: %d → %q", status, loc)
	}
	if got := workerToken(t, srv, sid, server); got != "" {
		t.Errorf("the worker's token after archiving = %q, want none", got)
	}
	if _, page := v.get("/console/vaults/" + id); strings.Contains(page, cred) {
		t.Errorf("the vault page shows archived credential %s without include archived", cred)
	}
	if _, page := v.get("/console/vaults/" + id + "?archived=1"); !strings.Contains(page, cred) || !strings.Contains(page, "its secrets are erased") {
		t.Errorf("the vault page with archived credentials: want %s marked archived", cred)
	}
	if status, loc, _ := v.post(base+"/delete", nil); status != http.StatusSeeOther || loc != "/console/vaults/"+id {
		t.Fatalf("delete credential: %d → %q", status, loc)
	}
	_, err := client.Beta.Vaults.Credentials.Get(ctx, cred, anthropic.BetaVaultCredentialGetParams{VaultID: id})
	if !sdkNotFound(err) {
		t.Errorf("deleted credential through the SDK: %v, want 404", err)
	}
}

// workerToken is the token session sid's worker gets for the MCP server,
// "" when none.
func workerToken(t *testing.T, srv *testserver.Server, sid, server string) string {
	t.Helper()
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+srv.WorkerToken)
	resp, err := pb.NewCredentialsClient(conn).GetMCPCredential(ctx, &pb.GetMCPCredentialRequest{SessionId: sid, McpServerUrl: server})
	if err != nil {
		t.Fatalf("GetMCPCredential: %v", err)
	}
	return resp.GetToken()
}
