// Package dbtest gives each test its own migrated PostgreSQL database.
//
// The first call in a test process migrates a template database named after
// a hash of the migrations (shared by every process and package, guarded by
// an advisory lock); each test then clones it with CREATE DATABASE ...
// TEMPLATE, which takes a few milliseconds, gives it an installation id of
// its own, and drops the clone on cleanup.
//
// Tests find the server through MANGO_TEST_DATABASE_URL, an administrative
// URL (a role allowed to create databases). Without it the test is skipped,
// unless MANGO_REQUIRE_SERVICES=1, as `make test` sets, when it fails.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/internal/testenv"
)

// EnvURL names the environment variable holding the administrative URL.
const EnvURL = "MANGO_TEST_DATABASE_URL"

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// AdminURL returns the administrative database URL, skipping the test (or
// failing it when services are required) if none is configured.
func AdminURL(t testing.TB) string {
	t.Helper()
	return testenv.Getenv(t, EnvURL)
}

// URL creates a fresh migrated database for the test and returns its URL.
// The database is dropped when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	admin := AdminURL(t)
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(admin) })
	if templateErr != nil {
		t.Fatalf("prepare template database: %v", templateErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to %s: %v", EnvURL, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	name := "mango_t_" + randomHex(8)
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, templateName)); err != nil {
		t.Fatalf("clone template database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u, err := withDatabase(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	// A clone copies the template's installation id; each test database
	// is an installation of its own, as a freshly migrated one would be.
	clone, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connect to test database %s: %v", name, err)
	}
	defer func() { _ = clone.Close(ctx) }()
	if _, err := clone.Exec(ctx, "UPDATE installation SET id = gen_random_uuid()::text"); err != nil {
		t.Fatalf("give test database %s its own installation id: %v", name, err)
	}
	return u
}

// Pool returns a connection pool on a fresh migrated database, closed when
// the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), URL(t))
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Store returns a [db.Store] on a fresh migrated database.
func Store(t testing.TB) *db.Store {
	t.Helper()
	return db.NewStore(Pool(t))
}

func ensureTemplate(admin string) (string, error) {
	name, err := templateNameFor(db.Migrations())
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", EnvURL, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	// Serialise template creation across concurrently running test binaries.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", name); err != nil {
		return "", fmt.Errorf("lock template: %w", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(hashtext($1))", name) //nolint:errcheck // released with the connection anyway
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}
	building := name + "_build"
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
		return "", fmt.Errorf("drop stale template: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	buildURL, err := withDatabase(admin, building)
	if err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, buildURL)
	if err != nil {
		return "", fmt.Errorf("open template: %w", err)
	}
	err = db.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return "", err
	}
	// Publish under the final name only once complete, so a crash midway
	// never leaves a half-migrated template behind.
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", fmt.Errorf("publish template: %w", err)
	}
	return name, nil
}

// templateNameFor derives the template's name from the migrations' content,
// so a changed migration gets a fresh template.
func templateNameFor(migrations fs.FS) (string, error) {
	var names []string
	err := fs.WalkDir(migrations, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, path)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(migrations, n)
		if err != nil {
			return "", fmt.Errorf("read migration %s: %w", n, err)
		}
		_, _ = fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return "mango_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// withDatabase returns the PostgreSQL URL u pointed at database name.
func withDatabase(u, name string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil || (parsed.Scheme != "postgres" && parsed.Scheme != "postgresql") {
		return "", fmt.Errorf("%s must be a postgres:// URL", EnvURL)
	}
	parsed.Path = "/" + name
	return parsed.String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
