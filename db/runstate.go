package db

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// RunState is what a turn reads of its session.
type RunState struct {
	Session *Session
	// Environment is nil when the session has none, or it was deleted.
	Environment *Environment
	// Pending is SessionPendingTriggers.
	Pending []Event
	// Transcript is the entries after the position asked for.
	Transcript []TranscriptEntry
	// SystemMessages are the bodies of the session's system.message
	// events, in log order.
	SystemMessages []json.RawMessage
	// Outcome is the session's active outcome (nil: none).
	Outcome *Outcome
	// Snapshot (nil: none) and Resources are read only when asked for.
	Snapshot  *ContextSnapshot
	Resources []*Resource
}

// RunState reads a session (ErrNotFound unless it exists and is not being
// deleted), its environment, its pending triggers, its transcript after
// position transcriptAfter and, withContext, its latest context snapshot
// and its resources: one round trip for them all (pipeline). Only queued
// user messages make a second, SessionPendingTriggers' transaction.
func (s *Store) RunState(ctx context.Context, sessionID string, transcriptAfter int64, withContext bool, now time.Time) (*RunState, error) {
	var (
		sess      dbsqlc.Session
		env       *dbsqlc.Environment
		queued    []dbsqlc.QueuedEvent
		pending   []dbsqlc.Event
		entries   []dbsqlc.TranscriptEntryListRow
		snap      *dbsqlc.ContextSnapshotLatestRow
		resources []dbsqlc.ResourceListForWorkerRow
		shared    []dbsqlc.ResourceListOfThreadSessionRow // a child thread's session's
		system    [][]byte
		outcome   *dbsqlc.Outcome
	)
	reads := []func(q *dbsqlc.Queries) error{
		func(q *dbsqlc.Queries) (err error) { sess, err = q.SessionGetByID(ctx, sessionID); return err },
		func(q *dbsqlc.Queries) error { return optional(&env)(q.EnvironmentGetForSession(ctx, sessionID)) },
		func(q *dbsqlc.Queries) (err error) { queued, err = q.QueuedEventList(ctx, sessionID); return err },
		func(q *dbsqlc.Queries) (err error) { pending, err = q.EventListPending(ctx, sessionID); return err },
		func(q *dbsqlc.Queries) (err error) {
			system, err = q.EventListSystemMessages(ctx, sessionID)
			return err
		},
		func(q *dbsqlc.Queries) error { return optional(&outcome)(q.OutcomeActive(ctx, sessionID)) },
		func(q *dbsqlc.Queries) (err error) {
			entries, err = q.TranscriptEntryList(ctx, dbsqlc.TranscriptEntryListParams{SessionID: sessionID, AfterSeq: transcriptAfter})
			return err
		},
	}
	if withContext {
		reads = append(reads,
			func(q *dbsqlc.Queries) error { return optional(&snap)(q.ContextSnapshotLatest(ctx, sessionID)) },
			func(q *dbsqlc.Queries) (err error) {
				resources, err = q.ResourceListForWorker(ctx, sessionID)
				return err
			},
			func(q *dbsqlc.Queries) (err error) {
				shared, err = q.ResourceListOfThreadSession(ctx, sessionID)
				return err
			})
	}
	if err := s.pipeline(ctx, "read run state", reads...); err != nil {
		return nil, err
	}
	out := &RunState{Transcript: transcriptFromRows(entries)}
	for _, b := range system {
		out.SystemMessages = append(out.SystemMessages, json.RawMessage(b))
	}
	var err error
	if out.Session, err = sessionFromRow(sess); err != nil {
		return nil, err
	}
	if env != nil {
		if out.Environment, err = environmentFromRow(*env); err != nil {
			return nil, err
		}
	}
	if len(queued) == 0 {
		out.Pending = eventsFromRows(pending)
	} else if out.Pending, err = s.SessionPendingTriggers(ctx, sessionID, now); err != nil {
		return nil, err
	}
	if outcome != nil {
		out.Outcome = outcomeFromRow(*outcome)
	}
	if snap != nil {
		out.Snapshot = snapshotFromRow(*snap)
	}
	if withContext {
		for _, r := range shared {
			resources = append(resources, dbsqlc.ResourceListForWorkerRow{SessionResource: r.SessionResource})
		}
		if out.Resources, err = workerResourcesFromRows(resources); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// optional stores a :one query's row in *dst, leaving it nil when there
// is none.
func optional[T any](dst **T) func(row T, err error) error {
	return func(row T, err error) error {
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		*dst = &row
		return nil
	}
}
