package db

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"golang.org/x/text/unicode/norm"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// Memory limits (the Memory Stores API's).
const (
	// MaxMemoryBytes bounds a memory's content (100 kB).
	MaxMemoryBytes = 102400
	// MaxMemoryPathBytes bounds a memory's wire path.
	MaxMemoryPathBytes = 1024
	// MaxMemoryPathSegments bounds the segments of a memory's path.
	MaxMemoryPathSegments = 20
	// MaxMemoryStoreMetadata bounds a store's metadata pairs.
	MaxMemoryStoreMetadata = 16
)

// Memory version operations.
const (
	MemoryCreated  = "created"
	MemoryModified = "modified"
	MemoryDeleted  = "deleted"
)

// Actor types of a memory version (who wrote or redacted it).
const (
	// ActorAPI is a caller of the API; Actor.ID is its API key id.
	ActorAPI = "api_actor"
	// ActorSession is an agent writing through a session's mount;
	// Actor.ID is the session id.
	ActorSession = "session_actor"
)

// Memory sync outcomes (MemoryChangeResult.Outcome).
const (
	MemoryApplied   = "applied"
	MemoryUnchanged = "unchanged"
	MemoryConflict  = "conflict"
	MemoryRefused   = "refused"
)

// Errors of memory stores, all ErrConflict.
var (
	// ErrMemoryStoreArchived reports a write to an archived store.
	ErrMemoryStoreArchived = fmt.Errorf("memory store is archived and read-only: %w", ErrConflict)
	// ErrMemoryPathTaken reports a memory path another memory of the
	// store already has.
	ErrMemoryPathTaken = fmt.Errorf("another memory of the store has this path: %w", ErrConflict)
	// ErrMemoryVersionCurrent reports the redaction of the version that
	// holds a memory's current content.
	ErrMemoryVersionCurrent = fmt.Errorf("the version holds the memory's current content; update or delete the memory first: %w", ErrConflict)
)

// ErrMemoryStoreMetadata reports metadata beyond MaxMemoryStoreMetadata
// pairs after an update.
var ErrMemoryStoreMetadata = fmt.Errorf("a memory store holds at most %d metadata pairs", MaxMemoryStoreMetadata)

// MemoryPreconditionError reports a content_sha256 precondition that does
// not hold: the memory's content hash is Actual, the caller expected
// Expected.
type MemoryPreconditionError struct{ Expected, Actual string }

func (e *MemoryPreconditionError) Error() string {
	return fmt.Sprintf("precondition failed: the memory's content_sha256 is %s, the request expected %s", e.Actual, e.Expected)
}

// Unwrap makes a MemoryPreconditionError an ErrConflict.
func (e *MemoryPreconditionError) Unwrap() error { return ErrConflict }

// MemoryPathClashError reports a path that is a folder of another memory
// (or lies under one): the store must stay a tree of files.
type MemoryPathClashError struct{ Path, Other string }

func (e *MemoryPathClashError) Error() string {
	return fmt.Sprintf("path %s clashes with memory %s: a path cannot be both a memory and a folder of memories", e.Path, e.Other)
}

// Unwrap makes a MemoryPathClashError an ErrConflict.
func (e *MemoryPathClashError) Unwrap() error { return ErrConflict }

// MemoryStore is a named collection of memories.
type MemoryStore struct {
	ID          string
	Name        string
	Description string
	Metadata    map[string]string
	ArchivedAt  *time.Time
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Memory is a live memory: a text document at a wire path ("/notes.md").
type Memory struct {
	ID        string
	StoreID   string
	Path      string
	Content   string
	SHA256    string
	SizeBytes int64
	// VersionID is the version holding the current content.
	VersionID string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Actor is who wrote (or redacted) a memory version.
type Actor struct {
	// Type is ActorAPI or ActorSession.
	Type string
	// ID is the API key id or the session id.
	ID string
}

// MemoryVersion is one change of a memory. Path, Content, SHA256 and
// SizeBytes are nil once redacted; Content, SHA256 and SizeBytes are nil
// for a deletion.
type MemoryVersion struct {
	ID         string
	StoreID    string
	MemoryID   string
	Path       *string
	Operation  string
	Content    *string
	SHA256     *string
	SizeBytes  *int64
	CreatedBy  Actor
	CreatedAt  time.Time
	RedactedAt *time.Time
	RedactedBy *Actor
}

// MemoryFile is a memory as a session sees it: Path relative to the
// store's root, no leading slash ("notes.md").
type MemoryFile struct {
	Path    string
	Content []byte
	SHA256  string
}

// MemoryChange is a change a session's agent made under a mount (Path
// relative to the store's root): new content, or Deleted. BaseSHA256 is
// the worker's view of the base (informational: the stored base decides).
type MemoryChange struct {
	Path       string
	Content    []byte
	SHA256     string
	Deleted    bool
	BaseSHA256 string
}

// MemoryChangeResult is what MemorySyncApply decided for a change.
// Outcome is MemoryApplied, MemoryUnchanged, MemoryConflict (ConflictPath:
// where the agent's content was saved, relative) or MemoryRefused
// (Reason).
type MemoryChangeResult struct{ Path, Outcome, ConflictPath, Reason string }

// ContentSHA256 is the lowercase hex SHA-256 of content.
func ContentSHA256(content []byte) string {
	h := sha256.Sum256(content)
	return hex.EncodeToString(h[:])
}

// ValidateMemoryPath checks a wire path ("/projects/a.md"): it starts
// with "/", has 1 to 20 segments, none empty, "." or "..", no control or
// format character nor U+2028/U+2029, is valid UTF-8 in NFC and at most
// 1024 bytes.
func ValidateMemoryPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q must start with \"/\"", p)
	case len(p) > MaxMemoryPathBytes:
		return fmt.Errorf("path is %d bytes long; at most %d are allowed", len(p), MaxMemoryPathBytes)
	case !utf8.ValidString(p):
		return fmt.Errorf("path %q is not valid UTF-8", p)
	case !norm.NFC.IsNormalString(p):
		return fmt.Errorf("path %q is not in Unicode Normalization Form C", p)
	}
	segs := strings.Split(p[1:], "/")
	if len(segs) > MaxMemoryPathSegments {
		return fmt.Errorf("path %q has %d segments; at most %d are allowed", p, len(segs), MaxMemoryPathSegments)
	}
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return fmt.Errorf("path %q has an empty, \".\" or \"..\" segment; segments must name a file or folder", p)
		}
	}
	for _, r := range p {
		if unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return fmt.Errorf("path %q contains the character %U; control and format characters are not allowed", p, r)
		}
	}
	return nil
}

// ValidateMemoryContent checks content: UTF-8 text of at most
// MaxMemoryBytes bytes.
func ValidateMemoryContent(content []byte) error {
	if len(content) > MaxMemoryBytes {
		return fmt.Errorf("content is %d bytes; at most %d (100 kB) are allowed", len(content), MaxMemoryBytes)
	}
	if !utf8.Valid(content) {
		return errors.New("content is not valid UTF-8 text")
	}
	return nil
}

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID mints an identifier in the form of api-server/internal/ids: the
// prefix, six base62 digits of the time in seconds, 18 random ones.
func newID(prefix string, now time.Time) string {
	var b strings.Builder
	b.WriteString(prefix)
	var ts [6]byte
	t := now.Unix()
	for i := len(ts) - 1; i >= 0; i-- {
		ts[i] = idAlphabet[t%62]
		t /= 62
	}
	b.Write(ts[:])
	for range 18 {
		n, err := rand.Int(rand.Reader, big.NewInt(62))
		if err != nil {
			panic("db: crypto/rand failed: " + err.Error())
		}
		b.WriteByte(idAlphabet[n.Int64()])
	}
	return b.String()
}

// Identifier prefixes of memories and memory versions, which the db mints.
const (
	MemoryIDPrefix        = "mem_"
	MemoryVersionIDPrefix = "memver_"
)

func memoryStoreFromRow(r dbsqlc.MemoryStore) (*MemoryStore, error) {
	out := &MemoryStore{ID: r.ID, Name: r.Name, Description: r.Description, Metadata: map[string]string{},
		ArchivedAt: r.ArchivedAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if len(r.Metadata) > 0 {
		if err := json.Unmarshal(r.Metadata, &out.Metadata); err != nil {
			return nil, fmt.Errorf("decode metadata of memory store %s: %w", r.ID, err)
		}
	}
	return out, nil
}

func memoryFromRow(r dbsqlc.Memory) *Memory {
	return &Memory{ID: r.ID, StoreID: r.StoreID, Path: r.Path, Content: r.Content, SHA256: r.ContentSha256,
		SizeBytes: r.SizeBytes, VersionID: r.VersionID, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

func memoryVersionFromRow(r dbsqlc.MemoryVersion) *MemoryVersion {
	out := &MemoryVersion{ID: r.ID, StoreID: r.StoreID, MemoryID: r.MemoryID, Path: r.Path, Operation: r.Operation,
		Content: r.Content, SHA256: r.ContentSha256, SizeBytes: r.SizeBytes, CreatedBy: Actor{Type: r.ActorType, ID: r.ActorID},
		CreatedAt: r.CreatedAt, RedactedAt: r.RedactedAt}
	if r.RedactedByType != nil && r.RedactedByID != nil {
		out.RedactedBy = &Actor{Type: *r.RedactedByType, ID: *r.RedactedByID}
	}
	return out
}

// lockWritableStore locks a store for a memory write: ErrNotFound when
// it is gone, ErrMemoryStoreArchived when archived.
func lockWritableStore(ctx context.Context, q *dbsqlc.Queries, storeID string) error {
	row, err := q.MemoryStoreLock(ctx, storeID)
	if err != nil {
		return fmt.Errorf("memory store %s: %w", storeID, mapErr("lock memory store", err))
	}
	if row.ArchivedAt != nil {
		return fmt.Errorf("memory store %s: %w", storeID, ErrMemoryStoreArchived)
	}
	return nil
}

// memoryByPath returns the memory at a wire path, or nil.
func memoryByPath(ctx context.Context, q *dbsqlc.Queries, storeID, p string) (*Memory, error) {
	row, err := q.MemoryGetByPath(ctx, dbsqlc.MemoryGetByPathParams{StoreID: storeID, Path: p})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return memoryFromRow(row), nil
}

// folderEnd is the smallest string above every path under folder f
// (which ends with "/"): '/' + 1 is '0'.
func folderEnd(f string) string { return f[:len(f)-1] + "0" }
