package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
	if _, err := store.AgentCreate(ctx, "agent_a", json.RawMessage(`{"n":0}`), now); err != nil {
		t.Fatalf("create: %v", err)
	}
	const writers = 12
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := store.AgentUpdate(ctx, "agent_a", now, func(cur *db.Agent) (json.RawMessage, error) {
				return json.RawMessage(fmt.Sprintf(`{"writer":%d,"after":%d}`, i, cur.Version)), nil
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
