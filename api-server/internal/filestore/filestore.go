// Package filestore is where the api-server keeps the bytes of Files
// (uploads and published session outputs). Metadata (names, media types,
// scopes) lives in PostgreSQL through db.Store; a [Blobs] holds only
// content, under an opaque key the api-server chooses.
//
// Implementations: [Postgres] (chunked rows in the api-server's own
// database, the zero-configuration default) and the S3-compatible object
// store in filestores3. Both run the conformance suite filestoretest.
package filestore

import (
	"context"
	"errors"
	"io"
	"time"
)

// Errors shared by every implementation.
var (
	// ErrNotFound reports a key that holds no complete blob.
	ErrNotFound = errors.New("blob not found")
	// ErrTooLarge reports a Put whose reader yielded more than its limit.
	ErrTooLarge = errors.New("blob exceeds the size limit")
	// ErrExists reports a Put of a key that already holds a blob.
	ErrExists = errors.New("blob already exists")
	// ErrOffset reports an Open at an offset beyond the blob's size.
	ErrOffset = errors.New("offset beyond the end of the blob")
	// ErrInvalidKey reports a key that breaks the rules of [Blobs].
	ErrInvalidKey = errors.New("invalid blob key")
)

// Blobs stores immutable byte strings under keys.
//
// Keys are chosen by the caller (printable ASCII, at most 200 bytes, no
// leading slash; see [CheckKey]; others fail with ErrInvalidKey) and are
// written once: a second Put of a key that exists fails with ErrExists.
// Implementations stream: neither Put nor Open holds a whole blob in
// memory.
type Blobs interface {
	// Put reads r to its end and stores the bytes under key, returning
	// their number. It stores at most limit bytes: when r yields more, Put
	// fails with ErrTooLarge. A blob becomes visible (to Open, Stat) only
	// when Put returns nil: a Put that fails, is cancelled or whose process
	// dies leaves nothing readable under key, and the key can be Put
	// again. An error of r is returned wrapped (errors.Is finds it).
	Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error)
	// Open returns a reader of the blob's bytes from offset (0 ≤ offset ≤
	// size) to its end, for resuming an interrupted read. A missing key
	// returns ErrNotFound, an offset beyond the size ErrOffset. The reader
	// reads lazily with ctx; a blob deleted while it is read either yields
	// all its bytes or fails the read (ErrNotFound), never ends short
	// without an error. The caller closes the reader.
	Open(ctx context.Context, key string, offset int64) (io.ReadCloser, error)
	// Stat returns the blob's size, or ErrNotFound.
	Stat(ctx context.Context, key string) (int64, error)
	// Delete removes the blob; its bytes are gone from the storage when
	// Delete returns nil. A missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// Lister is implemented by stores whose blobs can be listed, so the
// api-server can find bytes no File references: those of an upload or
// output whose metadata was never written (the process died in between),
// or whose deletion failed after the metadata went.
type Lister interface {
	// ListKeys returns up to limit of the blobs whose keys begin with
	// KeyPrefix, in key order, starting after the key after ("" for the
	// first). Fewer than limit means the listing reached the end.
	ListKeys(ctx context.Context, after string, limit int) ([]BlobInfo, error)
}

// BlobInfo is a listed blob: its key and when it was last written.
type BlobInfo struct {
	Key      string
	Modified time.Time
}

// Presigner is implemented by stores that can hand out a short-lived URL
// from which anyone holding it can GET a blob, so workers read bytes from
// the store directly instead of through the api-server.
type Presigner interface {
	// PresignGet returns a URL valid for ttl.
	PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error)
}
