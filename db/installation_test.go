package db_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// TestInstallationIDCreatedByMigration: a database migrated before the
// installation table existed, with data in it, gets an id when the
// migration runs; the id survives later migrations, and another database
// gets another id.
func TestInstallationIDCreatedByMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyDatabase(t)

	// An existing installation: migrated up to the version before, in use.
	sqlDB := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, db.Migrations())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 10); err != nil {
		t.Fatalf("migrate to version 10: %v", err)
	}
	store := db.NewStore(pool)
	// Written as that schema took it (today's store writes more tables).
	if _, err := pool.Exec(ctx, `WITH agent AS (INSERT INTO agents (id, current_version, created_at, updated_at) VALUES ($1, 1, $2, $2))
		INSERT INTO agent_versions (agent_id, version, spec, created_at) VALUES ($1, 1, $3, $2)`, "agent_before", time.Now(), `{"name":"before"}`); err != nil {
		t.Fatalf("create an agent before the migration: %v", err)
	}
	if _, err := store.InstallationID(ctx); err == nil {
		t.Fatal("InstallationID before the migration succeeded, want an error (no table)")
	}

	if err := db.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate the existing database: %v", err)
	}
	id, err := store.InstallationID(ctx)
	if err != nil || !uuidRE.MatchString(id) {
		t.Fatalf("InstallationID after the migration = %q, %v; want a random UUID", id, err)
	}
	if err := db.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if again, err := store.InstallationID(ctx); err != nil || again != id {
		t.Errorf("InstallationID after migrating again = %q, %v; want the same %q", again, err, id)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM installation").Scan(&rows); err != nil || rows != 1 {
		t.Errorf("installation has %d rows (%v), want 1", rows, err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO installation DEFAULT VALUES"); err == nil {
		t.Error("a second installation row was accepted, want the table to hold one row")
	}

	other := emptyDatabase(t)
	if err := db.Migrate(ctx, other); err != nil {
		t.Fatal(err)
	}
	otherID, err := db.NewStore(other).InstallationID(ctx)
	if err != nil || !uuidRE.MatchString(otherID) || otherID == id {
		t.Errorf("InstallationID of another fresh database = %q, %v; want another UUID than %q", otherID, err, id)
	}
}

// TestInstallationIDPerTestDatabase: databases cloned by dbtest are
// installations of their own, as freshly migrated ones would be.
func TestInstallationIDPerTestDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := dbtest.Store(t).InstallationID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := dbtest.Store(t).InstallationID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a == b || !uuidRE.MatchString(a) || !uuidRE.MatchString(b) {
		t.Errorf("two test databases have installation ids %q and %q, want two different UUIDs", a, b)
	}
}

// emptyDatabase creates a database with no schema, dropped when the test
// ends.
func emptyDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin := dbtest.AdminURL(t)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "mango_t_empty_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
			return
		}
		defer func() { _ = conn.Close(context.Background()) }()
		if _, err := conn.Exec(context.Background(), fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
