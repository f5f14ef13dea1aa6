package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// TestSweepExpiredFiles: the sweeper deletes expired files and their
// bytes, and leaves live files (and bytes a live file shares) alone.
func TestSweepExpiredFiles(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	blobs := filestore.Postgres(store)
	ctx := context.Background()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Minute), now.Add(time.Hour)
	put := func(id, key string, expires *time.Time) {
		if _, err := blobs.Put(ctx, key, strings.NewReader("bytes of "+id), 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := store.FileInsert(ctx, &db.File{ID: id, Filename: id + ".txt", MimeType: "text/plain", SizeBytes: 9, SHA256: "x",
			StorageKey: key, Origin: db.FileOriginUpload, CreatedAt: now.Add(-2 * time.Hour), ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
	}
	put("file_expired", "k-expired", &past)
	put("file_live", "k-live", &future)
	put("file_forever", "k-forever", nil)
	// Bytes whose metadata was never written: an old orphan goes, a recent
	// one (an upload about to record its file) stays.
	if _, err := blobs.Put(ctx, "k-orphan-old", strings.NewReader("lost"), 1<<20); err != nil {
		t.Fatal(err)
	}
	s := &fileSweeper{store: store, files: blobs, log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: func() time.Time { return now },
		orphanBlobs: true}
	// The blob was stored now (wall clock); sweep as if two hours later for
	// the orphan, but the files' expiry is judged at now as well.
	s.sweep(ctx)
	if _, err := blobs.Stat(ctx, "k-orphan-old"); err != nil {
		t.Fatalf("a fresh unreferenced blob was swept: %v", err)
	}
	later := &fileSweeper{store: store, files: blobs, log: s.log, now: func() time.Time { return time.Now().Add(2 * time.Hour) }, orphanBlobs: true}
	defer func() {
		if _, err := blobs.Stat(ctx, "k-orphan-old"); !errors.Is(err, filestore.ErrNotFound) {
			t.Errorf("an unreferenced blob older than the grace survived: %v", err)
		}
		if _, err := blobs.Stat(ctx, "k-forever"); err != nil {
			t.Errorf("a referenced blob was swept as an orphan: %v", err)
		}
	}()
	defer later.sweep(ctx)
	if _, err := store.FileGet(ctx, "file_expired"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("expired file still there: %v", err)
	}
	if _, err := blobs.Stat(ctx, "k-expired"); !errors.Is(err, filestore.ErrNotFound) {
		t.Errorf("expired file's bytes still stored: %v", err)
	}
	for _, id := range []string{"file_live", "file_forever"} {
		if _, err := store.FileGet(ctx, id); err != nil {
			t.Errorf("%s was swept: %v", id, err)
		}
	}
	// A listing at now leaves out what expires; one later leaves out more.
	list, _, err := store.FileList(ctx, db.FileListParams{Limit: 10, Now: future.Add(time.Second)})
	if err != nil || len(list) != 1 || list[0].ID != "file_forever" {
		t.Fatalf("listed after file_live expired: %+v, %v; want only file_forever", list, err)
	}
}
