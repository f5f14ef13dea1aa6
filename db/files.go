package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// File origins: how a File came to be.
const (
	// FileOriginUpload is a file a client uploaded.
	FileOriginUpload = "upload"
	// FileOriginOutput is a file a session published from its outputs.
	FileOriginOutput = "output"
	// FileOriginSessionCopy is a session-scoped copy of another file,
	// sharing its bytes.
	FileOriginSessionCopy = "session_copy"
)

// File is the metadata of a stored file. Its bytes live in the
// api-server's file store under StorageKey, which several files may share.
type File struct {
	ID           string
	Filename     string
	MimeType     string
	SizeBytes    int64
	SHA256       string
	StorageKey   string
	Downloadable bool
	// ScopeSessionID is the session the file belongs to; empty for a
	// client upload.
	ScopeSessionID string
	// Origin is one of the FileOrigin constants.
	Origin string
	// OutputPath is where the session wrote an output (origin output).
	OutputPath string
	// OutputModifiedAt is the output's modification time in the sandbox,
	// when known.
	OutputModifiedAt *time.Time
	CreatedAt        time.Time
	// ExpiresAt, when set, is when the file stops existing (Expired).
	ExpiresAt *time.Time
}

// Expired reports whether the file has expired at now: it then reads as
// missing until the sweeper (FileExpire) deletes it.
func (f *File) Expired(now time.Time) bool { return f.ExpiresAt != nil && !f.ExpiresAt.After(now) }

func fileFromRow(r dbsqlc.File) File {
	f := File{ID: r.ID, Filename: r.Filename, MimeType: r.MimeType, SizeBytes: r.SizeBytes, SHA256: r.Sha256,
		StorageKey: r.StorageKey, Downloadable: r.Downloadable, Origin: r.Origin, OutputModifiedAt: r.OutputModifiedAt,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
	if r.ScopeSessionID != nil {
		f.ScopeSessionID = *r.ScopeSessionID
	}
	if r.OutputPath != nil {
		f.OutputPath = *r.OutputPath
	}
	return f
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func fileInsertParams(f *File) dbsqlc.FileInsertParams {
	return dbsqlc.FileInsertParams{ID: f.ID, Filename: f.Filename, MimeType: f.MimeType, SizeBytes: f.SizeBytes,
		Sha256: f.SHA256, StorageKey: f.StorageKey, Downloadable: f.Downloadable, ScopeSessionID: optString(f.ScopeSessionID),
		Origin: f.Origin, OutputPath: optString(f.OutputPath), OutputModifiedAt: f.OutputModifiedAt, CreatedAt: f.CreatedAt,
		ExpiresAt: f.ExpiresAt}
}

// FileInsert stores a file's metadata; its bytes must already be stored.
// ErrConflict when the id (or, for an output, the session's path) is
// taken.
func (s *Store) FileInsert(ctx context.Context, f *File) error {
	return mapErr("insert file", s.q.FileInsert(ctx, fileInsertParams(f)))
}

// FileGet returns a file, or ErrNotFound.
func (s *Store) FileGet(ctx context.Context, id string) (*File, error) {
	row, err := s.q.FileGetByID(ctx, id)
	if err != nil {
		return nil, mapErr("get file", err)
	}
	f := fileFromRow(row)
	return &f, nil
}

// FileListParams filter and page a file list.
type FileListParams struct {
	// ScopeSessionID, when set, keeps the files of that session.
	ScopeSessionID string
	// IDs, when not empty, keeps the files with these ids.
	IDs   []string
	After *Cursor
	Limit int
	// Now leaves out the files expired by then.
	Now time.Time
}

// FileList returns files newest first, and whether more follow.
func (s *Store) FileList(ctx context.Context, p FileListParams) ([]File, bool, error) {
	arg := dbsqlc.FileListParams{ScopeSessionID: optString(p.ScopeSessionID), Ids: p.IDs, RowLimit: int32(p.Limit + 1), //nolint:gosec // limits are small
		Now: p.Now}
	if arg.Ids == nil {
		arg.Ids = []string{}
	}
	if p.After != nil {
		arg.AfterCreatedAt = &p.After.CreatedAt
		arg.AfterID = p.After.ID
	}
	rows, err := s.q.FileList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list files", err)
	}
	out := make([]File, 0, len(rows))
	for _, r := range rows {
		out = append(out, fileFromRow(r))
	}
	page, more := trim(out, p.Limit)
	return page, more, nil
}

// deleteFileTx deletes a file's row and returns its storage key with
// whether no other row references the key any more.
func deleteFileTx(ctx context.Context, q *dbsqlc.Queries, id string) (string, bool, error) {
	key, err := q.FileDeleteByID(ctx, id)
	if err != nil {
		return "", false, err
	}
	referenced, err := q.FileKeyReferenced(ctx, key)
	if err != nil {
		return "", false, err
	}
	return key, !referenced, nil
}

// FileDelete deletes a file's metadata and returns its storage key and
// whether the key became unreferenced, in which case the caller deletes
// the bytes (after this commit: a crash in between leaves unreferenced
// bytes, never a file without bytes). ErrNotFound when there is no such
// file.
func (s *Store) FileDelete(ctx context.Context, id string) (key string, unreferenced bool, err error) {
	err = s.inTx(ctx, "delete file", func(q *dbsqlc.Queries) error {
		var err error
		key, unreferenced, err = deleteFileTx(ctx, q, id)
		return err
	})
	return key, unreferenced, err
}

// FileCopyForSession stores a session-scoped copy of file srcID under
// newID, sharing its bytes: origin session_copy, not downloadable, scoped
// to sessionID. The source is locked while copying, so a concurrent
// FileDelete of it sees the copy's reference. ErrNotFound when the source
// does not exist.
func (s *Store) FileCopyForSession(ctx context.Context, srcID, sessionID, newID string, now time.Time) (*File, error) {
	var out File
	err := s.inTx(ctx, "copy file for session", func(q *dbsqlc.Queries) error {
		row, err := q.FileLockShare(ctx, srcID)
		if err != nil {
			return err
		}
		src := fileFromRow(row)
		out = File{ID: newID, Filename: src.Filename, MimeType: src.MimeType, SizeBytes: src.SizeBytes, SHA256: src.SHA256,
			StorageKey: src.StorageKey, ScopeSessionID: sessionID, Origin: FileOriginSessionCopy, CreatedAt: now, ExpiresAt: src.ExpiresAt}
		return q.FileInsert(ctx, fileInsertParams(&out))
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// OutputGetByPath returns the output the session published at path, or
// ErrNotFound.
func (s *Store) OutputGetByPath(ctx context.Context, sessionID, path string) (*File, error) {
	row, err := s.q.OutputGetByPath(ctx, dbsqlc.OutputGetByPathParams{ScopeSessionID: &sessionID, OutputPath: &path})
	if err != nil {
		return nil, mapErr("get output", err)
	}
	f := fileFromRow(row)
	return &f, nil
}

// OutputList returns the session's outputs by path.
func (s *Store) OutputList(ctx context.Context, sessionID string) ([]File, error) {
	rows, err := s.q.OutputList(ctx, &sessionID)
	if err != nil {
		return nil, mapErr("list outputs", err)
	}
	out := make([]File, 0, len(rows))
	for _, r := range rows {
		out = append(out, fileFromRow(r))
	}
	return out, nil
}

// OutputReplace publishes f (origin output, with ScopeSessionID and
// OutputPath set) in one transaction: the output published at the same
// path before, if any, is deleted, and f is inserted. It returns the
// replaced file's storage key when that key became unreferenced (the
// caller deletes those bytes after this commit), else "". ErrNotFound when
// the session does not exist; ErrConflict when a concurrent publish of the
// path won.
func (s *Store) OutputReplace(ctx context.Context, f *File) (orphanedKey string, err error) {
	if f.Origin != FileOriginOutput || f.ScopeSessionID == "" || f.OutputPath == "" {
		return "", fmt.Errorf("replace output: origin output with a session and a path required")
	}
	err = s.inTx(ctx, "replace output", func(q *dbsqlc.Queries) error {
		exists, err := q.FileSessionExists(ctx, f.ScopeSessionID)
		if err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("session %s: %w", f.ScopeSessionID, ErrNotFound)
		}
		old, err := q.OutputLockByPath(ctx, dbsqlc.OutputLockByPathParams{ScopeSessionID: &f.ScopeSessionID, OutputPath: &f.OutputPath})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			key, unreferenced, err := deleteFileTx(ctx, q, old.ID)
			if err != nil {
				return err
			}
			if unreferenced && key != f.StorageKey {
				orphanedKey = key
			}
		}
		return q.FileInsert(ctx, fileInsertParams(f))
	})
	if err != nil {
		return "", err
	}
	return orphanedKey, nil
}

// FileExpire deletes up to limit files expired at now and returns the
// storage keys no file references any more (the caller deletes those
// bytes), with the number of files deleted.
func (s *Store) FileExpire(ctx context.Context, now time.Time, limit int) (orphaned []string, n int, err error) {
	ids, err := s.q.FileExpiredList(ctx, dbsqlc.FileExpiredListParams{Now: now, RowLimit: int32(limit)}) //nolint:gosec // small
	if err != nil {
		return nil, 0, mapErr("list expired files", err)
	}
	for _, id := range ids {
		key, unreferenced, err := s.FileDelete(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return orphaned, n, err
		}
		n++
		if unreferenced {
			orphaned = append(orphaned, key)
		}
	}
	return orphaned, n, nil
}

// FileKeysUnreferenced returns those of keys that no file references (as
// its storage_key), in no particular order.
func (s *Store) FileKeysUnreferenced(ctx context.Context, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	free, err := s.q.FileKeysUnreferenced(ctx, keys)
	return free, mapErr("find unreferenced storage keys", err)
}

// BlobOrphansDelete deletes up to limit blobs of the PostgreSQL file store
// that no file references and that were stored before olderThan: the
// bytes of an upload or output whose metadata was never written (the
// process died in between), or whose deletion failed after the metadata
// went. It returns how many it deleted.
func (s *Store) BlobOrphansDelete(ctx context.Context, olderThan time.Time, limit int) (int64, error) {
	n, err := s.q.BlobOrphansDelete(ctx, dbsqlc.BlobOrphansDeleteParams{OlderThan: olderThan, RowLimit: int32(limit)}) //nolint:gosec // small
	return n, mapErr("delete orphaned blobs", err)
}
