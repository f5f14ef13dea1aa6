package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// TestResourceLifecycle: a session created with resources gets its file
// copy; materialization is recorded per version; a deleted resource stays
// visible to workers until they report it removed.
func TestResourceLifecycle(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := store.FileInsert(ctx, upload("file_src", "k-src", t0)); err != nil {
		t.Fatal(err)
	}
	_, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: "sesn_r", AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: t0,
		Resources: []db.ResourceCreate{
			{ID: "sesrsc_f", Type: db.ResourceFile, MountPath: "/mnt/session/uploads/data.csv", SourceFileID: "file_src", FileID: "file_copy"},
			{ID: "sesrsc_g", Type: db.ResourceRepository, MountPath: "/workspace/repo", URL: "https://example.com/o/repo.git",
				Checkout: &db.Checkout{Type: "branch", Name: "main"}, TokenSealed: []byte("sealed")},
		}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := store.FileGet(ctx, "file_copy")
	if err != nil || cp.StorageKey != "k-src" || cp.ScopeSessionID != "sesn_r" || cp.Downloadable {
		t.Fatalf("session copy = %+v, %v; want the source's bytes, scoped to the session, not downloadable", cp, err)
	}
	live, err := store.ResourceList(ctx, "sesn_r", nil, 10)
	if err != nil || len(live) != 2 || live[0].ID != "sesrsc_f" || live[1].Checkout == nil || live[1].Checkout.Name != "main" {
		t.Fatalf("ResourceList = %+v, %v", live, err)
	}
	// The same mount path twice is a conflict.
	_, err = store.ResourceAdd(ctx, "sesn_r", db.ResourceCreate{ID: "sesrsc_dup", Type: db.ResourceRepository,
		MountPath: "/workspace/repo", URL: "https://example.com/o/other.git"}, t0)
	if !errors.Is(err, db.ErrMountTaken) {
		t.Fatalf("add at a taken mount path: err = %v, want ErrMountTaken", err)
	}
	// Deleting an unmaterialized resource removes it at once.
	if _, err := store.ResourceDelete(ctx, "sesn_r", "sesrsc_g", t0); err != nil {
		t.Fatal(err)
	}
	worker, _ := store.ResourcesForWorker(ctx, "sesn_r")
	if len(worker) != 1 || worker[0].ID != "sesrsc_f" {
		t.Fatalf("worker view after deleting an unmaterialized resource = %+v, want only sesrsc_f", worker)
	}
	// Materialized, then deleted: hidden from clients, kept for the worker
	// until it reports the removal.
	if err := store.ResourceMarkMaterialized(ctx, "sesn_r", "sesrsc_f", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ResourceDelete(ctx, "sesn_r", "sesrsc_f", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ResourceGet(ctx, "sesn_r", "sesrsc_f"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("get of a deleted resource: err = %v, want ErrNotFound", err)
	}
	worker, _ = store.ResourcesForWorker(ctx, "sesn_r")
	if len(worker) != 1 || worker[0].DeletedAt == nil || worker[0].Version != 2 {
		t.Fatalf("worker view of a deleted, materialized resource = %+v; want it deleted at version 2", worker)
	}
	// Its mount path is free again at once.
	if _, err := store.ResourceAdd(ctx, "sesn_r", db.ResourceCreate{ID: "sesrsc_f2", Type: db.ResourceFile,
		MountPath: "/mnt/session/uploads/data.csv", SourceFileID: "file_src", FileID: "file_copy2"}, t0); err != nil {
		t.Fatalf("add at the mount path of a deleted resource: %v", err)
	}
	if err := store.ResourceMarkMaterialized(ctx, "sesn_r", "sesrsc_f", 2); err != nil {
		t.Fatal(err)
	}
	worker, _ = store.ResourcesForWorker(ctx, "sesn_r")
	if len(worker) != 1 || worker[0].ID != "sesrsc_f2" {
		t.Fatalf("worker view after the removal was reported = %+v, want only sesrsc_f2", worker)
	}
	// Reporting again is harmless.
	if err := store.ResourceMarkMaterialized(ctx, "sesn_r", "sesrsc_f", 2); err != nil {
		t.Fatal(err)
	}
}

// TestResourceAddRefusesArchivedAndMissing: an archived session takes no
// resources; a missing source file is ErrNotFound and adds nothing.
func TestResourceAddRefusesArchivedAndMissing(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	createSession(t, store, "sesn_a", t0, nil)
	_, err := store.ResourceAdd(ctx, "sesn_a", db.ResourceCreate{ID: "sesrsc_x", Type: db.ResourceFile, MountPath: "/mnt/session/uploads/x",
		SourceFileID: "file_missing", FileID: "file_c"}, t0)
	if !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("add with a missing source file: err = %v, want ErrNotFound", err)
	}
	if rs, _ := store.ResourceList(ctx, "sesn_a", nil, 10); len(rs) != 0 {
		t.Fatalf("a failed add left %d resources", len(rs))
	}
	if _, err := store.SessionArchive(ctx, "sesn_a", t0); err != nil {
		t.Fatal(err)
	}
	_, err = store.ResourceAdd(ctx, "sesn_a", db.ResourceCreate{ID: "sesrsc_y", Type: db.ResourceRepository, MountPath: "/workspace/r",
		URL: "https://example.com/r"}, t0)
	if !errors.Is(err, db.ErrArchived) {
		t.Fatalf("add to an archived session: err = %v, want ErrArchived", err)
	}
}

// TestSessionDeletionDropsCopies: deleting a session deletes its copies of
// file resources, and reports the bytes nothing references any more.
func TestSessionDeletionDropsCopies(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := store.FileInsert(ctx, upload("file_src", "k-shared", t0)); err != nil {
		t.Fatal(err)
	}
	_, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: "sesn_d", AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{}`), Provider: "local", Metadata: map[string]string{}, Now: t0,
		Resources: []db.ResourceCreate{{ID: "sesrsc_d", Type: db.ResourceFile, MountPath: "/mnt/session/uploads/x", SourceFileID: "file_src", FileID: "file_dcopy"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, unreferenced, err := store.FileDelete(ctx, "file_src"); err != nil || unreferenced {
		t.Fatalf("delete the source: unreferenced %v, %v; want the copy to keep the bytes", unreferenced, err)
	}
	if _, _, err := store.SessionFence(ctx, "sesn_d", t0); err != nil {
		t.Fatal(err)
	}
	deleted, orphaned, err := store.SessionFinalizeDeletion(ctx, "sesn_d")
	if err != nil || !deleted || len(orphaned) != 1 || orphaned[0] != "k-shared" {
		t.Fatalf("finalize = %v, %v, %v; want deleted with k-shared orphaned", deleted, orphaned, err)
	}
	if _, err := store.FileGet(ctx, "file_dcopy"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("the session copy survived its session: %v", err)
	}
}
