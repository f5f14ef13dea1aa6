package db

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// Blobs: immutable byte strings stored in PostgreSQL, the api-server's
// default file storage (its filestore package adapts these methods).
//
// A blob is a head row (file_blob_heads: key, size, chunk size) and its
// bytes cut into chunks of BlobChunkSize (file_blob_chunks, the last chunk
// shorter). BlobPut writes the head and every chunk in one transaction, so
// a failed, cancelled or crashed Put leaves nothing visible and a second
// Put of the same key fails with ErrConflict (or waits for a concurrent
// first one to end, then fails if it committed). Reads fetch one chunk per
// query, so neither direction holds a whole blob in memory.

// BlobChunkSize is the size of the chunks BlobPut cuts a blob into. Blobs
// remember their chunk size, so changing it leaves existing blobs
// readable.
const BlobChunkSize = 1 << 20

// ErrBlobOffset is returned by BlobOpen for an offset beyond the blob's
// end.
var ErrBlobOffset = errors.New("offset beyond the end of the blob")

// BlobPut stores the bytes of r under key, reading r to its end one chunk
// at a time inside one transaction, and returns their number. The caller
// bounds the size (r fails past its limit): any error from r aborts the
// transaction and is returned wrapped, so errors.Is finds it. A key that
// already holds a blob fails with ErrConflict.
func (s *Store) BlobPut(ctx context.Context, key string, r io.Reader, now time.Time) (int64, error) {
	var size int64
	var readErr error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		if err := q.BlobHeadInsert(ctx, dbsqlc.BlobHeadInsertParams{Key: key, ChunkSize: BlobChunkSize, CreatedAt: now}); err != nil {
			return err
		}
		buf := make([]byte, BlobChunkSize)
		for seq := int32(0); ; seq++ {
			n, err := io.ReadFull(r, buf)
			if n > 0 {
				if err := q.BlobChunkInsert(ctx, dbsqlc.BlobChunkInsertParams{Key: key, Seq: seq, Data: buf[:n]}); err != nil {
					return err
				}
				size += int64(n)
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF { //nolint:errorlint // io.ReadFull returns these unwrapped
				break
			}
			if err != nil {
				readErr = err
				return err
			}
		}
		return q.BlobHeadSetSize(ctx, dbsqlc.BlobHeadSetSizeParams{Key: key, Size: size})
	})
	if readErr != nil {
		return 0, fmt.Errorf("put blob: read content: %w", readErr)
	}
	if err != nil {
		return 0, mapErr("put blob", err)
	}
	return size, nil
}

// BlobSize returns the size of the blob under key, or ErrNotFound.
func (s *Store) BlobSize(ctx context.Context, key string) (int64, error) {
	head, err := s.q.BlobHeadGet(ctx, key)
	if err != nil {
		return 0, mapErr("stat blob", err)
	}
	return head.Size, nil
}

// BlobDelete deletes the blob under key and all its chunks. A missing key
// is not an error.
func (s *Store) BlobDelete(ctx context.Context, key string) error {
	return mapErr("delete blob", s.q.BlobHeadDelete(ctx, key))
}

// BlobOpen returns a reader of the blob under key from offset to its end,
// fetching one chunk per query as it is read, with ctx. It returns
// ErrNotFound for a missing key and ErrBlobOffset when offset is beyond
// the blob's size (offset equal to the size reads nothing). A blob deleted
// while it is being read fails the read with ErrNotFound.
func (s *Store) BlobOpen(ctx context.Context, key string, offset int64) (*BlobReader, error) {
	head, err := s.q.BlobHeadGet(ctx, key)
	if err != nil {
		return nil, mapErr("open blob", err)
	}
	if offset < 0 || offset > head.Size {
		return nil, fmt.Errorf("open blob: offset %d of %d bytes: %w", offset, head.Size, ErrBlobOffset)
	}
	chunk := int64(head.ChunkSize)
	return &BlobReader{
		ctx:       ctx,
		q:         s.q,
		key:       key,
		size:      head.Size,
		seq:       int32(offset / chunk),
		skip:      int(offset % chunk),
		remaining: head.Size - offset,
	}, nil
}

// BlobReader reads a blob chunk by chunk; see [Store.BlobOpen].
type BlobReader struct {
	ctx       context.Context
	q         *dbsqlc.Queries
	key       string
	size      int64
	seq       int32 // next chunk to fetch
	skip      int   // bytes to drop from the start of the next chunk
	remaining int64 // bytes still to return
	buf       []byte
	closed    bool
}

// Size returns the size of the whole blob.
func (r *BlobReader) Size() int64 { return r.size }

// Read implements io.Reader.
func (r *BlobReader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, errors.New("read blob: reader closed")
	}
	if len(p) == 0 {
		return 0, nil
	}
	for len(r.buf) == 0 {
		if r.remaining == 0 {
			return 0, io.EOF
		}
		if err := r.fetch(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	r.remaining -= int64(n)
	return n, nil
}

// fetch loads the next chunk into buf.
func (r *BlobReader) fetch() error {
	data, err := r.q.BlobChunkGet(r.ctx, dbsqlc.BlobChunkGetParams{Key: r.key, Seq: r.seq})
	if err != nil {
		return mapErr(fmt.Sprintf("read blob chunk %d", r.seq), err)
	}
	if r.skip > len(data) {
		return fmt.Errorf("read blob chunk %d: %d bytes, expected at least %d", r.seq, len(data), r.skip)
	}
	data = data[r.skip:]
	if int64(len(data)) > r.remaining {
		data = data[:r.remaining]
	}
	if len(data) == 0 {
		return fmt.Errorf("read blob chunk %d: empty, %d bytes still expected", r.seq, r.remaining)
	}
	r.buf, r.skip = data, 0
	r.seq++
	return nil
}

// Close releases the reader; it holds no connection between reads.
func (r *BlobReader) Close() error {
	r.closed = true
	r.buf = nil
	return nil
}
