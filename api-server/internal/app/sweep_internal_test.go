package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/filestore/filestores3"
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

// TestSweepUnreferencedListedBlobs: with a store that lists its blobs
// (S3), the sweeper deletes the bytes no file references once they are
// older than listedOrphanGrace, walking the bucket a few pages per sweep
// and starting over at its end; bytes a file references, recent bytes and
// objects of another form than filestore.NewKey's stay.
func TestSweepUnreferencedListedBlobs(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	backend := s3mem.New()
	if err := backend.CreateBucket("mango"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	blobs, err := filestores3.New(filestores3.Config{Endpoint: srv.URL, Bucket: "mango", Region: "us-east-1", AccessKeyID: "k",
		SecretAccessKey: "fake-secret", PathStyle: true, Prefix: "t/"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(key string) {
		t.Helper()
		if _, err := blobs.Put(ctx, key, strings.NewReader("bytes"), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	// Six blobs in key order; the 2nd and the 5th belong to files.
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = filestore.NewKey()
	}
	slices.Sort(keys)
	referenced := map[string]bool{keys[1]: true, keys[4]: true}
	for i, k := range keys {
		put(k)
		if referenced[k] {
			id := fmt.Sprintf("file_sweep%d_%d", i, time.Now().UnixNano())
			if err := store.FileInsert(ctx, &db.File{ID: id, Filename: "f.txt", MimeType: "text/plain", SizeBytes: 5, SHA256: "x",
				StorageKey: k, Origin: db.FileOriginUpload, CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("other/thing") // not Mango's form: never swept
	present := func() (got []string) {
		t.Helper()
		for _, k := range append(slices.Clone(keys), "other/thing") {
			if _, err := blobs.Stat(ctx, k); err == nil {
				got = append(got, k)
			} else if !errors.Is(err, filestore.ErrNotFound) {
				t.Fatal(err)
			}
		}
		return got
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Within the grace nothing goes, though the whole bucket is walked.
	soon := &fileSweeper{store: store, files: blobs, listed: blobs, log: log, now: func() time.Time { return time.Now().Add(time.Hour) }}
	soon.sweep(ctx)
	if got := present(); len(got) != 7 {
		t.Fatalf("swept within the grace: %d of 7 blobs left", len(got))
	}
	if soon.listAfter != "" {
		t.Errorf("after a walk to the end the next sweep starts at %q, want the beginning", soon.listAfter)
	}

	// Past it, one page of two a sweep: keys 0 and 1, then 2 and 3, then
	// 4 and 5; the fourth sweep finds the end, the fifth starts over.
	later := &fileSweeper{store: store, files: blobs, listed: blobs, log: log, page: 2, pages: 1,
		now: func() time.Time { return time.Now().Add(listedOrphanGrace + time.Minute) }}
	steps := [][]string{
		{keys[1], keys[2], keys[3], keys[4], keys[5], "other/thing"},
		{keys[1], keys[4], keys[5], "other/thing"},
		{keys[1], keys[4], "other/thing"},
		{keys[1], keys[4], "other/thing"},
	}
	for i, want := range steps {
		later.sweep(ctx)
		if got := present(); !slices.Equal(got, want) {
			t.Fatalf("after sweep %d: %v left, want %v", i+1, got, want)
		}
	}
	if later.listAfter != "" {
		t.Errorf("after the walk reached the end the next sweep starts at %q, want the beginning", later.listAfter)
	}
	later.sweep(ctx)
	if later.listAfter != keys[4] {
		t.Errorf("the walk started over: next sweep starts at %q, want %q", later.listAfter, keys[4])
	}
}
