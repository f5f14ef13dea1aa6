package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// ContextSnapshot is a compacted, model-facing projection of a session's
// conversation: Body (the worker's JSON) replaces the first Covered
// messages of the provider transcript. Snapshots are immutable.
type ContextSnapshot struct {
	Key     string
	Covered int
	Body    json.RawMessage
}

// ContextSnapshotLatest returns the session's newest snapshot, nil when it
// has none.
func (s *Store) ContextSnapshotLatest(ctx context.Context, sessionID string) (*ContextSnapshot, error) {
	row, err := s.q.ContextSnapshotLatest(ctx, sessionID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr("get context snapshot", err)
	}
	return snapshotFromRow(row), nil
}

func snapshotFromRow(row dbsqlc.ContextSnapshotLatestRow) *ContextSnapshot {
	return &ContextSnapshot{Key: row.SnapshotKey, Covered: int(row.Covered), Body: row.Body}
}

// ContextSnapshotSave appends req's events (as Append does, under the
// session's lock) and stores snap unless the session has a snapshot with
// its key, in one transaction. It returns the stored snapshot (snap, or
// the earlier one under the key), whether this call stored it, and what
// Append returns. ErrNotFound when the session does not exist.
func (s *Store) ContextSnapshotSave(ctx context.Context, sessionID string, snap ContextSnapshot, req *AppendRequest) (*ContextSnapshot, bool, *Session, []Event, error) {
	if snap.Covered < 0 || snap.Covered > math.MaxInt32 {
		return nil, false, nil, nil, fmt.Errorf("save context snapshot: covered %d out of range", snap.Covered)
	}
	var (
		stored  *ContextSnapshot
		created bool
		sess    *Session
		events  []Event
	)
	err := s.inTx(ctx, "save context snapshot", func(q *dbsqlc.Queries) error {
		var err error
		if sess, events, err = s.appendTx(ctx, q, sessionID, req); err != nil {
			return err
		}
		n, err := q.ContextSnapshotInsert(ctx, dbsqlc.ContextSnapshotInsertParams{
			SessionID: sessionID, SnapshotKey: snap.Key, Covered: int32(snap.Covered), Body: snap.Body}) //nolint:gosec // range checked above
		if err != nil {
			return err
		}
		created = n == 1
		row, err := q.ContextSnapshotGet(ctx, dbsqlc.ContextSnapshotGetParams{SessionID: sessionID, SnapshotKey: snap.Key})
		if err != nil {
			return err
		}
		stored = &ContextSnapshot{Key: row.SnapshotKey, Covered: int(row.Covered), Body: row.Body}
		return nil
	})
	if err != nil {
		return nil, false, nil, nil, err
	}
	return stored, created, sess, events, nil
}
