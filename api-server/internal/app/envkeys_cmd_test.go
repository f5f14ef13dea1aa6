package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/api-server/internal/app"
	"github.com/mangohq/mango/api-server/internal/auth"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// TestEnvironmentKeyCommand runs `api-server environment-key create`,
// `list` and `revoke` against a database: the created key is printed
// once, works until revoked, and is listed without its secret.
func TestEnvironmentKeyCommand(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	ctx := context.Background()
	cfg := loadConfig(t, dbURL, "")
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := db.NewStore(pool)
	now := time.Now()
	env, err := store.EnvironmentCreate(ctx, &db.Environment{ID: "env_0000000000000000000000CL", Name: "on-prem",
		Config: json.RawMessage(`{"type":"self_hosted"}`), Metadata: map[string]string{}, Scope: "organization", CreatedAt: now, UpdatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		parsed, err := app.ParseEnvironmentKeyArgs(args)
		if err != nil {
			t.Fatalf("parse %q: %v", args, err)
		}
		var out bytes.Buffer
		err = app.EnvironmentKey(ctx, cfg, parsed, &out)
		return out.String(), err
	}
	out, err := run("create", "--environment", env.ID, "--name", "rack-7", "--expires-in", "24h")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var secret string
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, auth.EnvironmentKeyPrefix) {
			secret = f
		}
	}
	k, err := store.EnvironmentKeyByHash(ctx, auth.Hash(secret), time.Now())
	if err != nil || k.EnvironmentID != env.ID || k.Name != "rack-7" || k.ExpiresAt == nil {
		t.Fatalf("the printed key %q resolves to %+v, %v; want rack-7 of %s, expiring (output:\n%s)", secret, k, err, env.ID, out)
	}
	out, err = run("list", "--environment", env.ID)
	if err != nil || !strings.Contains(out, k.ID) || !strings.Contains(out, "rack-7") || strings.Contains(out, secret) {
		t.Errorf("list = %q, %v; want the key's id and name, not its secret", out, err)
	}
	if out, err = run("revoke", k.ID); err != nil || !strings.Contains(out, "revoked") {
		t.Fatalf("revoke = %q, %v", out, err)
	}
	if _, err := store.EnvironmentKeyByHash(ctx, auth.Hash(secret), time.Now()); err == nil {
		t.Error("the revoked key still resolves")
	}
	if _, err := run("create", "--environment", "env_0000000000000000000000XX"); err == nil || !strings.Contains(err.Error(), "env_0000000000000000000000XX") {
		t.Errorf("create for an unknown environment: %v, want an error naming it", err)
	}
}
