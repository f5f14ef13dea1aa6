package wire

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/mangohq/mango/api-server/internal/app"
	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/mcptest"
	"github.com/mangohq/mango/proto/sessionwf"
)

// rotatedVaultKeys puts a new key first and keeps the test servers' key
// for decryption only: what an operator sets to rotate.
const newVaultKey = "rot2:bmV3LXRlc3Qta2V5LTAxMjM0NTY3ODlhYmNkZWYwMTI="

// TestAuthenticatedMCPThroughSDK is issue 14's acceptance: a vault holds
// an mcp_oauth credential whose access token is about to expire; a
// session using that vault runs turns (scripted fake model) calling the
// tools of an OAuth-protected MCP server. The server sees a valid token
// on every request and exactly one refresh; after a key rotation the old
// key is removed and the session goes on; a revoked refresh token gives a
// session.error mcp_authentication_failed_error naming the server, and
// the session stays usable. No token or client secret appears in any
// response, log, database row or Temporal history.
func TestAuthenticatedMCPThroughSDK(t *testing.T) {
	t.Parallel()
	mcpSrv := mcptest.NewOAuth(t)
	// The server honours the tokens for ten minutes; the credential says
	// the first one expires in 20 s, within the refresh skew.
	access, refresh := mcpSrv.Issue(10 * time.Minute)
	secrets := map[string]string{"access token": access, "refresh token": refresh, "client secret": mcpSrv.ClientSecret}

	apiLogs := &lockedBuffer{}
	srv := testserver.Start(t, testserver.WithLogs(apiLogs), testserver.WithEnv("MANGO_MCP_ALLOW_PRIVATE", "1"))
	workerEnv := map[string]string{"MANGO_MCP_ALLOW_PRIVATE": "1", "MANGO_LOG_LEVEL": "debug"}
	root := t.TempDir()
	w1 := startWorkerWith(t, srv, "wire-mcp-auth-1", root, workerEnv)
	c := newClient(t, srv)
	r := &mcpAuthRun{mcpSrv: mcpSrv, secrets: secrets}
	r.newSession(t, c, access, refresh)
	r.e = &turnEnv{srv: srv, client: c, root: root, worker: w1}

	r.twoTurnsOneRefresh(t, access)
	// Rotate the vault key and drop the old one: a new api-server on the
	// same database with only the new key, and a new worker, go on.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	w1.stop(syscall.SIGTERM)
	rotate(t, srv.DatabaseURL, newVaultKey+","+testserver.VaultKeys)
	srv2 := testserver.Start(t, testserver.WithDatabase(srv.DatabaseURL), testserver.WithLogs(apiLogs), testserver.WithEnv("MANGO_MCP_ALLOW_PRIVATE", "1"),
		testserver.WithEnv("MANGO_VAULT_KEYS", newVaultKey), testserver.WithEnv("MANGO_TASK_QUEUE_PREFIX", srv.TaskQueuePrefix))
	w2 := startWorkerWith(t, srv2, "wire-mcp-auth-2", root, workerEnv)
	r.e.srv, r.e.client, r.e.worker = srv2, newClient(t, srv2), w2
	echoedMCP(t, r.turn(t, `#tool mcp__tracker__echo {"text":"after rotation"}`), "after rotation")

	r.refreshOnA401(t)
	r.revokedRefreshToken(t)
	r.nothingLeaked(t, srv.DatabaseURL, apiLogs, w1, w2)
}

// mcpAuthRun holds what TestAuthenticatedMCPThroughSDK's steps share: the
// OAuth MCP server, the session, every body seen and the secrets to scan
// for.
type mcpAuthRun struct {
	e       *turnEnv
	mcpSrv  *mcptest.OAuth
	sessID  string
	bodies  []string
	secrets map[string]string
}

// newSession creates the vault with the expiring mcp_oauth credential, an
// agent using the server's tools and a session using the vault.
func (r *mcpAuthRun) newSession(t *testing.T, c anthropic.Client, access, refresh string) {
	t.Helper()
	ctx, mcpSrv := context.Background(), r.mcpSrv
	vault, err := c.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "tracker"})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := c.Beta.Vaults.Credentials.New(ctx, vault.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthCreateParams{
			AccessToken: access, MCPServerURL: mcpSrv.URL, ExpiresAt: anthropic.Time(time.Now().Add(20 * time.Second)),
			Refresh: anthropic.BetaManagedAgentsMCPOAuthRefreshParams{ClientID: mcpSrv.ClientID, RefreshToken: refresh, TokenEndpoint: mcpSrv.TokenURL,
				TokenEndpointAuth: anthropic.BetaManagedAgentsMCPOAuthRefreshParamsTokenEndpointAuthUnion{
					OfClientSecretBasic: &anthropic.BetaManagedAgentsTokenEndpointAuthBasicParam{ClientSecret: mcpSrv.ClientSecret}}}}}})
	if err != nil {
		t.Fatalf("create mcp_oauth credential: %v", err)
	}
	r.bodies = append(r.bodies, cred.RawJSON())
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "tracker", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"},
		MCPServers: []anthropic.BetaManagedAgentsURLMCPServerParams{{Name: "tracker", URL: mcpSrv.URL}},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfMCPToolset: &anthropic.BetaManagedAgentsMCPToolsetParams{MCPServerName: "tracker",
			DefaultConfig: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParams{PermissionPolicy: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParamsPermissionPolicyUnion{
				OfAlwaysAllow: &anthropic.BetaManagedAgentsAlwaysAllowPolicyParam{}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("mcp-auth-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)},
		EnvironmentID: env.ID, VaultIDs: []string{vault.ID}})
	if err != nil {
		t.Fatal(err)
	}
	r.sessID = sess.ID
	r.bodies = append(r.bodies, sess.RawJSON())
}

// turn says text and returns the turn's events, kept for the scan.
func (r *mcpAuthRun) turn(t *testing.T, text string) []streamed {
	t.Helper()
	events := r.e.watch(t, r.sessID)
	r.e.say(t, r.sessID, text)
	evs := until(t, events, "session.status_idle", 90*time.Second)
	for _, ev := range evs {
		r.bodies = append(r.bodies, ev.Raw)
	}
	return evs
}

// echoedMCP fails the test unless the turn's last mcp_tool_result is a
// success holding want.
func echoedMCP(t *testing.T, evs []streamed, want string) {
	t.Helper()
	r := last(evs, "agent.mcp_tool_result")
	if r == nil || r["is_error"] == true || !strings.Contains(resultText(r), want) {
		t.Fatalf("mcp_tool_result = %v; want %q; events %v", r, want, typesOf(evs))
	}
}

// twoTurnsOneRefresh: two turns call the server's tools, with one refresh
// of the expiring token and every request carrying the refreshed one.
func (r *mcpAuthRun) twoTurnsOneRefresh(t *testing.T, access string) {
	t.Helper()
	mcpSrv := r.mcpSrv
	echoedMCP(t, r.turn(t, `#tool mcp__tracker__echo {"text":"first"}`), "first")
	echoedMCP(t, r.turn(t, `#tool mcp__tracker__echo {"text":"second"}`), "second")
	seen := mcpSrv.TokensSeen()
	if mcpSrv.Refreshes() != 1 || mcpSrv.Unauthorized() != 0 || len(seen) == 0 {
		t.Fatalf("after two turns: %d refreshes, %d unauthorized, %d requests; want 1 refresh, 0 unauthorized", mcpSrv.Refreshes(), mcpSrv.Unauthorized(), len(seen))
	}
	if slices.Contains(seen, access) || slices.ContainsFunc(seen, func(s string) bool { return s != seen[0] }) {
		t.Errorf("tokens seen by the server: %d requests, the expiring one used: %v; want every request with the one refreshed token", len(seen), slices.Contains(seen, access))
	}
	if calls := mcpSrv.Calls(); len(calls) != 2 {
		t.Errorf("tool calls = %+v; want 2", calls)
	}
	r.secrets["refreshed access token"] = seen[0]
}

// refreshOnA401: the server stops honouring the access token before its
// expiry: the refused call is retried once with a token refreshed on that
// 401.
func (r *mcpAuthRun) refreshOnA401(t *testing.T) {
	t.Helper()
	mcpSrv := r.mcpSrv
	mcpSrv.ExpireAccessTokens()
	echoedMCP(t, r.turn(t, `#tool mcp__tracker__echo {"text":"after a 401"}`), "after a 401")
	if mcpSrv.Refreshes() != 2 || mcpSrv.Unauthorized() != 1 {
		t.Fatalf("after a 401: %d refreshes, %d unauthorized; want 2 and 1", mcpSrv.Refreshes(), mcpSrv.Unauthorized())
	}
	seen := mcpSrv.TokensSeen()
	r.secrets["access token refreshed on a 401"] = seen[len(seen)-1]
}

// revokedRefreshToken: the refresh token is revoked and the access token
// expires: the next call fails authentication, reported as such, and the
// session stays usable.
func (r *mcpAuthRun) revokedRefreshToken(t *testing.T) {
	t.Helper()
	mcpSrv := r.mcpSrv
	mcpSrv.RevokeRefreshTokens()
	mcpSrv.ExpireAccessTokens()
	evs := r.turn(t, `#tool mcp__tracker__echo {"text":"revoked"}`)
	var authErr map[string]any
	for _, ev := range evs {
		if ev.Type != "session.error" {
			continue
		}
		if typ, _ := sdkSessionError(t, ev.Raw); typ == "mcp_authentication_failed_error" {
			_ = json.Unmarshal([]byte(ev.Raw), &authErr)
		}
	}
	if authErr == nil {
		t.Fatalf("no mcp_authentication_failed_error; events %v", typesOf(evs))
	}
	if body := authErr["error"].(map[string]any); body["mcp_server_name"] != "tracker" || !strings.Contains(body["message"].(string), "invalid_grant") {
		t.Errorf("mcp_authentication_failed_error = %v; want it to name the server and the refusal", body)
	}
	if res := last(evs, "agent.mcp_tool_result"); res == nil || res["is_error"] != true {
		t.Errorf("the failed call's mcp_tool_result = %v; want an error result", res)
	}
	if n := len(mcpSrv.Calls()); n != 4 {
		t.Errorf("tool calls reaching the server = %d; want 4 (the refused one never ran)", n)
	}
	if evs := r.turn(t, "still there?"); last(evs, "agent.message") == nil {
		t.Errorf("the session is not usable after the authentication failure: %v", typesOf(evs))
	}
}

// nothingLeaked scans every body, the logs, the database and the
// Temporal histories for the secrets.
func (r *mcpAuthRun) nothingLeaked(t *testing.T, dbURL string, apiLogs *lockedBuffer, w1, w2 *worker) {
	t.Helper()
	scan := func(where, text string) {
		t.Helper()
		for name, v := range r.secrets {
			if strings.Contains(text, v) || strings.Contains(text, hex.EncodeToString([]byte(v))) {
				t.Errorf("%s contains the %s", where, name)
			}
		}
	}
	for i, b := range r.bodies {
		scan(fmt.Sprintf("response %d", i), b)
	}
	scan("the api-server log", apiLogs.String())
	scan("the first worker's log", w1.logs.String())
	scan("the second worker's log", w2.logs.String())
	if !strings.Contains(w2.logs.String(), "level=DEBUG") {
		t.Error("the worker log has no debug lines; the scan would see little")
	}
	scanDatabase(t, dbURL, scan)
	scanHistories(t, r.sessID, scan)
}

// rotate runs `api-server vault rotate` with keys against the database.
func rotate(t *testing.T, dbURL, keys string) {
	t.Helper()
	env := map[string]string{"MANGO_DATABASE_URL": dbURL, "MANGO_VAULT_KEYS": keys, "MANGO_API_KEY": testserver.APIKey, "MANGO_WORKER_TOKEN": "test-worker-token"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	rep, err := app.VaultRotate(context.Background(), cfg)
	if err != nil || rep.Rewrapped == 0 {
		t.Fatalf("vault rotate = %+v, %v; want secrets re-wrapped", rep, err)
	}
}

// scanDatabase passes every row of every table, as text (bytea as hex),
// to scan.
func scanDatabase(t *testing.T, dbURL string, scan func(where, text string)) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if rows.Err() != nil || len(tables) < 5 {
		t.Fatalf("tables = %v, %v", tables, rows.Err())
	}
	for _, table := range tables {
		var dump string
		if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(t::text, E'\n'), '') FROM `+table+` t`).Scan(&dump); err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		scan("table "+table, dump)
	}
}

// scanHistories passes every event of the session workflow's runs, in
// binary protobuf (payloads as their raw JSON bytes), to scan.
func scanHistories(t *testing.T, sessionID string, scan func(where, text string)) {
	t.Helper()
	tc, err := client.Dial(client.Options{HostPort: os.Getenv("MANGO_TEST_TEMPORAL_HOSTPORT"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	it := tc.GetWorkflowHistory(context.Background(), sessionwf.WorkflowID(sessionID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	var all strings.Builder
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		n++
	}
	if n < 10 || !strings.Contains(all.String(), sessionID) {
		t.Fatalf("the session's history has %d events; want a real history to scan", n)
	}
	scan("the Temporal history", all.String())
}
