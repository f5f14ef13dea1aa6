package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
	"github.com/mangohq/mango/internal/traceparent"
)

// Session is a stored session. Agent is the session's agent snapshot as the
// API returns it (owned by the api-server); StopReason is the JSON of the
// last idle stop reason, or nil.
type Session struct {
	ID            string
	AgentID       string
	AgentVersion  int64
	Agent         json.RawMessage
	EnvironmentID *string
	Provider      string
	Title         string
	Metadata      map[string]string
	Status        Status
	StopReason    json.RawMessage
	// Usage is the cumulative usage (usage.go).
	Usage Usage
	// BudgetMaxCents is the budget's max_list_cost in US cents; nil
	// without a budget. BudgetRemoved is set once a budget was removed.
	BudgetMaxCents *int64
	BudgetRemoved  bool
	// ActiveMicros and RunningSince measure the time in running status
	// (status.go).
	ActiveMicros int64
	RunningSince *time.Time
	LastSeq      int64
	// LastEventAt is the processed_at of the newest event (nil before the
	// first); Queued counts user messages waiting outside the log for
	// the running turn to end (events.go).
	LastEventAt *time.Time
	Queued      int
	CreatedAt   time.Time
	UpdatedAt   time.Time
	ArchivedAt  *time.Time
	Deleting    bool
	// VaultIDs are the vaults the session draws credentials from, in
	// order (the first match wins).
	VaultIDs []string
	// SelfHosted is set on a session of a self-hosted environment: its
	// built-in tool calls are executed by the client's worker (work.go).
	SelfHosted bool
	// DreamID is the dream the session runs, if any (dreams.go).
	DreamID *string
	// ParentID is set on a child thread: the session it belongs to
	// (threads.go). AwaitingReplies counts its coordinator's messages it
	// has not answered.
	ParentID        *string
	AwaitingReplies int
	// HasThreads is set on a session that ever had a child thread;
	// HeldStopReason, while its primary thread's turn ended and child
	// threads still run, is the stop reason it goes idle with after them.
	HasThreads     bool
	HeldStopReason json.RawMessage
	// OutcomeID is the session's active outcome, if any (outcomes.go).
	OutcomeID *string
	// DeploymentID is the deployment whose run created the session, if any.
	DeploymentID *string
}

func sessionFromRow(r dbsqlc.Session) (*Session, error) {
	s := &Session{ID: r.ID, AgentID: r.AgentID, AgentVersion: r.AgentVersion, Agent: r.Agent, EnvironmentID: r.EnvironmentID,
		Provider: r.Provider, Title: r.Title, Status: Status(r.Status), StopReason: r.StopReason,
		BudgetMaxCents: r.BudgetMaxCents, BudgetRemoved: r.BudgetRemoved, ActiveMicros: r.ActiveMicros, RunningSince: r.RunningSince,
		LastSeq: r.LastSeq, LastEventAt: r.LastEventAt, Queued: int(r.Queued),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ArchivedAt: r.ArchivedAt, Deleting: r.DeletingAt != nil,
		VaultIDs: r.VaultIds, SelfHosted: r.SelfHosted, DreamID: r.DreamID, ParentID: r.ParentSessionID,
		AwaitingReplies: int(r.AwaitingReplies), HasThreads: r.HasThreads, HeldStopReason: r.HeldStopReason, OutcomeID: r.OutcomeID,
		DeploymentID: r.DeploymentID}
	if s.VaultIDs == nil {
		s.VaultIDs = []string{}
	}
	u, err := usageFromJSON(r.ID, r.Usage)
	if err != nil {
		return nil, err
	}
	s.Usage = u
	if err := json.Unmarshal(r.Metadata, &s.Metadata); err != nil {
		return nil, fmt.Errorf("decode metadata of session %s: %w", r.ID, err)
	}
	return s, nil
}

// SessionCreateParams create a session.
type SessionCreateParams struct {
	ID            string
	AgentID       string
	AgentVersion  int64
	Agent         json.RawMessage
	EnvironmentID *string
	Provider      string
	Title         string
	Metadata      map[string]string
	Now           time.Time
	// BudgetMaxCents, when set, is the session's budget in US cents.
	BudgetMaxCents *int64
	// Resources are added in the same transaction (file resources get
	// their session copies).
	Resources []ResourceCreate
	// Skills are the skills of the session's agent snapshot, written as
	// skill resources in the same transaction.
	Skills []SessionSkill
	// VaultIDs are the session's vaults, in order.
	VaultIDs []string
	// SelfHosted is whether the session's environment is self-hosted
	// (its config type when the session is created).
	SelfHosted bool
	// DreamID, when set, is the dream the session runs (stored before
	// the session: the initial events' status change moves it).
	DreamID *string
	// Run, when set, is the deployment run that creates the session: it is
	// recorded in the same transaction (ErrRunExists when its occurrence
	// has one already) and the session carries its deployment_id.
	Run *DeploymentRun
}

// SessionCreate stores a new idle session. Initial events are appended by
// the caller through Append in the same call when initial is not empty.
func (s *Store) SessionCreate(ctx context.Context, p SessionCreateParams, initial *AppendRequest) (*Session, []Event, error) {
	var sess *Session
	var events []Event
	err := s.inTx(ctx, "create session", func(q *dbsqlc.Queries) error {
		row, err := q.SessionInsert(ctx, dbsqlc.SessionInsertParams{
			ID: p.ID, AgentID: p.AgentID, AgentVersion: p.AgentVersion, Agent: p.Agent, EnvironmentID: p.EnvironmentID,
			Provider: p.Provider, Title: p.Title, Metadata: metadataJSON(p.Metadata), CreatedAt: p.Now,
			BudgetMaxCents: p.BudgetMaxCents, SelfHosted: p.SelfHosted,
		})
		if err != nil {
			return err
		}
		if p.DreamID != nil {
			if err := q.SessionSetDreamID(ctx, dbsqlc.SessionSetDreamIDParams{ID: p.ID, DreamID: p.DreamID}); err != nil {
				return err
			}
			row.DreamID = p.DreamID
		}
		if p.Run != nil {
			if err := q.SessionSetDeploymentID(ctx, dbsqlc.SessionSetDeploymentIDParams{ID: p.ID, DeploymentID: &p.Run.DeploymentID}); err != nil {
				return err
			}
			row.DeploymentID = &p.Run.DeploymentID
			p.Run.SessionID = &p.ID
			if err := insertRun(ctx, q, p.Run); err != nil {
				return err
			}
		}
		if _, err := s.insertResources(ctx, q, p.ID, p.Now, p.Resources); err != nil {
			return err
		}
		if err := insertSkillResources(ctx, q, p.ID, p.Now, p.Skills); err != nil {
			return err
		}
		if len(p.VaultIDs) > 0 {
			if err := q.SessionSetVaultIDs(ctx, dbsqlc.SessionSetVaultIDsParams{ID: p.ID, VaultIds: p.VaultIDs}); err != nil {
				return err
			}
			row.VaultIds = p.VaultIDs
		}
		created := WebhookEvent{ID: webhookEventID(p.ID, "session.created"), Type: "session.created", ResourceID: p.ID}
		if err := emitWebhooks(ctx, q, p.Now, []WebhookEvent{created}); err != nil {
			return err
		}
		if initial != nil && len(initial.Events) > 0 {
			sess, events, err = s.appendTx(ctx, q, p.ID, initial)
			return err
		}
		sess, err = sessionFromRow(row)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return sess, events, nil
}

// SessionGet returns a session that is not being deleted.
func (s *Store) SessionGet(ctx context.Context, id string) (*Session, error) {
	row, err := s.q.SessionGetByID(ctx, id)
	if err != nil {
		return nil, mapErr("get session", err)
	}
	return sessionFromRow(row)
}

// SessionUpdate locks the session and stores what next returns (title,
// metadata, agent, budget). An error from next is returned as is.
func (s *Store) SessionUpdate(ctx context.Context, id string, now time.Time, next func(cur *Session) (*Session, error)) (*Session, error) {
	var out *Session
	err := s.inTx(ctx, "update session", func(q *dbsqlc.Queries) error {
		row, err := q.SessionLock(ctx, id)
		if err != nil {
			return err
		}
		cur, err := sessionFromRow(row)
		if err != nil {
			return err
		}
		if cur.Deleting {
			return pgx.ErrNoRows
		}
		n, err := next(cur)
		if err != nil {
			return &decideError{err}
		}
		updated, err := q.SessionUpdate(ctx, dbsqlc.SessionUpdateParams{ID: id, Title: n.Title, Metadata: metadataJSON(n.Metadata), Agent: n.Agent, UpdatedAt: now,
			BudgetMaxCents: n.BudgetMaxCents, BudgetRemoved: n.BudgetRemoved})
		if err != nil {
			return err
		}
		if n.VaultIDs != nil && !slices.Equal(n.VaultIDs, cur.VaultIDs) {
			if err := q.SessionSetVaultIDs(ctx, dbsqlc.SessionSetVaultIDsParams{ID: id, VaultIds: n.VaultIDs}); err != nil {
				return err
			}
			updated.VaultIds = n.VaultIDs
		}
		out, err = sessionFromRow(updated)
		if err != nil {
			return err
		}
		return emitSessionWebhook(ctx, q, out, "session.updated", now.UTC().Format(time.RFC3339Nano), now)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SessionArchive archives a session (idempotently).
func (s *Store) SessionArchive(ctx context.Context, id string, now time.Time) (*Session, error) {
	var out *Session
	err := s.inTx(ctx, "archive session", func(q *dbsqlc.Queries) error {
		row, err := q.SessionArchive(ctx, dbsqlc.SessionArchiveParams{ID: id, Now: now})
		if err != nil {
			return err
		}
		if out, err = sessionFromRow(row); err != nil {
			return err
		}
		return emitSessionWebhook(ctx, q, out, "session.archived", "", now)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// emitSessionWebhook writes the deliveries of a session's event of type
// (none for a child thread); occurrence tells apart the events of a type
// that happen more than once (an update's time), empty for those that
// happen once.
func emitSessionWebhook(ctx context.Context, q *dbsqlc.Queries, sess *Session, typ, occurrence string, now time.Time) error {
	if sess.IsThread() {
		return nil
	}
	return emitResourceWebhook(ctx, q, sess.ID, typ, occurrence, now)
}

// SessionFence marks a session as being deleted: from this commit on no
// event is admitted and reads answer not found. Streams are notified, its
// work items (self-hosted) are stopped, and a
// "delete" outbox row is written in the same transaction: a worker stops
// the session's workflow, tears down its sandbox if it has one (bound
// reports that) and finalizes the deletion. It is idempotent, so an
// interrupted deletion can be resumed.
func (s *Store) SessionFence(ctx context.Context, id string, now time.Time) (sess *Session, bound bool, err error) {
	err = s.inTx(ctx, "fence session", func(q *dbsqlc.Queries) error {
		// Its child threads first (locks go thread first): each is
		// deleted as a session is, its workflow stopped.
		threads, err := q.ThreadFenceAll(ctx, dbsqlc.ThreadFenceAllParams{ParentID: &id, Now: now})
		if err != nil {
			return err
		}
		for _, t := range threads {
			if err := q.OutboxInsert(ctx, dbsqlc.OutboxInsertParams{SessionID: t, Kind: "delete", Payload: json.RawMessage(`{}`),
				Traceparent: traceparent.Of(ctx)}); err != nil {
				return err
			}
		}
		row, err := q.SessionFence(ctx, dbsqlc.SessionFenceParams{ID: id, Now: now})
		if err != nil {
			return err
		}
		if err := q.NotifySession(ctx, id+":deleted"); err != nil {
			return err
		}
		// A self-hosted worker has nothing left to do for it.
		if err := q.WorkStopForSession(ctx, dbsqlc.WorkStopForSessionParams{SessionID: &id, Now: dbTime(now)}); err != nil {
			return err
		}
		if bound, err = q.SessionBindingExists(ctx, id); err != nil {
			return err
		}
		if err := q.OutboxInsert(ctx, dbsqlc.OutboxInsertParams{SessionID: id, Kind: "delete", Payload: json.RawMessage(`{}`),
			Traceparent: traceparent.Of(ctx)}); err != nil {
			return err
		}
		if sess, err = sessionFromRow(row); err != nil {
			return err
		}
		return emitSessionWebhook(ctx, q, sess, "session.deleted", "", now)
	})
	if err != nil {
		return nil, false, err
	}
	return sess, bound, nil
}

// SessionDelete removes a fenced session and its events.
func (s *Store) SessionDelete(ctx context.Context, id string) error {
	n, err := s.q.SessionDelete(ctx, id)
	if err != nil {
		return mapErr("delete session", err)
	}
	if n == 0 {
		return fmt.Errorf("delete session: %w", ErrNotFound)
	}
	return nil
}

// SessionListParams filter and page a session list. Before and After are
// mutually exclusive keyset positions; Ascending orders oldest first.
type SessionListParams struct {
	IncludeArchived bool
	AgentID         *string
	AgentVersion    *int64
	DeploymentID    *string
	Statuses        []string
	CreatedGT       *time.Time
	CreatedGTE      *time.Time
	CreatedLT       *time.Time
	CreatedLTE      *time.Time
	Before          *Cursor
	After           *Cursor
	Ascending       bool
	Limit           int
}

// SessionList returns one page of sessions and whether more rows follow in
// the direction of travel.
func (s *Store) SessionList(ctx context.Context, p SessionListParams) ([]Session, bool, error) {
	arg := dbsqlc.SessionListParams{
		IncludeArchived: p.IncludeArchived, AgentID: p.AgentID, AgentVersion: p.AgentVersion, DeploymentID: p.DeploymentID,
		Statuses:  p.Statuses,
		CreatedGt: p.CreatedGT, CreatedGte: p.CreatedGTE, CreatedLt: p.CreatedLT, CreatedLte: p.CreatedLTE,
		Ascending: p.Ascending, RowLimit: int32(p.Limit + 1),
	}
	if arg.Statuses == nil {
		arg.Statuses = []string{}
	}
	if p.Before != nil {
		arg.BeforeCreatedAt, arg.BeforeID = &p.Before.CreatedAt, p.Before.ID
	}
	if p.After != nil {
		arg.AfterCreatedAt, arg.AfterID = &p.After.CreatedAt, p.After.ID
	}
	rows, err := s.q.SessionList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list sessions", err)
	}
	out := make([]Session, 0, len(rows))
	for _, r := range rows {
		sess, err := sessionFromRow(r)
		if err != nil {
			return nil, false, err
		}
		out = append(out, *sess)
	}
	page, more := trim(out, p.Limit)
	return page, more, nil
}

// ErrNotFenced reports a finalization of a session whose deletion has not
// begun, or that still holds a sandbox binding.
var ErrNotFenced = fmt.Errorf("session deletion cannot be finalized: %w", ErrConflict)

// SessionFinalizeDeletion deletes a fenced session that no longer has a
// sandbox binding, with its copies of file resources. It returns false
// when the row was already gone, and the storage keys of bytes no file
// references any more (the caller deletes them from the file store).
func (s *Store) SessionFinalizeDeletion(ctx context.Context, id string) (deleted bool, orphanedKeys []string, err error) {
	err = s.inTx(ctx, "finalize session deletion", func(q *dbsqlc.Queries) error {
		row, err := q.SessionLock(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if row.DeletingAt == nil {
			return &decideError{fmt.Errorf("session %s is not being deleted: %w", id, ErrNotFenced)}
		}
		bound, err := q.SessionBindingExists(ctx, id)
		if err != nil {
			return err
		}
		if bound {
			return &decideError{fmt.Errorf("session %s still has a sandbox binding: %w", id, ErrNotFenced)}
		}
		// The session's copies of its file resources go with it; bytes no
		// other file references are the caller's to delete.
		keys, err := q.FileDeleteSessionCopies(ctx, &id)
		if err != nil {
			return err
		}
		for _, k := range keys {
			used, err := q.FileKeyReferenced(ctx, k)
			if err != nil {
				return err
			}
			if !used && !slices.Contains(orphanedKeys, k) {
				orphanedKeys = append(orphanedKeys, k)
			}
		}
		n, err := q.SessionDelete(ctx, id)
		deleted = n > 0
		return err
	})
	if err != nil {
		return false, nil, err
	}
	return deleted, orphanedKeys, nil
}
