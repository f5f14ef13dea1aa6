package db

// This file holds the work queue of self-hosted environments: work items,
// their state machine and leases, and the workers polling for them.
//
// States move queued -> starting (Ack) -> active (first heartbeat) ->
// stopping (graceful Stop) -> stopped. A starting or active item whose
// lease expired goes back to queued, and a stopping one becomes stopped,
// lazily: in the transaction of the next call that reads the
// environment's queue (expireLeases).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// WorkChannel is the PostgreSQL channel on which a new work item is
// announced, in the transaction that inserts it, with the environment id
// as payload: a long poll of that environment's queue wakes on it.
const WorkChannel = "mango_work"

// The states of a work item.
const (
	WorkQueued   = "queued"
	WorkStarting = "starting"
	WorkActive   = "active"
	WorkStopping = "stopping"
	WorkStopped  = "stopped"
)

// The types of a work item.
const (
	WorkTypeSession     = "session"
	WorkTypeHealthcheck = "healthcheck"
)

// NoHeartbeat is the expected last heartbeat that matches an item never
// heartbeated.
const NoHeartbeat = "NO_HEARTBEAT"

// WorkItem is a stored work item. SessionID is empty for a healthcheck.
type WorkItem struct {
	ID            string
	EnvironmentID string
	SessionID     string
	Type          string
	State         string
	Metadata      map[string]string
	CreatedAt     time.Time
	// AcknowledgedAt is set by Ack, StartedAt by the first heartbeat.
	AcknowledgedAt  *time.Time
	StartedAt       *time.Time
	LastHeartbeatAt *time.Time
	LeaseExpiresAt  *time.Time
	StopRequestedAt *time.Time
	StoppedAt       *time.Time
	// TTLSeconds is the lease's length, as last set (0 before Ack).
	TTLSeconds int
}

// LastHeartbeat is the item's last heartbeat as a heartbeat's
// expected_last_heartbeat must name it: RFC 3339 with nanoseconds in UTC,
// or "" when it was never heartbeated.
func (w *WorkItem) LastHeartbeat() string {
	if w.LastHeartbeatAt == nil {
		return ""
	}
	return w.LastHeartbeatAt.UTC().Format(time.RFC3339Nano)
}

// HeartbeatResult is an item's lease after a heartbeat (or as it stands,
// when the heartbeat did not extend it).
type HeartbeatResult struct {
	LastHeartbeat string
	LeaseExtended bool
	State         string
	TTLSeconds    int
}

// ErrLeaseMismatch reports a heartbeat whose expected last heartbeat is
// not the item's (or an item back in the queue). The error is a
// *LeaseMismatchError carrying the item's current lease.
var ErrLeaseMismatch = errors.New("heartbeat precondition failed")

// LeaseMismatchError is a heartbeat refused by its precondition, with the
// item's current lease.
type LeaseMismatchError struct {
	Current HeartbeatResult
}

func (e *LeaseMismatchError) Error() string {
	return fmt.Sprintf("%v: the work item is %s with last heartbeat %q", ErrLeaseMismatch, e.Current.State, e.Current.LastHeartbeat)
}

// Is makes errors.Is(err, ErrLeaseMismatch) hold.
func (e *LeaseMismatchError) Is(target error) bool { return target == ErrLeaseMismatch }

// WorkStats is the state of an environment's queue.
type WorkStats struct {
	// Depth counts queued items a poll would hand out; Pending, those
	// handed out within the reclaim window and not acknowledged.
	Depth   int64
	Pending int64
	// WorkersPolling counts the workers that polled within the window.
	WorkersPolling int64
	// OldestQueuedAt is the creation time of the oldest queued item.
	OldestQueuedAt *time.Time
}

// dbTime is t as PostgreSQL stores it (microseconds), in UTC: a time
// returned to a caller compares equal to the one read back later.
func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func workFromRow(r dbsqlc.WorkItem) (*WorkItem, error) {
	w := &WorkItem{ID: r.ID, EnvironmentID: r.EnvironmentID, Type: r.Type, State: r.State, CreatedAt: r.CreatedAt,
		AcknowledgedAt: r.AcknowledgedAt, StartedAt: r.StartedAt, LastHeartbeatAt: r.LastHeartbeatAt,
		LeaseExpiresAt: r.LeaseExpiresAt, StopRequestedAt: r.StopRequestedAt, StoppedAt: r.StoppedAt, TTLSeconds: int(r.TtlSeconds)}
	if r.SessionID != nil {
		w.SessionID = *r.SessionID
	}
	if err := json.Unmarshal(r.Metadata, &w.Metadata); err != nil {
		return nil, fmt.Errorf("decode metadata of work item %s: %w", r.ID, err)
	}
	if w.Metadata == nil {
		w.Metadata = map[string]string{}
	}
	return w, nil
}

// setStateParams are the WorkSetState arguments that leave r as it is.
func setStateParams(r dbsqlc.WorkItem) dbsqlc.WorkSetStateParams {
	return dbsqlc.WorkSetStateParams{ID: r.ID, State: r.State, AcknowledgedAt: r.AcknowledgedAt, StartedAt: r.StartedAt,
		LastHeartbeatAt: r.LastHeartbeatAt, LeaseExpiresAt: r.LeaseExpiresAt, TtlSeconds: r.TtlSeconds,
		StopRequestedAt: r.StopRequestedAt, StoppedAt: r.StoppedAt}
}

// workTx runs fn in a transaction that first ends the environment's
// expired leases (at now).
func (s *Store) workTx(ctx context.Context, op, environmentID string, now time.Time, fn func(q *dbsqlc.Queries) error) error {
	return s.inTx(ctx, op, func(q *dbsqlc.Queries) error {
		if err := q.WorkExpireLeases(ctx, dbsqlc.WorkExpireLeasesParams{EnvironmentID: environmentID, Now: now}); err != nil {
			return err
		}
		return fn(q)
	})
}

// WorkPoll hands out the environment's oldest queued item that no poll
// handed out within reclaimOlderThan, storing secretHash (the SHA-256 of
// the secret minted for this hand-out) in place of any earlier one. It
// returns nil, nil when there is nothing to hand out. A poll with a
// workerID is recorded for the queue's stats.
func (s *Store) WorkPoll(ctx context.Context, environmentID, workerID string, reclaimOlderThan time.Duration, secretHash []byte, now time.Time) (*WorkItem, error) {
	now = dbTime(now)
	var out *WorkItem
	err := s.workTx(ctx, "poll work", environmentID, now, func(q *dbsqlc.Queries) error {
		var polledBy *string
		if workerID != "" {
			polledBy = &workerID
			if err := q.WorkPollerSeen(ctx, dbsqlc.WorkPollerSeenParams{EnvironmentID: environmentID, WorkerID: workerID, Now: now}); err != nil {
				return err
			}
		}
		row, err := q.WorkPollNext(ctx, dbsqlc.WorkPollNextParams{EnvironmentID: environmentID, Now: now, PolledBy: polledBy,
			SecretHash: secretHash, ReclaimBefore: now.Add(-reclaimOlderThan)})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		out, err = workFromRow(row)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WorkAck acknowledges a queued item: it becomes starting with a lease of
// leaseTTL. ErrNotFound when the environment has no such item,
// ErrConflict when it is not queued.
func (s *Store) WorkAck(ctx context.Context, environmentID, workID string, leaseTTL time.Duration, now time.Time) (*WorkItem, error) {
	now = dbTime(now)
	return s.workChange(ctx, "acknowledge work", environmentID, workID, now, func(r dbsqlc.WorkItem) (*dbsqlc.WorkSetStateParams, error) {
		if r.State != WorkQueued {
			return nil, fmt.Errorf("work item %s is %s, not queued: %w", r.ID, r.State, ErrConflict)
		}
		p := setStateParams(r)
		lease := now.Add(leaseTTL)
		p.State, p.AcknowledgedAt, p.LeaseExpiresAt, p.TtlSeconds = WorkStarting, &now, &lease, int32(leaseTTL/time.Second)
		return &p, nil
	})
}

// WorkStop stops an item: at once when force or when it is still queued,
// else gracefully (stopping, until its worker lets the lease end).
// Stopping a stopping item again leaves it so (force stops it).
// ErrNotFound when the environment has no such item, ErrConflict when it
// is already stopped.
func (s *Store) WorkStop(ctx context.Context, environmentID, workID string, force bool, now time.Time) (*WorkItem, error) {
	now = dbTime(now)
	return s.workChange(ctx, "stop work", environmentID, workID, now, func(r dbsqlc.WorkItem) (*dbsqlc.WorkSetStateParams, error) {
		if r.State == WorkStopped {
			return nil, fmt.Errorf("work item %s is already stopped: %w", r.ID, ErrConflict)
		}
		p := setStateParams(r)
		if p.StopRequestedAt == nil {
			p.StopRequestedAt = &now
		}
		if force || r.State == WorkQueued {
			p.State, p.StoppedAt = WorkStopped, &now
		} else {
			p.State = WorkStopping
		}
		return &p, nil
	})
}

// workChange locks an item of the environment (after ending expired
// leases) and writes the state decide returns (nil: none). An error from decide is
// returned as is, after the leases' end commits all the same (a
// heartbeat refused because its item went back to the queue leaves it
// there).
func (s *Store) workChange(ctx context.Context, op, environmentID, workID string, now time.Time,
	decide func(r dbsqlc.WorkItem) (*dbsqlc.WorkSetStateParams, error)) (*WorkItem, error) {
	var out *WorkItem
	var refused error
	err := s.workTx(ctx, op, environmentID, now, func(q *dbsqlc.Queries) error {
		row, err := q.WorkLock(ctx, dbsqlc.WorkLockParams{EnvironmentID: environmentID, ID: workID})
		if err != nil {
			return err
		}
		p, err := decide(row)
		if err != nil {
			refused = fmt.Errorf("%s: %w", op, err)
			return nil
		}
		if p != nil {
			if row, err = q.WorkSetState(ctx, *p); err != nil {
				return err
			}
		}
		out, err = workFromRow(row)
		return err
	})
	if err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	return out, nil
}

// WorkHeartbeat extends an item's lease to now+ttl (ttl already clamped
// by the caller) when expected names its last heartbeat (NoHeartbeat: an
// item never heartbeated); the first heartbeat makes a starting item
// active. A stopping or stopped item is answered with its lease, not
// extended, whatever expected says. A mismatch, or an item back in the
// queue, is a *LeaseMismatchError (ErrLeaseMismatch) with the current
// lease. ErrNotFound when the environment has no such item.
func (s *Store) WorkHeartbeat(ctx context.Context, environmentID, workID, expected string, ttl time.Duration, now time.Time) (*HeartbeatResult, error) {
	now = dbTime(now)
	var out *HeartbeatResult
	_, err := s.workChange(ctx, "heartbeat work", environmentID, workID, now, func(r dbsqlc.WorkItem) (*dbsqlc.WorkSetStateParams, error) {
		p := setStateParams(r)
		w := WorkItem{LastHeartbeatAt: r.LastHeartbeatAt}
		cur := HeartbeatResult{LastHeartbeat: w.LastHeartbeat(), State: r.State, TTLSeconds: int(r.TtlSeconds)}
		switch {
		case r.State == WorkStopping || r.State == WorkStopped:
			out = &cur
			return nil, nil
		case r.State == WorkQueued || !heartbeatMatches(cur.LastHeartbeat, expected):
			return nil, &LeaseMismatchError{Current: cur}
		}
		lease := now.Add(ttl)
		p.LastHeartbeatAt, p.LeaseExpiresAt, p.TtlSeconds = &now, &lease, int32(ttl/time.Second)
		if r.State == WorkStarting {
			p.State, p.StartedAt = WorkActive, &now
		}
		w.LastHeartbeatAt = &now
		out = &HeartbeatResult{LastHeartbeat: w.LastHeartbeat(), LeaseExtended: true, State: p.State, TTLSeconds: int(p.TtlSeconds)}
		return &p, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// heartbeatMatches reports whether a heartbeat's expected last heartbeat
// names the stored one (last, "" when none).
func heartbeatMatches(last, expected string) bool {
	if expected == NoHeartbeat {
		return last == ""
	}
	return expected != "" && expected == last
}

// WorkGet returns an item of the environment; ErrNotFound when there is
// none.
func (s *Store) WorkGet(ctx context.Context, environmentID, workID string) (*WorkItem, error) {
	var out *WorkItem
	err := s.workTx(ctx, "get work", environmentID, dbTime(time.Now()), func(q *dbsqlc.Queries) error {
		row, err := q.WorkGetByID(ctx, dbsqlc.WorkGetByIDParams{EnvironmentID: environmentID, ID: workID})
		if err != nil {
			return err
		}
		out, err = workFromRow(row)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WorkUpdateMetadata merges patch into an item's metadata (a nil value
// deletes its key); ErrNotFound when the environment has no such item.
func (s *Store) WorkUpdateMetadata(ctx context.Context, environmentID, workID string, patch map[string]*string) (*WorkItem, error) {
	var out *WorkItem
	err := s.inTx(ctx, "update work metadata", func(q *dbsqlc.Queries) error {
		row, err := q.WorkLock(ctx, dbsqlc.WorkLockParams{EnvironmentID: environmentID, ID: workID})
		if err != nil {
			return err
		}
		w, err := workFromRow(row)
		if err != nil {
			return err
		}
		for k, v := range patch {
			if v == nil {
				delete(w.Metadata, k)
			} else {
				w.Metadata[k] = *v
			}
		}
		if row, err = q.WorkSetMetadata(ctx, dbsqlc.WorkSetMetadataParams{ID: workID, Metadata: metadataJSON(w.Metadata)}); err != nil {
			return err
		}
		out, err = workFromRow(row)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WorkList returns one page of an environment's items, newest first,
// after the cursor when set, and whether more follow.
func (s *Store) WorkList(ctx context.Context, environmentID string, limit int, after *Cursor) ([]WorkItem, bool, error) {
	var out []WorkItem
	err := s.workTx(ctx, "list work", environmentID, dbTime(time.Now()), func(q *dbsqlc.Queries) error {
		arg := dbsqlc.WorkListParams{EnvironmentID: environmentID, RowLimit: int32(limit + 1)}
		if after != nil {
			arg.AfterCreatedAt, arg.AfterID = &after.CreatedAt, after.ID
		}
		rows, err := q.WorkList(ctx, arg)
		if err != nil {
			return err
		}
		out = make([]WorkItem, 0, len(rows))
		for _, r := range rows {
			w, err := workFromRow(r)
			if err != nil {
				return err
			}
			out = append(out, *w)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	page, more := trim(out, limit)
	return page, more, nil
}

// WorkStats returns the state of an environment's queue at now: depth
// (queued, not handed out within reclaimOlderThan), pending (handed out
// within it, not acknowledged), the oldest over both, and the workers
// that polled within pollerWindow.
func (s *Store) WorkStats(ctx context.Context, environmentID string, reclaimOlderThan, pollerWindow time.Duration, now time.Time) (*WorkStats, error) {
	now = dbTime(now)
	var out *WorkStats
	err := s.workTx(ctx, "get work stats", environmentID, now, func(q *dbsqlc.Queries) error {
		row, err := q.WorkStats(ctx, dbsqlc.WorkStatsParams{EnvironmentID: environmentID, ReclaimBefore: now.Add(-reclaimOlderThan),
			PollerSince: now.Add(-pollerWindow)})
		if err != nil {
			return err
		}
		out = &WorkStats{Depth: row.Depth, Pending: row.Pending, WorkersPolling: row.Workers}
		if t, ok := row.OldestQueuedAt.(time.Time); ok {
			out.OldestQueuedAt = &t
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WorkBySecretHash returns the item whose current secret has the hash,
// unless it is stopped; ErrNotFound otherwise (an unknown secret, one a
// later poll replaced, or an item whose lease expired and was requeued).
func (s *Store) WorkBySecretHash(ctx context.Context, hash []byte) (*WorkItem, error) {
	row, err := s.q.WorkGetBySecretHash(ctx, hash)
	if err != nil {
		return nil, mapErr("look up work secret", err)
	}
	return workFromRow(row)
}

// WorkEnqueueHealthcheck queues a healthcheck item in an environment and
// announces it on WorkChannel; ErrNotFound when there is no such
// environment.
func (s *Store) WorkEnqueueHealthcheck(ctx context.Context, id, environmentID string, now time.Time) (*WorkItem, error) {
	now = dbTime(now)
	var out *WorkItem
	err := s.inTx(ctx, "enqueue healthcheck", func(q *dbsqlc.Queries) error {
		row, err := q.WorkInsertHealthcheck(ctx, dbsqlc.WorkInsertHealthcheckParams{ID: id, EnvironmentID: environmentID, Now: now})
		if err != nil {
			return err
		}
		if err := q.NotifyWork(ctx, environmentID); err != nil {
			return err
		}
		out, err = workFromRow(row)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
