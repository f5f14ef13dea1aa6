package db

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// OutboxRow is a claimed outbox row: a wake-up owed to a session's
// workflow.
type OutboxRow struct {
	ID        int64
	SessionID string
	// Kind names the wake-up ("wakeup", "interrupt", "delete").
	Kind string
	// Provider is the session's sandbox provider, or empty when the
	// session no longer exists.
	Provider  string
	CreatedAt time.Time
	// Attempts counts the failed deliveries so far.
	Attempts int
	// TraceParent is the W3C traceparent of the request that wrote the
	// row ("" without tracing): its delivery continues that trace.
	TraceParent string
}

// OutboxStats describes the undelivered outbox rows.
type OutboxStats struct {
	// Depth is the number of rows.
	Depth int64
	// OldestAge is the age of the oldest row, zero when there is none.
	OldestAge time.Duration
}

// Claiming uses a lease rather than a transaction held open while
// signalling: the claiming statement locks due rows with FOR UPDATE SKIP
// LOCKED (concurrent claimers on other replicas skip them) and moves their
// next_attempt_at to the end of the lease, so they stay out of every other
// claim while the caller talks to Temporal, without pinning a pooled
// connection and an open transaction for the length of a network call
// (which, with Temporal down, would starve the HTTP handlers of
// connections). The caller then deletes each row whose signal Temporal
// accepted (OutboxDelete) or reschedules it (OutboxReschedule). A caller
// that dies leaves its rows due again when the lease ends, so no row is
// lost; delivery is at least once, and the lease must exceed the time one
// delivery may take for it to be exactly once while nothing crashes.

// OutboxClaimDue claims up to limit due rows for lease, oldest first. A
// row never attempted is claimed only once it has been due for fresh: until
// then it is left to the direct delivery that follows its commit.
func (s *Store) OutboxClaimDue(ctx context.Context, limit int, lease, fresh time.Duration) ([]OutboxRow, error) {
	rows, err := s.q.OutboxClaimDue(ctx, dbsqlc.OutboxClaimDueParams{LeaseSeconds: lease.Seconds(), FreshSeconds: fresh.Seconds(),
		RowLimit: int32(min(limit, math.MaxInt32))})
	if err != nil {
		return nil, mapErr("claim outbox rows", err)
	}
	out := make([]OutboxRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, OutboxRow{ID: r.ID, SessionID: r.SessionID, Kind: r.Kind, Provider: r.Provider, CreatedAt: r.CreatedAt,
			Attempts: int(r.Attempts), TraceParent: r.Traceparent})
	}
	sortOutbox(out)
	return out, nil
}

// OutboxClaimForSession claims every due row of one session for lease,
// oldest first. Rows another claimer holds are skipped.
func (s *Store) OutboxClaimForSession(ctx context.Context, sessionID string, lease time.Duration) ([]OutboxRow, error) {
	rows, err := s.q.OutboxClaimForSession(ctx, dbsqlc.OutboxClaimForSessionParams{SessionID: sessionID, LeaseSeconds: lease.Seconds()})
	if err != nil {
		return nil, mapErr("claim outbox rows of session", err)
	}
	out := make([]OutboxRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, OutboxRow{ID: r.ID, SessionID: r.SessionID, Kind: r.Kind, Provider: r.Provider, CreatedAt: r.CreatedAt,
			Attempts: int(r.Attempts), TraceParent: r.Traceparent})
	}
	sortOutbox(out)
	return out, nil
}

func sortOutbox(rows []OutboxRow) {
	slices.SortFunc(rows, func(a, b OutboxRow) int { return cmp.Compare(a.ID, b.ID) })
}

// OutboxDelete removes a delivered row. Deleting a row that is already gone
// is not an error.
func (s *Store) OutboxDelete(ctx context.Context, id int64) error {
	return mapErr("delete outbox row", s.q.OutboxDelete(ctx, id))
}

// OutboxReschedule records a failed delivery of a row: it counts the
// attempt, keeps cause as the last error and makes the row due again after
// delay.
func (s *Store) OutboxReschedule(ctx context.Context, id int64, cause string, delay time.Duration) error {
	return mapErr("reschedule outbox row", s.q.OutboxReschedule(ctx, dbsqlc.OutboxRescheduleParams{ID: id, LastError: &cause, DelaySeconds: delay.Seconds()}))
}

// OutboxStats returns the depth of the outbox and the age of its oldest
// row.
func (s *Store) OutboxStats(ctx context.Context) (OutboxStats, error) {
	r, err := s.q.OutboxStats(ctx)
	if err != nil {
		return OutboxStats{}, mapErr("read outbox stats", err)
	}
	return OutboxStats{Depth: r.Depth, OldestAge: time.Duration(r.OldestAgeSeconds * float64(time.Second))}, nil
}
