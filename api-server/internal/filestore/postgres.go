package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/mangohq/mango/db"
)

// Postgres returns a [Blobs] keeping bytes in the api-server's own
// database, in chunks of db.BlobChunkSize (see db/blobs.go): the
// zero-configuration default. A Put runs in one transaction for its whole
// length, so very large blobs hold a connection that long.
func Postgres(store *db.Store) Blobs {
	return &postgresBlobs{store: store}
}

type postgresBlobs struct {
	store *db.Store
}

func (p *postgresBlobs) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error) {
	if err := CheckKey(key); err != nil {
		return 0, fmt.Errorf("put blob: %w", err)
	}
	n, err := p.store.BlobPut(ctx, key, LimitReader(r, limit), time.Now())
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, db.ErrConflict):
		return 0, fmt.Errorf("put blob: %w", ErrExists)
	default:
		return 0, err // ErrTooLarge and r's own errors arrive wrapped
	}
}

func (p *postgresBlobs) Open(ctx context.Context, key string, offset int64) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	r, err := p.store.BlobOpen(ctx, key, offset)
	if err != nil {
		return nil, pgErr("open blob", err)
	}
	return &pgReader{r: r}, nil
}

// pgReader maps the errors of a db.BlobReader: a chunk gone because the
// blob was deleted midway is ErrNotFound.
type pgReader struct{ r *db.BlobReader }

func (p *pgReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if err != nil && err != io.EOF { //nolint:errorlint // io.EOF is returned unwrapped, as io.Reader requires
		return n, pgErr("read blob", err)
	}
	return n, err
}

func (p *pgReader) Close() error { return p.r.Close() }

func (p *postgresBlobs) Stat(ctx context.Context, key string) (int64, error) {
	if err := CheckKey(key); err != nil {
		return 0, fmt.Errorf("stat blob: %w", err)
	}
	n, err := p.store.BlobSize(ctx, key)
	if err != nil {
		return 0, pgErr("stat blob", err)
	}
	return n, nil
}

func (p *postgresBlobs) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return fmt.Errorf("delete blob: %w", err)
	}
	return p.store.BlobDelete(ctx, key)
}

// pgErr maps the db package's sentinels to this package's.
func pgErr(op string, err error) error {
	switch {
	case errors.Is(err, db.ErrNotFound):
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	case errors.Is(err, db.ErrBlobOffset):
		return fmt.Errorf("%s: %w", op, ErrOffset)
	}
	return err
}

var _ Blobs = (*postgresBlobs)(nil)
