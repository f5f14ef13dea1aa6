package db

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// This file holds the Store methods behind the ControlPlane, the internal
// API execution workers call. Events are appended through Append only.

// RunState is what a turn reads of its session.
type RunState struct {
	Session *Session
	// Environment is nil when the session has none, or it was deleted.
	Environment *Environment
	// Pending is SessionPendingTriggers.
	Pending []Event
	// Transcript is the entries after the position asked for.
	Transcript []TranscriptEntry
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
		resources []dbsqlc.SessionResource
	)
	reads := []func(q *dbsqlc.Queries) error{
		func(q *dbsqlc.Queries) (err error) { sess, err = q.SessionGetByID(ctx, sessionID); return err },
		func(q *dbsqlc.Queries) error { return optional(&env)(q.EnvironmentGetForSession(ctx, sessionID)) },
		func(q *dbsqlc.Queries) (err error) { queued, err = q.QueuedEventList(ctx, sessionID); return err },
		func(q *dbsqlc.Queries) (err error) { pending, err = q.EventListPending(ctx, sessionID); return err },
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
			})
	}
	if err := s.pipeline(ctx, "read run state", reads...); err != nil {
		return nil, err
	}
	out := &RunState{Transcript: transcriptFromRows(entries)}
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
	if snap != nil {
		out.Snapshot = snapshotFromRow(*snap)
	}
	if withContext {
		if out.Resources, err = resourcesFromRows(resources); err != nil {
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

// SessionPendingTriggers returns the triggers a worker has yet to take, in
// the order it must take them: those in the log, then the queued user
// messages (Seq 0, no processed_at). A turn starts on the first one, so
// when the log holds none, the oldest queued message is appended to the
// log first, at now: that is when the session takes it up (events.go).
//
// Without queued messages (the usual case) the log's pending events are
// the answer, read without a transaction: under READ COMMITTED it would
// add only its BEGIN and COMMIT (each statement reads its own snapshot,
// and none is locked), and a message queued meanwhile is the next turn's
// (its append woke the workflow).
func (s *Store) SessionPendingTriggers(ctx context.Context, sessionID string, now time.Time) ([]Event, error) {
	queued, err := s.q.QueuedEventList(ctx, sessionID)
	if err != nil {
		return nil, mapErr("list pending triggers", err)
	}
	if len(queued) == 0 {
		rows, err := s.q.EventListPending(ctx, sessionID)
		if err != nil {
			return nil, mapErr("list pending triggers", err)
		}
		return eventsFromRows(rows), nil
	}
	var out []Event
	err = s.inTx(ctx, "list pending triggers", func(q *dbsqlc.Queries) error {
		out = out[:0]
		// Under the session's row lock (what appends take first) the log
		// and the queue hold still: read both again.
		if _, err := q.SessionLock(ctx, sessionID); err != nil {
			return err
		}
		queued, err := q.QueuedEventList(ctx, sessionID)
		if err != nil {
			return err
		}
		rows, err := q.EventListPending(ctx, sessionID)
		if err != nil {
			return err
		}
		if len(rows) == 0 && len(queued) > 0 {
			taken, err := q.QueuedEventTakeFirst(ctx, sessionID)
			if err != nil {
				return err
			}
			if len(taken) == 1 {
				t := taken[0]
				_, appended, err := s.appendTx(ctx, q, sessionID, &AppendRequest{Now: now,
					Events: []NewEvent{{ID: t.ID, Type: t.Type, Body: t.Body, Pending: true}}})
				if err != nil {
					return err
				}
				out = append(out, appended[0])
				queued = queued[1:]
			}
		}
		out = append(out, eventsFromRows(rows)...)
		for _, r := range queued {
			out = append(out, Event{SessionID: r.SessionID, ID: r.ID, Type: r.Type, Body: r.Body, CreatedAt: r.CreatedAt})
		}
		return nil
	})
	if err != nil {
		return nil, mapErr("list pending triggers", err)
	}
	return out, nil
}

// EventIDsByKey returns the identifiers of the session's events appended
// with the given keys, by key. Keys without an event are absent.
func (s *Store) EventIDsByKey(ctx context.Context, sessionID string, keys []string) (map[string]string, error) {
	rows, err := s.q.EventListByKeys(ctx, dbsqlc.EventListByKeysParams{SessionID: sessionID, Keys: keys})
	if err != nil {
		return nil, mapErr("look up events by key", err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		if r.EventKey != nil {
			out[*r.EventKey] = r.ID
		}
	}
	return out, nil
}

// EventsMarkProcessed sets processed_at of the named events of a session
// to now, leaving events already processed untouched, and returns the
// named events in log order. Unknown identifiers are ignored.
func (s *Store) EventsMarkProcessed(ctx context.Context, sessionID string, eventIDs []string, now time.Time) ([]Event, error) {
	rows, err := s.q.EventMarkProcessed(ctx, dbsqlc.EventMarkProcessedParams{SessionID: sessionID, Ids: eventIDs, Now: now})
	if err != nil {
		return nil, mapErr("mark triggers processed", err)
	}
	out := eventsFromRows(rows)
	sortEvents(out)
	return out, nil
}

func sortEvents(evs []Event) {
	slices.SortFunc(evs, func(a, b Event) int { return cmp.Compare(a.Seq, b.Seq) })
}

// TranscriptEntry is one provider-native message of a session's provider
// transcript.
type TranscriptEntry struct {
	Key  string
	Body json.RawMessage
	// Seq is the entry's position, set when it is read: increasing in the
	// order entries were stored.
	Seq int64
}

// TranscriptAppend stores transcript entries in order, skipping keys
// already stored, and returns how many were new. ErrNotFound when the
// session does not exist.
//
// Every writer of a session's transcript holds the session's row lock
// (as Append does), so entries take their seq in commit order: a reader
// that saw up to seq n never sees an entry at or below n appear later,
// which is what reading only the entries after n relies on.
func (s *Store) TranscriptAppend(ctx context.Context, sessionID string, entries []TranscriptEntry) (int, error) {
	n := 0
	err := s.inTx(ctx, "append transcript", func(q *dbsqlc.Queries) error {
		if _, err := q.SessionLock(ctx, sessionID); err != nil {
			return err
		}
		for _, e := range entries {
			rows, err := q.TranscriptEntryInsert(ctx, dbsqlc.TranscriptEntryInsertParams{SessionID: sessionID, EntryKey: e.Key, Body: e.Body})
			if err != nil {
				return err
			}
			n += int(rows)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Transcript returns a session's provider transcript in append order:
// the entries after position afterSeq (0: all of them).
func (s *Store) Transcript(ctx context.Context, sessionID string, afterSeq int64) ([]TranscriptEntry, error) {
	rows, err := s.q.TranscriptEntryList(ctx, dbsqlc.TranscriptEntryListParams{SessionID: sessionID, AfterSeq: afterSeq})
	if err != nil {
		return nil, mapErr("list transcript", err)
	}
	return transcriptFromRows(rows), nil
}

func transcriptFromRows(rows []dbsqlc.TranscriptEntryListRow) []TranscriptEntry {
	out := make([]TranscriptEntry, 0, len(rows))
	for _, r := range rows {
		out = append(out, TranscriptEntry{Key: r.EntryKey, Body: r.Body, Seq: r.Seq})
	}
	return out
}

// ToolJournalEntry records what one tool call did.
type ToolJournalEntry struct {
	SessionID string
	ToolUseID string
	Body      json.RawMessage
	CreatedAt time.Time
}

// ToolJournalRecord stores a tool call's journal entry unless one exists:
// the first write wins. It returns the stored entry and whether this call
// stored it. ErrNotFound when the session does not exist.
func (s *Store) ToolJournalRecord(ctx context.Context, sessionID, toolUseID string, body json.RawMessage) (*ToolJournalEntry, bool, error) {
	rows, err := s.q.ToolJournalInsert(ctx, dbsqlc.ToolJournalInsertParams{SessionID: sessionID, ToolUseID: toolUseID, Body: body})
	if err != nil {
		return nil, false, mapErr("record tool journal", err)
	}
	if len(rows) == 1 {
		return journalEntry(rows[0]), true, nil
	}
	e, err := s.ToolJournalGet(ctx, sessionID, toolUseID) // the first write's
	if err != nil {
		return nil, false, err
	}
	return e, false, nil
}

// ToolJournalGet returns a tool call's journal entry, or ErrNotFound.
func (s *Store) ToolJournalGet(ctx context.Context, sessionID, toolUseID string) (*ToolJournalEntry, error) {
	r, err := s.q.ToolJournalGet(ctx, dbsqlc.ToolJournalGetParams{SessionID: sessionID, ToolUseID: toolUseID})
	if err != nil {
		return nil, mapErr("get tool journal", err)
	}
	return journalEntry(r), nil
}

func journalEntry(r dbsqlc.ToolJournal) *ToolJournalEntry {
	return &ToolJournalEntry{SessionID: r.SessionID, ToolUseID: r.ToolUseID, Body: r.Body, CreatedAt: r.CreatedAt}
}

// SandboxBinding is a session's sandbox ownership record: a provisioning
// intent while ExternalID is empty, a binding once it is set.
type SandboxBinding struct {
	SessionID  string
	Provider   string
	ExternalID string
	SpecHash   string
	TaskQueue  string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Intent reports whether b is a provisioning intent rather than a binding.
func (b *SandboxBinding) Intent() bool { return b.ExternalID == "" }

func bindingFromRow(r dbsqlc.SandboxBinding) *SandboxBinding {
	b := &SandboxBinding{SessionID: r.SessionID, Provider: r.Provider, SpecHash: r.SpecHash, TaskQueue: r.TaskQueue,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if r.ExternalID != nil {
		b.ExternalID = *r.ExternalID
	}
	return b
}

// SandboxIntentPut records a provisioning intent for a session before its
// sandbox is created. An existing intent is replaced; an existing binding
// is returned unchanged. The session row is share-locked so that a
// concurrent deletion either sees the intent or fences it out:
// ErrDeleting when the session is being deleted, ErrNotFound when it does
// not exist.
func (s *Store) SandboxIntentPut(ctx context.Context, b *SandboxBinding, now time.Time) (*SandboxBinding, error) {
	var out *SandboxBinding
	err := s.inTx(ctx, "put provisioning intent", func(q *dbsqlc.Queries) error {
		sess, err := q.SessionLockShare(ctx, b.SessionID)
		if err != nil {
			return err
		}
		if sess.DeletingAt != nil {
			return fmt.Errorf("session %s: %w", b.SessionID, ErrDeleting)
		}
		rows, err := q.SandboxIntentUpsert(ctx, dbsqlc.SandboxIntentUpsertParams{SessionID: b.SessionID, Provider: b.Provider,
			SpecHash: b.SpecHash, TaskQueue: b.TaskQueue, Now: now})
		if err != nil {
			return err
		}
		if len(rows) == 1 {
			out = bindingFromRow(rows[0])
			return nil
		}
		// A binding exists: the upsert's WHERE left it alone.
		row, err := q.SandboxBindingGet(ctx, b.SessionID)
		if err != nil {
			return err
		}
		out = bindingFromRow(row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SandboxBindingPut atomically replaces a session's provisioning intent (if
// any) with a binding. Putting the binding already stored updates its spec
// hash and task queue; ErrConflict when a different external id is bound.
// It does not require the session row: a binding must be recordable while
// the session is being deleted, so that teardown finds the resource.
func (s *Store) SandboxBindingPut(ctx context.Context, b *SandboxBinding, now time.Time) (*SandboxBinding, error) {
	if b.ExternalID == "" {
		return nil, errors.New("put sandbox binding: external id is empty")
	}
	ext := b.ExternalID
	rows, err := s.q.SandboxBindingUpsert(ctx, dbsqlc.SandboxBindingUpsertParams{SessionID: b.SessionID, Provider: b.Provider,
		ExternalID: &ext, SpecHash: b.SpecHash, TaskQueue: b.TaskQueue, Now: now})
	if err != nil {
		return nil, mapErr("put sandbox binding", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("put sandbox binding of session %s: %w: a different sandbox is bound", b.SessionID, ErrConflict)
	}
	return bindingFromRow(rows[0]), nil
}

// SandboxBindingGet returns a session's binding or intent, or ErrNotFound.
func (s *Store) SandboxBindingGet(ctx context.Context, sessionID string) (*SandboxBinding, error) {
	row, err := s.q.SandboxBindingGet(ctx, sessionID)
	if err != nil {
		return nil, mapErr("get sandbox binding", err)
	}
	return bindingFromRow(row), nil
}

// SandboxBindingDelete removes a session's binding or intent and reports
// whether one existed.
func (s *Store) SandboxBindingDelete(ctx context.Context, sessionID string) (bool, error) {
	n, err := s.q.SandboxBindingDelete(ctx, sessionID)
	if err != nil {
		return false, mapErr("delete sandbox binding", err)
	}
	return n > 0, nil
}

// SandboxBindingListParams filter and page the sandbox records.
type SandboxBindingListParams struct {
	// Provider keeps only that provider's records when not empty.
	Provider string
	// OnlyIntents keeps only provisioning intents.
	OnlyIntents bool
	// AfterSessionID starts after this session id.
	AfterSessionID string
	// Limit is the page size.
	Limit int
}

// SandboxBindingList returns sandbox records ordered by session id.
func (s *Store) SandboxBindingList(ctx context.Context, p SandboxBindingListParams) ([]SandboxBinding, error) {
	rows, err := s.q.SandboxBindingList(ctx, dbsqlc.SandboxBindingListParams{Provider: p.Provider, OnlyIntents: p.OnlyIntents,
		AfterSessionID: p.AfterSessionID, RowLimit: int32(p.Limit)})
	if err != nil {
		return nil, mapErr("list sandbox bindings", err)
	}
	out := make([]SandboxBinding, 0, len(rows))
	for _, r := range rows {
		out = append(out, *bindingFromRow(r))
	}
	return out, nil
}

// Worker is an execution worker as last seen through its heartbeats.
type Worker struct {
	ID           string
	Provider     string
	TaskQueues   []string
	Capabilities []string
	Version      string
	FirstSeenAt  time.Time
	LastSeenAt   time.Time
}

func workerFromRow(r dbsqlc.Worker) *Worker {
	return &Worker{ID: r.WorkerID, Provider: r.Provider, TaskQueues: r.TaskQueues, Capabilities: r.Capabilities,
		Version: r.Version, FirstSeenAt: r.FirstSeenAt, LastSeenAt: r.LastSeenAt}
}

// WorkerHeartbeat records a worker's heartbeat at now: the first one sets
// FirstSeenAt, every one updates the description and LastSeenAt.
func (s *Store) WorkerHeartbeat(ctx context.Context, w *Worker, now time.Time) (*Worker, error) {
	queues, caps := w.TaskQueues, w.Capabilities
	if queues == nil {
		queues = []string{}
	}
	if caps == nil {
		caps = []string{}
	}
	row, err := s.q.WorkerUpsert(ctx, dbsqlc.WorkerUpsertParams{WorkerID: w.ID, Provider: w.Provider, TaskQueues: queues,
		Capabilities: caps, Version: w.Version, Now: now})
	if err != nil {
		return nil, mapErr("record worker heartbeat", err)
	}
	return workerFromRow(row), nil
}

// WorkerList returns every worker that ever sent a heartbeat, by provider
// and id.
func (s *Store) WorkerList(ctx context.Context) ([]Worker, error) {
	rows, err := s.q.WorkerList(ctx)
	if err != nil {
		return nil, mapErr("list workers", err)
	}
	out := make([]Worker, 0, len(rows))
	for _, r := range rows {
		out = append(out, *workerFromRow(r))
	}
	return out, nil
}

// WorkerQueueLastSeen returns the latest heartbeat of any worker that
// polls queue, and false when no worker ever reported it.
func (s *Store) WorkerQueueLastSeen(ctx context.Context, queue string) (time.Time, bool, error) {
	at, err := s.q.WorkerQueueLastSeen(ctx, queue)
	if err = mapErr("worker queue last seen", err); errors.Is(err, ErrNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return at, true, nil
}

// WorkerGet returns a worker, or ErrNotFound.
func (s *Store) WorkerGet(ctx context.Context, id string) (*Worker, error) {
	row, err := s.q.WorkerGet(ctx, id)
	if err != nil {
		return nil, mapErr("get worker", err)
	}
	return workerFromRow(row), nil
}

// InstallationID returns the id of this installation, created once by the
// migrations (00011_installation.sql). Workers label every sandbox
// resource with it, so installations sharing a Docker daemon, a sandbox
// root or a provider account never touch each other's sandboxes.
func (s *Store) InstallationID(ctx context.Context) (string, error) {
	id, err := s.q.InstallationGet(ctx)
	if err != nil {
		return "", mapErr("get installation id", err)
	}
	return id, nil
}
