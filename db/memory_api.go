package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// MemoryStoreCreate stores a new memory store (st.ID, Name, Description,
// Metadata, CreatedAt); UpdatedAt is set to CreatedAt.
func (s *Store) MemoryStoreCreate(ctx context.Context, st *MemoryStore) error {
	md := st.Metadata
	if md == nil {
		md = map[string]string{}
	}
	raw, _ := json.Marshal(md) // a map of strings always marshals
	err := s.withWebhook(ctx, "create memory store", st.ID, "memory_store.created", st.CreatedAt, func(q *dbsqlc.Queries) error {
		_, err := q.MemoryStoreInsert(ctx, dbsqlc.MemoryStoreInsertParams{ID: st.ID, Name: st.Name, Description: st.Description,
			Metadata: raw, CreatedAt: st.CreatedAt})
		return err
	})
	if err != nil {
		return err
	}
	st.Metadata, st.UpdatedAt = md, st.CreatedAt
	return nil
}

// MemoryStoreGet returns a memory store, or ErrNotFound.
func (s *Store) MemoryStoreGet(ctx context.Context, id string) (*MemoryStore, error) {
	row, err := s.q.MemoryStoreGet(ctx, id)
	if err != nil {
		return nil, mapErr("get memory store", err)
	}
	return memoryStoreFromRow(row)
}

// MemoryStorePatch is an update of a store: nil fields keep their value;
// a Metadata key with a nil value is removed, one with a value is set.
type MemoryStorePatch struct {
	Name        *string
	Description *string
	Metadata    map[string]*string
}

// MemoryStoreUpdate applies a patch: ErrNotFound, ErrMemoryStoreArchived,
// ErrMemoryStoreMetadata when the metadata would exceed its limit.
func (s *Store) MemoryStoreUpdate(ctx context.Context, id string, p MemoryStorePatch, now time.Time) (*MemoryStore, error) {
	var out *MemoryStore
	err := s.inTx(ctx, "update memory store", func(q *dbsqlc.Queries) error {
		row, err := q.MemoryStoreLock(ctx, id)
		if err != nil {
			return err
		}
		st, err := memoryStoreFromRow(row)
		if err != nil {
			return err
		}
		if st.ArchivedAt != nil {
			return fmt.Errorf("memory store %s: %w", id, ErrMemoryStoreArchived)
		}
		if p.Name != nil {
			st.Name = *p.Name
		}
		if p.Description != nil {
			st.Description = *p.Description
		}
		for k, v := range p.Metadata {
			if v == nil {
				delete(st.Metadata, k)
			} else {
				st.Metadata[k] = *v
			}
		}
		if len(st.Metadata) > MaxMemoryStoreMetadata {
			return fmt.Errorf("the update leaves %d pairs: %w", len(st.Metadata), ErrMemoryStoreMetadata)
		}
		raw, _ := json.Marshal(st.Metadata) // a map of strings always marshals
		row, err = q.MemoryStoreUpdate(ctx, dbsqlc.MemoryStoreUpdateParams{ID: id, Name: st.Name, Description: st.Description,
			Metadata: raw, UpdatedAt: now})
		if err != nil {
			return err
		}
		out, err = memoryStoreFromRow(row)
		return err
	})
	return out, err
}

// MemoryStoreArchive archives a store (idempotent): its memories become
// read-only. ErrNotFound when there is no such store.
func (s *Store) MemoryStoreArchive(ctx context.Context, id string, now time.Time) (*MemoryStore, error) {
	var row dbsqlc.MemoryStore
	err := s.withWebhook(ctx, "archive memory store", id, "memory_store.archived", now, func(q *dbsqlc.Queries) (err error) {
		row, err = q.MemoryStoreArchive(ctx, dbsqlc.MemoryStoreArchiveParams{ID: id, Now: now})
		return err
	})
	if err != nil {
		return nil, err
	}
	return memoryStoreFromRow(row)
}

// MemoryStoreDelete deletes a store with its memories, versions and
// nothing else (sessions that attached it find it gone); ErrNotFound.
func (s *Store) MemoryStoreDelete(ctx context.Context, id string) error {
	return s.withWebhook(ctx, "delete memory store", id, "memory_store.deleted", time.Now(), func(q *dbsqlc.Queries) error {
		n, err := q.MemoryStoreDelete(ctx, id)
		if err == nil && n == 0 {
			err = fmt.Errorf("memory store %s: %w", id, ErrNotFound)
		}
		return err
	})
}

// MemoryStoreFilter selects stores to list.
type MemoryStoreFilter struct {
	IncludeArchived        bool
	CreatedGTE, CreatedLTE *time.Time
}

// MemoryStoreList returns up to limit stores, newest first, after the
// cursor, and whether more follow.
func (s *Store) MemoryStoreList(ctx context.Context, f MemoryStoreFilter, after *Cursor, limit int) ([]*MemoryStore, bool, error) {
	arg := dbsqlc.MemoryStoreListParams{IncludeArchived: f.IncludeArchived, CreatedGte: f.CreatedGTE, CreatedLte: f.CreatedLTE,
		RowLimit: int32(limit + 1)} //nolint:gosec // limits are small
	if after != nil {
		arg.AfterCreatedAt, arg.AfterID = &after.CreatedAt, after.ID
	}
	rows, err := s.q.MemoryStoreList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list memory stores", err)
	}
	out := make([]*MemoryStore, 0, len(rows))
	for _, r := range rows {
		st, err := memoryStoreFromRow(r)
		if err != nil {
			return nil, false, err
		}
		out = append(out, st)
	}
	page, more := trim(out, limit)
	return page, more, nil
}

// MemoryCreate adds a memory at wire path p (validated by the caller):
// ErrNotFound (store), ErrMemoryStoreArchived, ErrMemoryPathTaken, a
// *MemoryPathClashError.
func (s *Store) MemoryCreate(ctx context.Context, storeID, p, content string, actor Actor, now time.Time) (*Memory, error) {
	var out *Memory
	err := s.inTx(ctx, "create memory", func(q *dbsqlc.Queries) (err error) {
		if err := lockWritableStore(ctx, q, storeID); err != nil {
			return err
		}
		w := &memWriter{q: q, storeID: storeID, actor: actor, now: now}
		out, err = w.create(ctx, p, content)
		return err
	})
	return out, err
}

// MemoryGet returns a memory of a store, or ErrNotFound.
func (s *Store) MemoryGet(ctx context.Context, storeID, id string) (*Memory, error) {
	row, err := s.q.MemoryGetByID(ctx, dbsqlc.MemoryGetByIDParams{StoreID: storeID, ID: id})
	if err != nil {
		return nil, mapErr("get memory", err)
	}
	return memoryFromRow(row), nil
}

// MemoryUpdate is an update of a memory: nil fields keep their value;
// IfSHA256, when set, must be the memory's current content hash.
type MemoryUpdate struct {
	Path     *string
	Content  *string
	IfSHA256 string
}

// MemoryUpdateApply updates a memory (a new version unless nothing
// changes): ErrNotFound, ErrMemoryStoreArchived, *MemoryPreconditionError,
// ErrMemoryPathTaken, *MemoryPathClashError.
func (s *Store) MemoryUpdateApply(ctx context.Context, storeID, id string, u MemoryUpdate, actor Actor, now time.Time) (*Memory, error) {
	var out *Memory
	err := s.inTx(ctx, "update memory", func(q *dbsqlc.Queries) error {
		m, err := lockedMemory(ctx, q, storeID, id, u.IfSHA256)
		if err != nil {
			return err
		}
		p, content := m.Path, m.Content
		if u.Path != nil {
			p = *u.Path
		}
		if u.Content != nil {
			content = *u.Content
		}
		w := &memWriter{q: q, storeID: storeID, actor: actor, now: now}
		out, err = w.modify(ctx, m, p, content)
		return err
	})
	return out, err
}

// lockedMemory locks a writable store and returns one of its memories,
// checking a content_sha256 precondition (ifSHA256 "": none).
func lockedMemory(ctx context.Context, q *dbsqlc.Queries, storeID, id, ifSHA256 string) (*Memory, error) {
	if err := lockWritableStore(ctx, q, storeID); err != nil {
		return nil, err
	}
	row, err := q.MemoryGetByID(ctx, dbsqlc.MemoryGetByIDParams{StoreID: storeID, ID: id})
	if err != nil {
		return nil, fmt.Errorf("memory %s: %w", id, mapErr("get memory", err))
	}
	m := memoryFromRow(row)
	if ifSHA256 != "" && ifSHA256 != m.SHA256 {
		return nil, &MemoryPreconditionError{Expected: ifSHA256, Actual: m.SHA256}
	}
	return m, nil
}

// MemoryDelete deletes a memory (its versions stay), recording a deleted
// version: ErrNotFound, ErrMemoryStoreArchived, *MemoryPreconditionError
// when ifSHA256 is set and differs from the content's hash.
func (s *Store) MemoryDelete(ctx context.Context, storeID, id, ifSHA256 string, actor Actor, now time.Time) error {
	return s.inTx(ctx, "delete memory", func(q *dbsqlc.Queries) error {
		m, err := lockedMemory(ctx, q, storeID, id, ifSHA256)
		if err != nil {
			return err
		}
		w := &memWriter{q: q, storeID: storeID, actor: actor, now: now}
		return w.remove(ctx, m)
	})
}

// MemoryListParams selects memories to list. PathPrefix ("" : the whole
// store) ends with "/". Depth 0 lists every memory under the prefix; depth
// n > 0 lists those at most n segments below it and rolls deeper ones up
// into folder prefixes. After is the path of the last item of the
// previous page (AfterPrefix: that item was a folder prefix).
type MemoryListParams struct {
	StoreID     string
	PathPrefix  string
	Depth       int
	After       string
	AfterPrefix bool
	Limit       int
	// WithContent loads the memories' content (else Content is "").
	WithContent bool
}

// MemoryListItem is a memory, or (Memory nil) a folder Prefix ending
// with "/".
type MemoryListItem struct {
	Memory *Memory
	Prefix string
}

// MemoryList returns up to p.Limit items in path order and whether more
// follow.
func (s *Store) MemoryList(ctx context.Context, p MemoryListParams) ([]MemoryListItem, bool, error) {
	prefix := p.PathPrefix
	if prefix == "" {
		prefix = "/"
	}
	lo, loExcl, hi := prefix, false, folderEnd(prefix)
	if p.After != "" {
		lo, loExcl = p.After, true
		if p.AfterPrefix {
			lo, loExcl = folderEnd(p.After), false
		}
	}
	var out []MemoryListItem
	for len(out) <= p.Limit {
		want := p.Limit + 1 - len(out)
		rows, err := s.q.MemoryListRange(ctx, dbsqlc.MemoryListRangeParams{StoreID: p.StoreID, Lo: lo, LoExclusive: loExcl, Hi: hi,
			WithContent: p.WithContent, RowLimit: int32(want)}) //nolint:gosec // limits are small
		if err != nil {
			return nil, false, mapErr("list memories", err)
		}
		rolled := false
		for _, r := range rows {
			rel := r.Path[len(prefix):]
			if segs := strings.Split(rel, "/"); p.Depth > 0 && len(segs) > p.Depth {
				folder := prefix + strings.Join(segs[:p.Depth], "/") + "/"
				out = append(out, MemoryListItem{Prefix: folder})
				lo, loExcl, rolled = folderEnd(folder), false, true
				break
			}
			out = append(out, MemoryListItem{Memory: memoryFromRow(dbsqlc.Memory(r))})
			lo, loExcl = r.Path, true
		}
		if !rolled && len(rows) < want {
			break
		}
	}
	page, more := trim(out, p.Limit)
	return page, more, nil
}

// MemoryVersionFilter selects versions of a store to list; empty fields
// select all.
type MemoryVersionFilter struct {
	StoreID   string
	MemoryID  string
	Operation string
	// Actor, when its Type is set, selects the versions it wrote.
	Actor                  Actor
	CreatedGTE, CreatedLTE *time.Time
}

// MemoryVersionList returns up to limit versions, newest first, after
// the cursor, and whether more follow.
func (s *Store) MemoryVersionList(ctx context.Context, f MemoryVersionFilter, after *Cursor, limit int) ([]*MemoryVersion, bool, error) {
	arg := dbsqlc.MemoryVersionListParams{StoreID: f.StoreID, MemoryID: optString(f.MemoryID), Operation: optString(f.Operation),
		ActorType: optString(f.Actor.Type), ActorID: f.Actor.ID, CreatedGte: f.CreatedGTE, CreatedLte: f.CreatedLTE,
		RowLimit: int32(limit + 1)} //nolint:gosec // limits are small
	if after != nil {
		arg.AfterCreatedAt, arg.AfterID = &after.CreatedAt, after.ID
	}
	rows, err := s.q.MemoryVersionList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list memory versions", err)
	}
	out := make([]*MemoryVersion, 0, len(rows))
	for _, r := range rows {
		out = append(out, memoryVersionFromRow(r))
	}
	page, more := trim(out, limit)
	return page, more, nil
}

// MemoryVersionGet returns a version of a store, or ErrNotFound.
func (s *Store) MemoryVersionGet(ctx context.Context, storeID, id string) (*MemoryVersion, error) {
	row, err := s.q.MemoryVersionGet(ctx, dbsqlc.MemoryVersionGetParams{StoreID: storeID, ID: id})
	if err != nil {
		return nil, mapErr("get memory version", err)
	}
	return memoryVersionFromRow(row), nil
}

// MemoryVersionRedact clears a version's path and content, keeping the
// row, and records who redacted it (idempotent: a redacted version is
// returned as it is). ErrNotFound; ErrMemoryVersionCurrent for the
// version that holds a live memory's content. Archived stores can be
// redacted.
func (s *Store) MemoryVersionRedact(ctx context.Context, storeID, id string, by Actor, now time.Time) (*MemoryVersion, error) {
	var out *MemoryVersion
	err := s.inTx(ctx, "redact memory version", func(q *dbsqlc.Queries) error {
		if _, err := q.MemoryStoreLock(ctx, storeID); err != nil {
			return err
		}
		v, err := q.MemoryVersionGet(ctx, dbsqlc.MemoryVersionGetParams{StoreID: storeID, ID: id})
		if err != nil {
			return err
		}
		if v.RedactedAt != nil {
			out = memoryVersionFromRow(v)
			return nil
		}
		m, err := q.MemoryGetByID(ctx, dbsqlc.MemoryGetByIDParams{StoreID: storeID, ID: v.MemoryID})
		if err == nil && m.VersionID == id {
			return fmt.Errorf("version %s of memory %s: %w", id, m.ID, ErrMemoryVersionCurrent)
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		v, err = q.MemoryVersionRedact(ctx, dbsqlc.MemoryVersionRedactParams{StoreID: storeID, ID: id, RedactedAt: &now,
			RedactedByType: &by.Type, RedactedByID: &by.ID})
		if err != nil {
			return err
		}
		out = memoryVersionFromRow(v)
		return nil
	})
	return out, err
}
