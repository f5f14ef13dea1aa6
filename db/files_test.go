package db_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

func upload(id, key string, at time.Time) *db.File {
	return &db.File{ID: id, Filename: id + ".csv", MimeType: "text/csv", SizeBytes: 3, SHA256: "abc", StorageKey: key,
		Origin: db.FileOriginUpload, CreatedAt: at}
}

// TestFileListPagesAndFilters: newest first, keyset pages, scope and ids
// filters.
func TestFileListPagesAndFilters(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	createSession(t, store, "sesn_f", t0, nil)
	for i := range 5 {
		if err := store.FileInsert(ctx, upload(fmt.Sprintf("file_%d", i), fmt.Sprintf("k%d", i), t0.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.FileCopyForSession(ctx, "file_1", "sesn_f", "file_copy", t0.Add(time.Minute)); err != nil {
		t.Fatalf("copy: %v", err)
	}
	var got []string
	var after *db.Cursor
	for {
		page, more, err := store.FileList(ctx, db.FileListParams{Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range page {
			got = append(got, f.ID)
		}
		if !more {
			break
		}
		last := page[len(page)-1]
		after = &db.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	if want := "[file_copy file_4 file_3 file_2 file_1 file_0]"; fmt.Sprint(got) != want {
		t.Errorf("paged list = %v, want %s", got, want)
	}
	scoped, _, err := store.FileList(ctx, db.FileListParams{Limit: 10, ScopeSessionID: "sesn_f"})
	if err != nil || len(scoped) != 1 || scoped[0].ID != "file_copy" || scoped[0].StorageKey != "k1" || scoped[0].Downloadable ||
		scoped[0].Origin != db.FileOriginSessionCopy {
		t.Errorf("scoped list = %+v, %v; want the session copy sharing k1, not downloadable", scoped, err)
	}
	byID, _, err := store.FileList(ctx, db.FileListParams{Limit: 10, IDs: []string{"file_0", "file_3", "file_nope"}})
	if err != nil || len(byID) != 2 || byID[0].ID != "file_3" || byID[1].ID != "file_0" {
		t.Errorf("ids list = %+v, %v; want file_3, file_0", byID, err)
	}
}

// TestFileDeleteReportsUnreferencedKeys: a key shared by a session copy
// stays referenced until the last row goes.
func TestFileDeleteReportsUnreferencedKeys(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	createSession(t, store, "sesn_d", now, nil)
	if err := store.FileInsert(ctx, upload("file_src", "shared", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.FileCopyForSession(ctx, "file_src", "sesn_d", "file_cp", now); err != nil {
		t.Fatal(err)
	}
	key, unref, err := store.FileDelete(ctx, "file_src")
	if err != nil || key != "shared" || unref {
		t.Errorf("delete source = %q, %v, %v; want shared, still referenced", key, unref, err)
	}
	key, unref, err = store.FileDelete(ctx, "file_cp")
	if err != nil || key != "shared" || !unref {
		t.Errorf("delete copy = %q, %v, %v; want shared, unreferenced", key, unref, err)
	}
	if _, _, err := store.FileDelete(ctx, "file_cp"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if _, err := store.FileGet(ctx, "file_cp"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("get deleted: %v, want ErrNotFound", err)
	}
	if _, err := store.FileCopyForSession(ctx, "file_src", "sesn_d", "file_cp2", now); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("copy of a deleted file: %v, want ErrNotFound", err)
	}
}

// TestOutputReplace: a new output at a path replaces the old one and
// reports its bytes orphaned; an unknown session is ErrNotFound.
func TestOutputReplace(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	createSession(t, store, "sesn_o", now, nil)
	out := func(id, key string) *db.File {
		return &db.File{ID: id, Filename: "r.txt", MimeType: "text/plain", SizeBytes: 1, SHA256: key, StorageKey: key,
			Downloadable: true, ScopeSessionID: "sesn_o", Origin: db.FileOriginOutput, OutputPath: "/mnt/session/outputs/r.txt",
			OutputModifiedAt: &now, CreatedAt: now}
	}
	if orphan, err := store.OutputReplace(ctx, out("file_o1", "k1")); err != nil || orphan != "" {
		t.Fatalf("first publish: %q, %v; want nothing orphaned", orphan, err)
	}
	orphan, err := store.OutputReplace(ctx, out("file_o2", "k2"))
	if err != nil || orphan != "k1" {
		t.Fatalf("replace: %q, %v; want k1 orphaned", orphan, err)
	}
	got, err := store.OutputGetByPath(ctx, "sesn_o", "/mnt/session/outputs/r.txt")
	if err != nil || got.ID != "file_o2" || got.OutputModifiedAt == nil || !got.OutputModifiedAt.Equal(now) {
		t.Errorf("output at path = %+v, %v; want file_o2 with its modification time", got, err)
	}
	list, err := store.OutputList(ctx, "sesn_o")
	if err != nil || len(list) != 1 || list[0].ID != "file_o2" {
		t.Errorf("outputs = %+v, %v; want only file_o2", list, err)
	}
	if _, err := store.FileGet(ctx, "file_o1"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("replaced output still readable: %v", err)
	}
	o := out("file_o3", "k3")
	o.ScopeSessionID = "sesn_missing"
	if _, err := store.OutputReplace(ctx, o); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("publish for an unknown session: %v, want ErrNotFound", err)
	}
}
