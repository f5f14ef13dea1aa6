package app

import (
	"cmp"
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
	// listed, when files can list its blobs (S3), has each sweep walk on
	// through them from listAfter and delete those no file references once
	// they are older than listedOrphanGrace.
	listed    filestore.Lister
	listAfter string
	// page and pages, when not 0, replace listPage and listPages (tests).
	page, pages int
}

// orphanGrace is how old an unreferenced blob must be before the sweeper
// deletes it: far longer than the moment between storing an upload's or
// output's bytes and writing its metadata.
const orphanGrace = time.Hour

// listedOrphanGrace is orphanGrace for a listed store. S3 dates an object
// stored in parts by the start of its upload, not its end, so a large
// upload over a slow link is older than it looks when its metadata is
// written.
const listedOrphanGrace = 24 * time.Hour

// Each sweep looks at up to listPages pages of listPage listed blobs, so a
// bucket of a million blobs is walked about every two hours.
const (
	listPage  = 1000
	listPages = 10
)

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

// sweep deletes every file expired by now, in batches, and the console
// sign-ins expired by now.
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
	if s.listed != nil {
		s.sweepListed(ctx, now)
	}
	if n, err := s.store.ConsoleSessionsSweep(ctx, now); err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "sweep expired console sign-ins", "err", err)
	} else if n > 0 {
		s.log.InfoContext(ctx, "deleted expired console sign-ins", "sign_ins", n)
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

// sweepListed walks on through the listed store's blobs and deletes those
// no file references that are older than listedOrphanGrace. Keys of
// another form than filestore.NewKey's are never touched: the bucket may
// hold other things.
func (s *fileSweeper) sweepListed(ctx context.Context, now time.Time) {
	var deleted int
	defer func() {
		if deleted > 0 {
			s.log.InfoContext(ctx, "deleted file bytes no file references", "blobs", deleted)
		}
	}()
	size, pages := cmp.Or(s.page, listPage), cmp.Or(s.pages, listPages)
	for range pages {
		page, err := s.listed.ListKeys(ctx, s.listAfter, size)
		if err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "sweep unreferenced file bytes: list", "err", err)
			}
			return
		}
		s.listAfter = ""
		if len(page) == size {
			s.listAfter = page[len(page)-1].Key // the next sweep goes on from here
		}
		var old []string
		for _, b := range page {
			if filestore.IsKey(b.Key) && b.Modified.Before(now.Add(-listedOrphanGrace)) {
				old = append(old, b.Key)
			}
		}
		free, err := s.store.FileKeysUnreferenced(ctx, old)
		if err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "sweep unreferenced file bytes: find references", "err", err)
			}
			return
		}
		for _, k := range free {
			if err := s.files.Delete(ctx, k); err != nil {
				s.log.WarnContext(ctx, "unreferenced file bytes left in the store", "storage_key", k, "err", err)
				continue
			}
			deleted++
		}
		if s.listAfter == "" {
			return // the end: the next sweep starts over
		}
	}
}
