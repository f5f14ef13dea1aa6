package db

// This file holds dreams (issue 33, point 4): a dream runs as a session
// (sessions.dream_id) and its status follows the session's, moved in the
// transaction that changes the session's status (dreamOnSessionStatus,
// called from the append path).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// Dream statuses.
const (
	DreamPending   = "pending"
	DreamRunning   = "running"
	DreamCompleted = "completed"
	DreamFailed    = "failed"
	DreamCanceled  = "canceled"
)

// ErrDreamEnded rejects a change a dream's final status forbids (cancel
// of a completed or failed dream, archive of a pending or running one).
var ErrDreamEnded = fmt.Errorf("dream status forbids it: %w", ErrConflict)

// Dream is a stored dream. Usage is the usage of its session (zero when
// the session is gone).
type Dream struct {
	ID              string
	Status          string
	InputStoreID    string
	InputSessionIDs []string
	// Model and OutputBehavior are the wire objects, as JSON.
	Model          json.RawMessage
	Instructions   *string
	OutputBehavior json.RawMessage
	OutputStoreID  *string
	SessionID      *string
	AgentID        *string
	// Error is {type, message} as JSON once failed, else nil.
	Error      json.RawMessage
	Usage      Usage
	CreatedAt  time.Time
	UpdatedAt  time.Time
	EndedAt    *time.Time
	ArchivedAt *time.Time
}

// Ended reports whether the dream's status is final.
func (d *Dream) Ended() bool {
	return d.Status == DreamCompleted || d.Status == DreamFailed || d.Status == DreamCanceled
}

func dreamFromRow(r dbsqlc.Dream, usage []byte) (*Dream, error) {
	d := &Dream{ID: r.ID, Status: r.Status, InputStoreID: r.InputStoreID, InputSessionIDs: r.InputSessionIds,
		Model: r.Model, Instructions: r.Instructions, OutputBehavior: r.OutputBehavior, OutputStoreID: r.OutputStoreID,
		SessionID: r.SessionID, AgentID: r.AgentID, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		EndedAt: r.EndedAt, ArchivedAt: r.ArchivedAt}
	if len(r.Error) > 0 {
		d.Error = json.RawMessage(r.Error)
	}
	u, err := usageFromJSON(r.ID, usage)
	if err != nil {
		return nil, err
	}
	d.Usage = u
	return d, nil
}

// DreamCreate stores a pending dream. d.SessionID names the session that
// will run it (created next, with SessionCreateParams.DreamID).
func (s *Store) DreamCreate(ctx context.Context, d *Dream) error {
	err := s.q.DreamInsert(ctx, dbsqlc.DreamInsertParams{ID: d.ID, InputStoreID: d.InputStoreID, InputSessionIds: d.InputSessionIDs,
		Model: d.Model, Instructions: d.Instructions, OutputBehavior: d.OutputBehavior, OutputStoreID: d.OutputStoreID,
		SessionID: d.SessionID, AgentID: d.AgentID, CreatedAt: d.CreatedAt})
	return mapErr("create dream", err)
}

// DreamGet returns a dream (archived ones too).
func (s *Store) DreamGet(ctx context.Context, id string) (*Dream, error) {
	row, err := s.q.DreamGet(ctx, id)
	if err != nil {
		return nil, mapErr("get dream", err)
	}
	return dreamFromRow(row.Dream, row.SessionUsage)
}

// DreamListParams filter and page a dream list (newest first).
type DreamListParams struct {
	IncludeArchived bool
	Statuses        []string
	CreatedGT       *time.Time
	CreatedLT       *time.Time
	After           *Cursor
	Limit           int
}

// DreamList returns up to p.Limit dreams, newest first, and whether more
// follow.
func (s *Store) DreamList(ctx context.Context, p DreamListParams) ([]*Dream, bool, error) {
	arg := dbsqlc.DreamListParams{IncludeArchived: p.IncludeArchived, Statuses: p.Statuses, CreatedGt: p.CreatedGT,
		CreatedLt: p.CreatedLT, RowLimit: int32(p.Limit + 1)}
	if arg.Statuses == nil {
		arg.Statuses = []string{}
	}
	if p.After != nil {
		arg.AfterCreatedAt, arg.AfterID = &p.After.CreatedAt, p.After.ID
	}
	rows, err := s.q.DreamList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list dreams", err)
	}
	more := len(rows) > p.Limit
	if more {
		rows = rows[:p.Limit]
	}
	out := make([]*Dream, 0, len(rows))
	for _, r := range rows {
		d, err := dreamFromRow(r.Dream, r.SessionUsage)
		if err != nil {
			return nil, false, err
		}
		out = append(out, d)
	}
	return out, more, nil
}

// DreamFail ends a pending or running dream as failed with the error
// {type, message} (a dream whose session could not be created).
func (s *Store) DreamFail(ctx context.Context, id, errType, message string, now time.Time) error {
	body, _ := json.Marshal(map[string]string{"type": errType, "message": message})
	return s.inTx(ctx, "fail dream", func(q *dbsqlc.Queries) error {
		row, err := q.DreamLock(ctx, id)
		if err != nil {
			return err
		}
		if row.Status != DreamPending && row.Status != DreamRunning {
			return nil
		}
		return q.DreamSetStatus(ctx, dbsqlc.DreamSetStatusParams{ID: id, Status: DreamFailed, Error: body, UpdatedAt: now})
	})
}

// DreamCancel ends a pending or running dream as canceled and returns it;
// a canceled dream is returned unchanged; a completed or failed one is
// ErrDreamEnded. The caller interrupts the dream's session.
func (s *Store) DreamCancel(ctx context.Context, id string, now time.Time) (*Dream, error) {
	return s.dreamChange(ctx, "cancel dream", id, func(q *dbsqlc.Queries, d dbsqlc.Dream) error {
		switch d.Status {
		case DreamCanceled:
			return nil
		case DreamCompleted, DreamFailed:
			return fmt.Errorf("dream %s is %s, only a pending or running dream can be canceled: %w", id, d.Status, ErrDreamEnded)
		}
		return q.DreamSetStatus(ctx, dbsqlc.DreamSetStatusParams{ID: id, Status: DreamCanceled, UpdatedAt: now})
	})
}

// DreamArchive archives a completed, failed or canceled dream (an
// archived one is returned unchanged); a pending or running one is
// ErrDreamEnded.
func (s *Store) DreamArchive(ctx context.Context, id string, now time.Time) (*Dream, error) {
	return s.dreamChange(ctx, "archive dream", id, func(q *dbsqlc.Queries, d dbsqlc.Dream) error {
		if d.Status == DreamPending || d.Status == DreamRunning {
			return fmt.Errorf("dream %s is %s, only a completed, failed or canceled dream can be archived (cancel it first): %w",
				id, d.Status, ErrDreamEnded)
		}
		return q.DreamArchive(ctx, dbsqlc.DreamArchiveParams{ID: id, ArchivedAt: &now})
	})
}

func (s *Store) dreamChange(ctx context.Context, op, id string, fn func(q *dbsqlc.Queries, d dbsqlc.Dream) error) (*Dream, error) {
	err := s.inTx(ctx, op, func(q *dbsqlc.Queries) error {
		row, err := q.DreamLock(ctx, id)
		if err != nil {
			return err
		}
		return fn(q, row)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%s %s: %w", op, id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return s.DreamGet(ctx, id)
}

// dreamOnSessionStatus moves the dream a session runs after the
// session's status change to next (planned, not yet written), in the
// append's transaction: running makes a pending dream running; idle with
// an end_turn stop ends it completed; idle with another stop reason and
// terminated end it failed. A dream already ended stays as it is (a
// canceled dream's session idles after its interrupt).
func dreamOnSessionStatus(ctx context.Context, q *dbsqlc.Queries, dreamID string, next *Session, now time.Time) error {
	row, err := q.DreamLock(ctx, dreamID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // not stored yet or gone: nothing follows the session
	}
	if err != nil {
		return err
	}
	if row.Status != DreamPending && row.Status != DreamRunning {
		return nil
	}
	status, body := dreamStatusOf(next)
	if status == "" || status == row.Status {
		return nil
	}
	return q.DreamSetStatus(ctx, dbsqlc.DreamSetStatusParams{ID: dreamID, Status: status, Error: body, UpdatedAt: now})
}

// dreamStatusOf is the dream status a session's status means ("" for
// none) and the error of a failed one.
func dreamStatusOf(s *Session) (string, []byte) {
	switch s.Status {
	case StatusRunning:
		return DreamRunning, nil
	case StatusTerminated:
		return DreamFailed, dreamError("session_terminated", fmt.Sprintf("the dream's session %s was terminated", s.ID))
	case StatusIdle:
		var sr struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(s.StopReason, &sr)
		if sr.Type == "" || sr.Type == "end_turn" {
			return DreamCompleted, nil
		}
		return DreamFailed, dreamError(sr.Type, fmt.Sprintf("the dream's session %s stopped with stop reason %q, expected end_turn", s.ID, sr.Type))
	}
	return "", nil
}

func dreamError(typ, message string) []byte {
	b, _ := json.Marshal(map[string]string{"type": typ, "message": message})
	return b
}
