package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/api-server/internal/app"
	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

const (
	oldKeys = "old:b2xkLWtleS0wMTIzNDU2Nzg5YWJjZGVmMDEyMzQ1Njc="
	newKey  = "new:bmV3LWtleS0wMTIzNDU2Nzg5YWJjZGVmMDEyMzQ1Njc="
)

func loadConfig(t *testing.T, dbURL, keys string) *config.Config {
	t.Helper()
	env := map[string]string{"MANGO_DATABASE_URL": dbURL, "MANGO_TEMPORAL_HOSTPORT": "127.0.0.1:1", "MANGO_HTTP_ADDR": "127.0.0.1:0",
		"MANGO_GRPC_ADDR": "127.0.0.1:0", "MANGO_WORKER_TOKEN": "t", "MANGO_VAULT_KEYS": keys}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestVaultKeysRotation: secrets sealed under a key MANGO_VAULT_KEYS no
// longer lists (a resource token, a credential's access and refresh
// tokens) stop startup, naming the key; `vault rotate` re-wraps them under
// the new key, after which the old key can be removed.
func TestVaultKeysRotation(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	ctx := context.Background()
	cfg := loadConfig(t, dbURL, oldKeys)
	sealed, err := cfg.Secrets.Seal([]byte("ghp_rotation_secret"), db.ResourceTokenPurpose("sesrsc_rot"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := db.NewStore(pool)
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: "sesn_rot", AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{}`), Provider: "local", Metadata: map[string]string{}, Now: time.Now(),
		Resources: []db.ResourceCreate{{ID: "sesrsc_rot", Type: db.ResourceRepository, MountPath: "/workspace/r",
			URL: "https://example.com/r.git", TokenSealed: sealed}}}, nil); err != nil {
		t.Fatal(err)
	}
	credSecrets := db.Secrets{}
	for _, f := range []string{"access_token", "refresh_token"} {
		if credSecrets[f], err = cfg.Secrets.Seal([]byte("rotation_"+f), db.CredentialSecretPurpose("vcrd_rot", f)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	if _, err := store.VaultCreate(ctx, &db.Vault{ID: "vlt_rot", DisplayName: "rot", CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.CredentialCreate(ctx, &db.Credential{ID: "vcrd_rot", VaultID: "vlt_rot", AuthType: db.CredentialMCPOAuth,
		MCPServerURL: "https://mcp.example.com/mcp", Auth: json.RawMessage(`{"type":"mcp_oauth"}`), CreatedAt: now, UpdatedAt: now}, credSecrets); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Only the new key: startup names the missing one.
	_, err = app.New(ctx, loadConfig(t, dbURL, newKey), quiet)
	if err == nil || !strings.Contains(err.Error(), "old (3 secrets)") || strings.Contains(err.Error(), "b2xk") {
		t.Fatalf("startup with the old key removed: err = %v; want one naming key old, without key material", err)
	}
	// Rotate with both, new first.
	rep, err := app.VaultRotate(ctx, loadConfig(t, dbURL, newKey+","+oldKeys))
	if err != nil || rep.Rewrapped != 3 {
		t.Fatalf("vault rotate = %+v, %v; want 3 re-wrapped", rep, err)
	}
	rep, err = app.VaultRotate(ctx, loadConfig(t, dbURL, newKey+","+oldKeys))
	if err != nil || rep.Rewrapped != 0 || rep.Current != 3 {
		t.Fatalf("second vault rotate = %+v, %v; want nothing to do", rep, err)
	}
	// Now the new key alone opens it, and the server starts.
	only, _ := envelope.Parse(newKey)
	tokens, _ := store.ResourceTokens(ctx)
	if got, err := only.Open(tokens[0].Sealed, db.ResourceTokenPurpose("sesrsc_rot")); err != nil || string(got) != "ghp_rotation_secret" {
		t.Fatalf("after rotation: %q, %v", got, err)
	}
	stored, err := store.CredentialSecrets(ctx, "vcrd_rot")
	if err != nil || len(stored) != 2 {
		t.Fatalf("credential secrets after rotation = %d fields, %v; want 2", len(stored), err)
	}
	for f, sealed := range stored {
		if got, err := only.Open(sealed, db.CredentialSecretPurpose("vcrd_rot", f)); err != nil || string(got) != "rotation_"+f {
			t.Fatalf("credential %s after rotation: %q, %v; want it opened by the new key alone", f, got, err)
		}
	}
	srv, err := app.New(ctx, loadConfig(t, dbURL, newKey), quiet)
	if err != nil {
		t.Fatalf("startup after rotation: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_ = srv.Serve(cctx)
}
