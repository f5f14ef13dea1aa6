package db

import (
	"context"
	"errors"
	"path"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// memWriter writes memories of one store inside a transaction that holds
// the store's row lock, recording a version per change. Each write takes
// a later microsecond, so versions of one transaction list in order.
type memWriter struct {
	q       *dbsqlc.Queries
	storeID string
	actor   Actor
	now     time.Time
}

func (w *memWriter) tick() time.Time {
	at := w.now
	w.now = w.now.Add(time.Microsecond)
	return at
}

// checkClash returns a *MemoryPathClashError when a memory other than
// exceptID is a folder of p or lies under p as a folder.
func (w *memWriter) checkClash(ctx context.Context, p, exceptID string) error {
	var ancestors []string
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			ancestors = append(ancestors, p[:i])
		}
	}
	other, err := w.q.MemoryPathClash(ctx, dbsqlc.MemoryPathClashParams{StoreID: w.storeID, ExceptID: exceptID,
		Ancestors: ancestors, Folder: p + "/", FolderEnd: p + "0"})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return mapErr("check memory path", err)
	}
	if other != "" {
		return &MemoryPathClashError{Path: p, Other: other}
	}
	return nil
}

func (w *memWriter) version(ctx context.Context, memoryID, p, op string, content *string, at time.Time) (string, error) {
	id := newID(MemoryVersionIDPrefix, at)
	arg := dbsqlc.MemoryVersionInsertParams{ID: id, StoreID: w.storeID, MemoryID: memoryID, Path: &p, Operation: op,
		ActorType: w.actor.Type, ActorID: w.actor.ID, CreatedAt: at}
	if content != nil {
		sha, size := ContentSHA256([]byte(*content)), int64(len(*content))
		arg.Content, arg.ContentSha256, arg.SizeBytes = content, &sha, &size
	}
	return id, w.q.MemoryVersionInsert(ctx, arg)
}

// create adds a memory at a free wire path p.
func (w *memWriter) create(ctx context.Context, p, content string) (*Memory, error) {
	existing, err := memoryByPath(ctx, w.q, w.storeID, p)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		return nil, ErrMemoryPathTaken
	}
	if err := w.checkClash(ctx, p, ""); err != nil {
		return nil, err
	}
	at := w.tick()
	m := &Memory{ID: newID(MemoryIDPrefix, at), StoreID: w.storeID, Path: p, Content: content,
		SHA256: ContentSHA256([]byte(content)), SizeBytes: int64(len(content)), CreatedAt: at, UpdatedAt: at}
	if m.VersionID, err = w.version(ctx, m.ID, p, MemoryCreated, &content, at); err != nil {
		return nil, err
	}
	err = w.q.MemoryInsert(ctx, dbsqlc.MemoryInsertParams{ID: m.ID, StoreID: w.storeID, Path: p, Content: content,
		ContentSha256: m.SHA256, SizeBytes: m.SizeBytes, VersionID: m.VersionID, CreatedAt: at})
	return m, err
}

// modify gives m a new path and content; a change that changes nothing
// writes nothing.
func (w *memWriter) modify(ctx context.Context, m *Memory, p, content string) (*Memory, error) {
	if p == m.Path && content == m.Content {
		return m, nil
	}
	if p != m.Path {
		existing, err := memoryByPath(ctx, w.q, w.storeID, p)
		if err != nil {
			return nil, err
		}
		if existing != nil {
			return nil, ErrMemoryPathTaken
		}
		if err := w.checkClash(ctx, p, m.ID); err != nil {
			return nil, err
		}
	}
	at := w.tick()
	vid, err := w.version(ctx, m.ID, p, MemoryModified, &content, at)
	if err != nil {
		return nil, err
	}
	out := *m
	out.Path, out.Content, out.SHA256, out.SizeBytes, out.VersionID, out.UpdatedAt = p, content, ContentSHA256([]byte(content)), int64(len(content)), vid, at
	err = w.q.MemoryUpdate(ctx, dbsqlc.MemoryUpdateParams{StoreID: w.storeID, ID: m.ID, Path: p, Content: content,
		ContentSha256: out.SHA256, SizeBytes: out.SizeBytes, VersionID: vid, UpdatedAt: at})
	return &out, err
}

// remove deletes m, recording a deleted version at its path.
func (w *memWriter) remove(ctx context.Context, m *Memory) error {
	if _, err := w.version(ctx, m.ID, m.Path, MemoryDeleted, nil, w.tick()); err != nil {
		return err
	}
	return w.q.MemoryDelete(ctx, dbsqlc.MemoryDeleteParams{StoreID: w.storeID, ID: m.ID})
}

// conflictPath is where a session's losing content of wire path p is
// saved: "<p without ext>.conflict-<session id><ext>".
func conflictPath(p, sessionID string) string {
	dir, base := path.Split(p)
	ext := path.Ext(base)
	if ext == base { // ".bashrc": no extension
		ext = ""
	}
	return dir + strings.TrimSuffix(base, ext) + ".conflict-" + sessionID + ext
}
