package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/db"
)

// sweepBatch is how many expired files one sweep query takes.
const sweepBatch = 100

// fileSweeper deletes expired files and the bytes no file references any
// more. Every replica runs one; they may race on a file harmlessly (the
// second delete finds nothing).
type fileSweeper struct {
	store *db.Store
	files filestore.Blobs
	log   *slog.Logger
	every time.Duration
	now   func() time.Time
	// orphanBlobs also deletes PostgreSQL blobs no file references once
	// they are older than orphanGrace (set with the PostgreSQL store).
	orphanBlobs bool
}

// orphanGrace is how old an unreferenced blob must be before the sweeper
// deletes it: far longer than the moment between storing an upload's or
// output's bytes and writing its metadata.
const orphanGrace = time.Hour

func (s *fileSweeper) run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		s.sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweep deletes every file expired by now, in batches.
func (s *fileSweeper) sweep(ctx context.Context) {
	now := time.Now()
	if s.now != nil {
		now = s.now()
	}
	for ctx.Err() == nil {
		orphaned, n, err := s.store.FileExpire(ctx, now, sweepBatch)
		for _, key := range orphaned {
			if err := s.files.Delete(ctx, key); err != nil {
				s.log.ErrorContext(ctx, "expired file's bytes left in the store", "storage_key", key, "err", err)
			}
		}
		if n > 0 {
			s.log.InfoContext(ctx, "deleted expired files", "files", n, "freed", len(orphaned))
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "sweep expired files", "err", err)
			}
			break
		}
		if n < sweepBatch {
			break
		}
	}
	if s.orphanBlobs && ctx.Err() == nil {
		n, err := s.store.BlobOrphansDelete(ctx, now.Add(-orphanGrace), 1000)
		switch {
		case err != nil:
			s.log.WarnContext(ctx, "sweep orphaned file bytes", "err", err)
		case n > 0:
			s.log.InfoContext(ctx, "deleted orphaned file bytes", "blobs", n)
		}
	}
}
