package controlplane_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/api-server/internal/controlplane"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// TestGetMCPCredential: a worker gets the token of the session's
// credential for an MCP server; a token the server refused that cannot be
// refreshed answers auth_failure, never the token; a server no credential
// covers answers found=false; bad requests and unknown sessions are
// refused with their codes.
func TestGetMCPCredential(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	keys, err := envelope.Parse("k1:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("c", 32))))
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ctx := context.Background()
	if _, err := store.VaultCreate(ctx, &db.Vault{ID: "vlt_cp", DisplayName: "cp", CreatedAt: clk.now(), UpdatedAt: clk.now()}); err != nil {
		t.Fatal(err)
	}
	sealed, err := keys.Seal([]byte("static-PLANTED"), db.CredentialSecretPurpose("vcrd_cp", "token"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CredentialCreate(ctx, &db.Credential{ID: "vcrd_cp", VaultID: "vlt_cp", AuthType: db.CredentialStaticBearer,
		MCPServerURL: "https://mcp.example.com/mcp", Auth: json.RawMessage(`{"type":"static_bearer","mcp_server_url":"https://mcp.example.com/mcp"}`),
		CreatedAt: clk.now(), UpdatedAt: clk.now()}, db.Secrets{"token": sealed}); err != nil {
		t.Fatal(err)
	}
	sess := ids.New(ids.Session)
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: sess, AgentID: ids.New(ids.Agent), AgentVersion: 1, Provider: "local",
		Now: clk.now(), Agent: json.RawMessage(`{}`), VaultIDs: []string{"vlt_cp"}}, nil); err != nil {
		t.Fatal(err)
	}

	conn := dial(t, controlplane.Deps{Store: store, Token: token, Registry: prometheus.NewRegistry(), Now: clk.now, Secrets: keys})
	client := pb.NewCredentialsClient(conn)
	actx := authed(ctx)

	got, err := client.GetMCPCredential(actx, &pb.GetMCPCredentialRequest{SessionId: sess, McpServerUrl: "https://mcp.example.com/mcp/"})
	if err != nil || !got.GetFound() || got.GetCredentialId() != "vcrd_cp" || got.GetToken() != "static-PLANTED" || got.GetCacheSeconds() != 60 {
		t.Fatalf("GetMCPCredential = %v, %v; want vcrd_cp's token, cached 60 s", got, err)
	}
	refused := sha256.Sum256([]byte("static-PLANTED"))
	got, err = client.GetMCPCredential(actx, &pb.GetMCPCredentialRequest{SessionId: sess, McpServerUrl: "https://mcp.example.com/mcp", StaleTokenSha256: refused[:]})
	if err != nil || got.GetToken() != "" || !strings.Contains(got.GetAuthFailure(), "refused its static bearer token") || strings.Contains(got.GetAuthFailure(), "PLANTED") {
		t.Fatalf("refused static token = %v, %v; want an auth_failure without the token", got, err)
	}
	got, err = client.GetMCPCredential(actx, &pb.GetMCPCredentialRequest{SessionId: sess, McpServerUrl: "https://other.example.com/mcp"})
	if err != nil || got.GetFound() || got.GetToken() != "" {
		t.Fatalf("uncovered server = %v, %v; want found=false", got, err)
	}
	for _, tc := range []struct {
		req  *pb.GetMCPCredentialRequest
		code codes.Code
	}{
		{&pb.GetMCPCredentialRequest{SessionId: ids.New(ids.Session), McpServerUrl: "https://mcp.example.com/mcp"}, codes.NotFound},
		{&pb.GetMCPCredentialRequest{SessionId: sess}, codes.InvalidArgument},
		{&pb.GetMCPCredentialRequest{SessionId: sess, McpServerUrl: "https://mcp.example.com/mcp", StaleTokenSha256: []byte("short")}, codes.InvalidArgument},
	} {
		if _, err := client.GetMCPCredential(actx, tc.req); status.Code(err) != tc.code {
			t.Errorf("GetMCPCredential(%v) = %v; want %s", tc.req, err, tc.code)
		}
	}
	if _, err := client.GetMCPCredential(ctx, &pb.GetMCPCredentialRequest{SessionId: sess, McpServerUrl: "https://mcp.example.com/mcp"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without the worker token: %v; want Unauthenticated", err)
	}
}
