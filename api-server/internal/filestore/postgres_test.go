package filestore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/filestore/filestoretest"
	"github.com/mangohq/mango/db/dbtest"
)

func TestPostgres(t *testing.T) {
	filestoretest.Run(t, func(t *testing.T) filestore.Blobs {
		return filestore.Postgres(dbtest.Store(t))
	})
}

// TestPostgresStreaming is not parallel: it measures the process's heap.
func TestPostgresStreaming(t *testing.T) {
	b := filestore.Postgres(dbtest.Store(t))
	filestoretest.Streaming(t, b, 64<<20, 32<<20)
}

// BenchmarkPostgres200MiB reports memory and throughput for a 200 MiB blob
// (go test -run ^$ -bench Postgres200MiB -benchtime 1x).
func BenchmarkPostgres200MiB(b *testing.B) {
	store := filestore.Postgres(dbtest.Store(b))
	for b.Loop() {
		f := filestoretest.Measure(b, store, "bench/200mib", 200<<20)
		b.Log(f)
		filestoretest.Report(b, f)
	}
}

func TestPostgresReadOfDeletedBlobFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := filestore.Postgres(dbtest.Store(t))
	if _, err := b.Put(ctx, "k", bytes.NewReader(make([]byte, 3<<20)), 1<<30); err != nil {
		t.Fatalf("Put: %v", err)
	}
	r, err := b.Open(ctx, "k", 0)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { _ = r.Close() }()
	if _, err := io.ReadFull(r, make([]byte, 100)); err != nil {
		t.Fatalf("read the first bytes: %v", err)
	}
	if err := b.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if n, err := io.Copy(io.Discard, r); !errors.Is(err, filestore.ErrNotFound) {
		t.Errorf("reading on after Delete: %d bytes, error %v, want ErrNotFound", n, err)
	}
}
