package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	// The template is already migrated; applying again must be a no-op.
	for range 2 {
		if err := db.Migrate(context.Background(), pool); err != nil {
			t.Fatalf("migrate an up-to-date database: %v", err)
		}
	}
}

func TestAgentConcurrentUpdatesGetContiguousVersions(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := store.AgentCreate(ctx, "agent_a", json.RawMessage(`{"n":0}`), nil, now); err != nil {
		t.Fatalf("create: %v", err)
	}
	const writers = 12
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := store.AgentUpdate(ctx, "agent_a", now, func(cur *db.Agent) (json.RawMessage, []db.SkillRef, error) {
				return json.RawMessage(fmt.Sprintf(`{"writer":%d,"after":%d}`, i, cur.Version)), nil, nil
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent update: %v", err)
		}
	}
	versions, more, err := store.AgentVersions(ctx, "agent_a", nil, 100)
	if err != nil {
		t.Fatalf("versions: %v", err)
	}
	if more || len(versions) != writers+1 {
		t.Fatalf("got %d versions (more=%v), want %d", len(versions), more, writers+1)
	}
	for i, v := range versions {
		want := int64(writers + 1 - i)
		if v.Version != want {
			t.Fatalf("versions[%d] = %d, want %d (contiguous, newest first)", i, v.Version, want)
		}
		if want > 1 {
			var body struct{ After int64 }
			_ = json.Unmarshal(v.Spec, &body)
			if body.After != want-1 {
				t.Errorf("version %d was computed from version %d, want %d (lost update)", want, body.After, want-1)
			}
		}
	}
	cur, err := store.AgentGet(ctx, "agent_a")
	if err != nil || cur.Version != writers+1 {
		t.Fatalf("current = %v, %v; want version %d", cur, err, writers+1)
	}
}

func TestErrorMapping(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	if _, err := store.AgentGet(ctx, "agent_missing"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("get missing agent: %v, want ErrNotFound", err)
	}
	if _, _, err := store.AgentVersions(ctx, "agent_missing", nil, 10); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("versions of missing agent: %v, want ErrNotFound", err)
	}
	now := time.Now().UTC()
	env := &db.Environment{ID: "env_1", Name: "dup", Config: json.RawMessage(`{}`), Scope: "organization", CreatedAt: now, UpdatedAt: now}
	if _, err := store.EnvironmentCreate(ctx, env); err != nil {
		t.Fatalf("create environment: %v", err)
	}
	env.ID = "env_2"
	if _, err := store.EnvironmentCreate(ctx, env); !errors.Is(err, db.ErrConflict) {
		t.Errorf("duplicate name: %v, want ErrConflict", err)
	}
	if err := store.EnvironmentDelete(ctx, "env_missing"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("delete missing: %v, want ErrNotFound", err)
	}
}

func TestWorkerQueueLastSeen(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	if _, ok, err := store.WorkerQueueLastSeen(ctx, "mango.local.loc1"); err != nil || ok {
		t.Fatalf("no workers: ok=%v err=%v, want not found", ok, err)
	}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, w := range []struct {
		id  string
		at  time.Time
		qs  []string
		typ string
	}{
		{"w-old", t0, []string{"mango.local", "mango.local.loc1"}, "local"},
		{"w-new", t0.Add(time.Minute), []string{"mango.local", "mango.local.loc1"}, "local"},
		{"w-other", t0.Add(time.Hour), []string{"mango.local", "mango.local.loc2"}, "local"},
	} {
		if _, err := store.WorkerHeartbeat(ctx, &db.Worker{ID: w.id, Provider: w.typ, TaskQueues: w.qs}, w.at); err != nil {
			t.Fatal(err)
		}
	}
	at, ok, err := store.WorkerQueueLastSeen(ctx, "mango.local.loc1")
	if err != nil || !ok || !at.Equal(t0.Add(time.Minute)) {
		t.Errorf("loc1 last seen = %v, %v, %v; want %v from the newest worker polling it", at, ok, err, t0.Add(time.Minute))
	}
}

// TestUnavailable: a database that cannot be reached is told apart from a
// failed statement, so the ControlPlane can tell workers to retry.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	pool, err := pgxpool.New(ctx, "postgres://mango@"+addr+"/x?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = db.NewStore(pool).AgentGet(ctx, "agent_x")
	if !db.Unavailable(err) || !errors.Is(err, db.ErrUnavailable) {
		t.Errorf("AgentGet with the database down: %v; want it reported unavailable", err)
	}
	store := dbtest.Store(t)
	if _, err := store.AgentGet(ctx, "agent_missing"); db.Unavailable(err) {
		t.Errorf("a missing row is reported unavailable: %v", err)
	}
	if db.Unavailable(context.DeadlineExceeded) || db.Unavailable(nil) {
		t.Error("a deadline or nil is reported unavailable")
	}
}
