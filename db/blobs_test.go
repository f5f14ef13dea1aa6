package db_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"testing/iotest"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// chunkRows counts the stored chunks of key.
func chunkRows(t *testing.T, s *db.Store, key string) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(context.Background(), "SELECT count(*) FROM file_blob_chunks WHERE key = $1", key).Scan(&n); err != nil {
		t.Fatalf("count chunks of %q: %v", key, err)
	}
	return n
}

func TestBlobDeleteRemovesEveryChunk(t *testing.T) {
	t.Parallel()
	s := dbtest.Store(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), (3*db.BlobChunkSize+100)/16)
	n, err := s.BlobPut(ctx, "k", bytes.NewReader(data), time.Now())
	if err != nil || n != int64(len(data)) {
		t.Fatalf("BlobPut of %d bytes = %d, %v", len(data), n, err)
	}
	if got, want := chunkRows(t, s, "k"), 4; got != want {
		t.Fatalf("a blob of %d bytes is stored in %d chunks, want %d", len(data), got, want)
	}
	if err := s.BlobDelete(ctx, "k"); err != nil {
		t.Fatalf("BlobDelete: %v", err)
	}
	if got := chunkRows(t, s, "k"); got != 0 {
		t.Errorf("after BlobDelete %d chunk rows remain, want 0", got)
	}
	if _, err := s.BlobSize(ctx, "k"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("BlobSize after BlobDelete: error %v, want ErrNotFound", err)
	}
}

func TestBlobFailedPutLeavesNoRows(t *testing.T) {
	t.Parallel()
	s := dbtest.Store(t)
	errRead := errors.New("read failed")
	src := io.MultiReader(bytes.NewReader(make([]byte, 2*db.BlobChunkSize+1)), iotest.ErrReader(errRead))
	if _, err := s.BlobPut(context.Background(), "k", src, time.Now()); !errors.Is(err, errRead) {
		t.Fatalf("BlobPut from a failing reader: error %v, want one wrapping %v", err, errRead)
	}
	if got := chunkRows(t, s, "k"); got != 0 {
		t.Errorf("after a failed BlobPut %d chunk rows exist, want 0", got)
	}
}

func TestBlobReadFailsWhenDeletedMidway(t *testing.T) {
	t.Parallel()
	s := dbtest.Store(t)
	ctx := context.Background()
	data := make([]byte, 2*db.BlobChunkSize)
	if _, err := s.BlobPut(ctx, "k", bytes.NewReader(data), time.Now()); err != nil {
		t.Fatalf("BlobPut: %v", err)
	}
	r, err := s.BlobOpen(ctx, "k", 0)
	if err != nil {
		t.Fatalf("BlobOpen: %v", err)
	}
	defer func() { _ = r.Close() }()
	if _, err := io.ReadFull(r, make([]byte, 10)); err != nil {
		t.Fatalf("read the first bytes: %v", err)
	}
	if err := s.BlobDelete(ctx, "k"); err != nil {
		t.Fatalf("BlobDelete: %v", err)
	}
	n, err := io.Copy(io.Discard, r)
	if !errors.Is(err, db.ErrNotFound) {
		t.Errorf("reading on after BlobDelete: %d bytes, error %v, want ErrNotFound (not a short blob)", n, err)
	}
}
