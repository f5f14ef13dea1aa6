package db

// This file holds the one write path of a session's log: Append, its
// request and its status change. Events are appended through Append
// only.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mangohq/mango/db/internal/dbsqlc"
	"github.com/mangohq/mango/internal/traceparent"
)

// NotifyChannel is the PostgreSQL channel on which every event append is
// announced, in the appending transaction, with the payload
// "<session id>:<last seq>". Listeners re-read the log; the payload only
// says where to look.
const NotifyChannel = "mango_events"

// InterruptChannel is the PostgreSQL channel on which every user.interrupt
// that wakes a session's workflow is announced, in the transaction that
// commits it, with an [Interrupt] as JSON. The api-server relays it to the
// workers' interrupt streams (ControlPlane WatchInterrupts), so that only
// committed interrupts reach a worker.
const InterruptChannel = "mango_interrupts"

// InterruptEventType is the type of the events announced on
// InterruptChannel.
const InterruptEventType = "user.interrupt"

// Interrupt is the payload of a notification on InterruptChannel.
type Interrupt struct {
	SessionID string `json:"session_id"`
	EventID   string `json:"event_id"`
	Seq       int64  `json:"seq"`
	// OutboxID is the outbox row whose signal tells the session's
	// workflow of the same interrupt.
	OutboxID int64 `json:"outbox_id"`
}

// NewEvent is an event to append. Body holds the event's members other
// than id, type and processed_at, as a JSON object.
type NewEvent struct {
	ID   string
	Type string
	Body json.RawMessage
	// Key, when set, makes the append idempotent: an event with the same key
	// already in the session is returned instead of appending again.
	Key string
	// Pending marks a trigger the worker has yet to take (taken_at
	// unset); it is in the log, with processed_at, all the same.
	Pending bool
	// Queued keeps the event out of the log until the session takes it
	// up (a user.message sent while a turn runs; see events.go): it is
	// returned with Seq 0 and no processed_at. Key must be empty.
	Queued bool
	// Usage, when set, is the usage of the model request the event
	// reports: it is added to the session's usage when the event is
	// appended, never when the event was already stored under its key.
	Usage *Usage
}

// AppendRequest is one admission: events appended atomically, with an
// optional status change decided by Decide under the session's row lock.
type AppendRequest struct {
	// Events are appended in order.
	Events []NewEvent
	// Decide, when set, runs under the session's row lock before anything
	// is written. It may reject the request (its error is returned as is)
	// and returns the status change to make, if any.
	Decide func(cur *Session) (*Change, error)
	// Now is the commit's timestamp.
	Now time.Time
	// Transcript entries are stored in the same transaction (keys already
	// stored are skipped), before the events.
	Transcript []TranscriptEntry
	// Processed names trigger events marked processed (at Now, unless
	// they already are) in the same transaction.
	Processed []string
	// TurnEnd, when set, is called when the request's change ends a turn
	// (running or rescheduling to idle or terminated), with the session's
	// usage including this request's: the event it returns (if any) is
	// appended just before the status event.
	TurnEnd func(cur *Session) *NewEvent
	// EnsureWork, when set, is a fresh work item id: if the session is
	// self-hosted, the request appends or queues an event and the session
	// has no live work item, an item of type session is inserted with
	// this id and announced on WorkChannel, in the same transaction.
	EnsureWork string
	// ToolResults are the ids of the agent.tool_use events the request
	// answers. Under the row lock each must be an agent.tool_use event of
	// the session that no user.tool_result or agent.tool_result answers
	// yet, named once: else the request fails with a *ToolUseError.
	ToolResults []string
}

// ToolUseError rejects an AppendRequest's ToolResults entry: ID is not an
// agent.tool_use event of the session (Answered false; ErrNotFound), or
// it is answered already (Answered; ErrConflict).
type ToolUseError struct {
	ID       string
	Answered bool
}

func (e *ToolUseError) Error() string {
	if e.Answered {
		return fmt.Sprintf("tool use %s is already answered", e.ID)
	}
	return fmt.Sprintf("tool use %s is not an agent.tool_use event of the session", e.ID)
}

// Unwrap makes the error ErrConflict when the tool use is answered
// already, ErrNotFound when it is unknown.
func (e *ToolUseError) Unwrap() error {
	if e.Answered {
		return ErrConflict
	}
	return ErrNotFound
}

// Change is a status change made with an append. The store appends the
// matching status event (session.status_<status>, with StopReason for
// idle) after the request's events.
type Change struct {
	// To is the new status; empty means no status change.
	To Status
	// StopReason is the stop_reason of an idle status, as JSON.
	StopReason json.RawMessage
	// Wake inserts an outbox row so the session's workflow is signalled.
	Wake bool
	// WakeKind names the wake-up ("wakeup", "interrupt").
	WakeKind string
	// EventID is the id of the status event (required with To).
	EventID string
	// Key, when set, makes the change idempotent: if an event with this key
	// exists the change was already made and is skipped (a retried worker
	// call must not end a later turn). The status event carries the key.
	Key string
}

// ErrDeleting reports a session whose deletion has begun.
var ErrDeleting = errors.New("session is being deleted")

// Append appends events to a session's log atomically: sequence numbers
// are gapless, the status machine is enforced, the outbox row (if any) is
// written, and listeners are notified, all in one transaction. Events with
// a Key already present are not appended again; the stored ones are
// returned in their place.
//
// It first appends without looking the request's keys up: a request's keys
// are new but for a retried one, whose events the unique index on
// (session_id, event_key) then refuses, rolling everything back; the
// append runs again with the lookup, which returns the stored events as
// they are. One query fewer per append (measured: a fifth of PostgreSQL's
// execution time in a turn went to that lookup).
func (s *Store) Append(ctx context.Context, sessionID string, req *AppendRequest) (*Session, []Event, error) {
	sess, events, err := s.append(ctx, sessionID, req, false)
	if errors.Is(err, errKeyTaken) {
		sess, events, err = s.append(ctx, sessionID, req, true)
	}
	if err != nil {
		return nil, nil, err
	}
	return sess, events, nil
}

// errKeyTaken reports an append without the lookup (Append) refused
// because an event with one of its keys (or ids) is stored.
var errKeyTaken = errors.New("an event key is already stored")

func (s *Store) append(ctx context.Context, sessionID string, req *AppendRequest, lookup bool) (*Session, []Event, error) {
	var sess *Session
	var events []Event
	var taken bool
	err := s.inTxLast(ctx, "append events", txOptions{genericPlans: true}, func(q *dbsqlc.Queries, last func()) error {
		var err error
		sess, events, err = s.appendKeyed(ctx, q, sessionID, req, lookup, last)
		var pgErr *pgconn.PgError
		// A retried request's events carry their ids too: the unique
		// index on id may be the one that refuses them.
		taken = !lookup && errors.As(err, &pgErr) && pgErr.Code == "23505" &&
			(pgErr.ConstraintName == "events_key_idx" || pgErr.ConstraintName == "events_session_id_key")
		return err
	})
	if taken {
		return nil, nil, errKeyTaken
	}
	return sess, events, err
}

func (s *Store) appendTx(ctx context.Context, q *dbsqlc.Queries, sessionID string, req *AppendRequest) (*Session, []Event, error) {
	return s.appendKeyed(ctx, q, sessionID, req, true, nil)
}

// appendKeyed is appendTx; without lookup it does not look the request's
// keys up, so a stored key fails the append (a unique violation of
// events_key_idx) instead of returning the stored event. last, when set,
// is called before the append's last statement: the transaction is the
// append's own (inTxLast), and COMMIT may go with that statement.
//
// Under the session's row lock it admits the request (decideAppend),
// looks its keys up, decides what to write without touching the database
// (planAppend) and writes that (appendPlan.execute).
func (s *Store) appendKeyed(ctx context.Context, q *dbsqlc.Queries, sessionID string, req *AppendRequest, lookup bool, last func()) (*Session, []Event, error) {
	row, err := q.SessionLock(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	cur, err := sessionFromRow(row)
	if err != nil {
		return nil, nil, err
	}
	req, change, err := decideAppend(cur, req)
	if err != nil {
		return nil, nil, err
	}
	if req, change, err = outcomeAppend(ctx, q, cur, req, change); err != nil {
		return nil, nil, err
	}
	if change, err = holdTurnEnd(ctx, q, cur, change); err != nil {
		return nil, nil, err
	}
	if err := checkToolResults(ctx, q, sessionID, req.ToolResults); err != nil {
		return nil, nil, err
	}
	var stored map[string]Event
	if lookup {
		if stored, err = lookupKeys(ctx, q, sessionID, appendKeys(change, req.Events)); err != nil {
			return nil, nil, err
		}
	}
	plan, err := planAppend(cur, req, change, stored)
	if err != nil {
		return nil, nil, err
	}
	if err := emitWebhooks(ctx, q, req.Now, sessionWebhooks(cur, plan)); err != nil {
		return nil, nil, err
	}
	if cur.DreamID != nil && plan.setStatus {
		// Before the plan's writes: COMMIT may go with their last.
		if err := dreamOnSessionStatus(ctx, q, *cur.DreamID, plan.session, req.Now); err != nil {
			return nil, nil, err
		}
	}
	if cur.IsThread() {
		return s.threadAppend(ctx, q, cur, plan, last)
	}
	return plan.execute(ctx, q, last)
}

// decideAppend admits req on the locked session cur: ErrDeleting once the
// session's deletion has begun, else req with Now made monotonic and the
// status change its Decide makes (a rejection is returned as a
// decideError, so that it reaches the caller as is).
func decideAppend(cur *Session, req *AppendRequest) (*AppendRequest, *Change, error) {
	if cur.Deleting {
		return nil, nil, fmt.Errorf("append to session %s: %w", cur.ID, ErrDeleting)
	}
	req = monotonic(req, cur)
	if req.Decide == nil {
		return req, nil, nil
	}
	change, err := req.Decide(cur)
	if err != nil {
		return nil, nil, &decideError{err}
	}
	return req, change, nil
}

// appendKeys are the keys an append looks up, in one query: the change's
// and the events'.
func appendKeys(change *Change, events []NewEvent) []string {
	var keys []string
	if change != nil && change.Key != "" {
		keys = append(keys, change.Key)
	}
	for _, ev := range events {
		if ev.Key != "" {
			keys = append(keys, ev.Key)
		}
	}
	return keys
}

// lookupKeys returns the session's events stored under the keys, by key.
func lookupKeys(ctx context.Context, q *dbsqlc.Queries, sessionID string, keys []string) (map[string]Event, error) {
	stored := map[string]Event{}
	if len(keys) == 0 {
		return stored, nil
	}
	rows, err := q.EventsGetByKeys(ctx, dbsqlc.EventsGetByKeysParams{SessionID: sessionID, Keys: keys})
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		stored[*r.EventKey] = eventFromRow(r)
	}
	return stored, nil
}

// appendPlan is what an append writes, as planAppend decided it; execute
// writes it.
type appendPlan struct {
	// req is the request, its Now made monotonic.
	req *AppendRequest
	// session is the session as the append leaves it (status, stop
	// reason, usage, active time); execute sets LastSeq and LastEventAt.
	session *Session
	// kept are the request's events that are not numbered, in request
	// order: those queued outside the log, and those already stored under
	// their key (Existed).
	kept []Event
	// queued are the events to store outside the log, in order.
	queued []Event
	// fresh are the events to number, in order: the request's new ones,
	// then the turn-end event and the status event, if any.
	fresh []NewEvent
	// setStatus writes the session's status, active time and stopReason.
	setStatus  bool
	stopReason json.RawMessage
	// setUsage writes the session's usage.
	setUsage bool
	// wake inserts an outbox row of kind wakeKind.
	wake     bool
	wakeKind string
	// ensureWork inserts the session's work item (req.EnsureWork) unless
	// it has a live one.
	ensureWork bool
}

// numbers reports whether the append numbers events: one EventsAppend
// statement, which also announces the new last seq on NotifyChannel.
// Without, only the few writes without an event are made, and nothing is
// announced.
func (p *appendPlan) numbers() bool { return len(p.fresh) > 0 }

// announces reports whether the numbered event ev is announced on
// InterruptChannel: a user.interrupt that wakes the workflow.
func (p *appendPlan) announces(ev NewEvent) bool {
	return p.wake && p.wakeKind == "interrupt" && ev.Type == InterruptEventType
}

// commitsWithAppend reports whether COMMIT may go with the EventsAppend
// statement: nothing follows it unless an interrupt's notification
// (which names the outbox row) might.
func (p *appendPlan) commitsWithAppend() bool { return !p.wake || p.wakeKind != "interrupt" }

// planAppend decides what an append writes, from the locked session cur,
// the request (Now already monotonic), the status change its Decide made
// (nil: none) and the events stored under the request's keys (nil without
// the lookup). It touches no database and leaves cur as it is; it calls
// the request's TurnEnd when the change ends a turn. The change goes
// through the state machine (status.go): ErrInvalidTransition when it
// forbids the move.
func planAppend(cur *Session, req *AppendRequest, change *Change, stored map[string]Event) (*appendPlan, error) {
	next := *cur
	p := &appendPlan{req: req, session: &next, wakeKind: "wakeup"}
	if change != nil && change.Key != "" {
		if _, ok := stored[change.Key]; ok {
			change = nil // already applied
		}
	}
	p.placeEvents(stored)
	p.ensureWork = req.EnsureWork != "" && cur.SelfHosted && (len(p.fresh) > 0 || len(p.queued) > 0)
	for _, ev := range p.fresh {
		if ev.Usage != nil {
			next.Usage.Add(*ev.Usage)
			p.setUsage = true
		}
	}
	if change == nil {
		p.markThreadEvents(cur)
		return p, nil
	}
	if err := p.changeStatus(change); err != nil {
		return nil, err
	}
	p.markThreadEvents(cur)
	p.wake = change.Wake
	if change.Wake && change.WakeKind != "" {
		p.wakeKind = change.WakeKind
	}
	return p, nil
}

// placeEvents puts each of the request's events where it goes: queued
// outside the log, answered by the event stored under its key, or
// numbered.
func (p *appendPlan) placeEvents(stored map[string]Event) {
	p.kept = make([]Event, 0, len(p.req.Events)+1)
	p.fresh = make([]NewEvent, 0, len(p.req.Events)+1)
	for _, ev := range p.req.Events {
		if ev.Queued {
			e := queuedEvent(p.session.ID, ev, p.req.Now)
			p.queued = append(p.queued, e)
			p.kept = append(p.kept, e)
			continue
		}
		if e, ok := stored[ev.Key]; ev.Key != "" && ok {
			e.Existed = true
			p.kept = append(p.kept, e)
			continue
		}
		p.fresh = append(p.fresh, ev)
	}
}

// changeStatus plans a change's status: a new stop reason on a session
// that stays idle, or a move the state machine allows, announced by its
// status event after the request's TurnEnd event when the move ends a
// turn.
func (p *appendPlan) changeStatus(change *Change) error {
	s := p.session
	if change.To == StatusIdle && s.Status == StatusIdle && len(change.StopReason) > 0 {
		// Still idle with a new stop reason (required actions partly
		// answered): announce the remaining ones with a new idle event.
		p.setStatus, p.stopReason = true, change.StopReason
		s.StopReason = change.StopReason
		if change.EventID != "" {
			p.fresh = append(p.fresh, NewEvent{ID: change.EventID, Type: StatusEventType(StatusIdle), Key: change.Key,
				Body: idleEventBody(change.StopReason)})
		}
	}
	if change.To == "" || change.To == s.Status {
		return nil
	}
	if err := CheckTransition(s.Status, change.To); err != nil {
		return err
	}
	if p.req.TurnEnd != nil && endsTurn(s.Status, change.To) && !s.IsThread() {
		// It sees the session before the move, with this request's usage.
		if ev := p.req.TurnEnd(s); ev != nil {
			p.fresh = append(p.fresh, *ev)
		}
	}
	body := s.move(change.To, change.StopReason, p.req.Now)
	p.fresh = append(p.fresh, NewEvent{ID: change.EventID, Type: StatusEventType(change.To), Body: body, Key: change.Key})
	p.setStatus, p.stopReason = true, s.StopReason
	return nil
}

// execute writes the plan in the append's transaction (appendKeyed's
// last) and returns the session and the events as Append does.
func (p *appendPlan) execute(ctx context.Context, q *dbsqlc.Queries, last func()) (*Session, []Event, error) {
	if p.ensureWork {
		if _, err := q.WorkEnsureSession(ctx, dbsqlc.WorkEnsureSessionParams{ID: p.req.EnsureWork, SessionID: p.session.ID, Now: p.req.Now}); err != nil {
			return nil, nil, err
		}
	}
	for _, e := range p.queued {
		if err := queue(ctx, q, e); err != nil {
			return nil, nil, err
		}
	}
	if !p.numbers() {
		if err := p.writeWithoutEvents(ctx, q); err != nil {
			return nil, nil, err
		}
		return p.session, p.kept, nil
	}
	return p.writeEvents(ctx, q, last)
}

// writeWithoutEvents makes the rare writes of an append that numbers no
// event, one statement each.
func (p *appendPlan) writeWithoutEvents(ctx context.Context, q *dbsqlc.Queries) error {
	s, req := p.session, p.req
	for _, e := range req.Transcript {
		if _, err := q.TranscriptEntryInsert(ctx, dbsqlc.TranscriptEntryInsertParams{SessionID: s.ID, EntryKey: e.Key, Body: e.Body}); err != nil {
			return err
		}
	}
	if len(req.Processed) > 0 {
		if _, err := q.EventMarkProcessed(ctx, dbsqlc.EventMarkProcessedParams{SessionID: s.ID, Ids: req.Processed, Now: req.Now}); err != nil {
			return err
		}
	}
	if p.setStatus {
		if err := q.SessionSetStatus(ctx, dbsqlc.SessionSetStatusParams{ID: s.ID, Status: string(s.Status), StopReason: p.stopReason, UpdatedAt: req.Now,
			ActiveMicros: s.ActiveMicros, RunningSince: s.RunningSince}); err != nil {
			return err
		}
	}
	if p.wake {
		if err := q.OutboxInsert(ctx, dbsqlc.OutboxInsertParams{SessionID: s.ID, Kind: p.wakeKind, Payload: json.RawMessage(`{}`),
			Traceparent: traceparent.Of(ctx)}); err != nil {
			return err
		}
	}
	return nil
}

// writeEvents numbers the fresh events and makes every other write in one
// statement (EventsAppend), then announces the interrupts among them.
func (p *appendPlan) writeEvents(ctx context.Context, q *dbsqlc.Queries, last func()) (*Session, []Event, error) {
	s, req := p.session, p.req
	arg := p.eventsAppendParams()
	arg.Traceparent = traceparent.Of(ctx) // of the wake-up's outbox row
	if last != nil && p.commitsWithAppend() {
		// Nothing follows (an interrupt's notification would, naming the
		// outbox row): COMMIT goes with the statement.
		last()
	}
	appended, err := q.EventsAppend(ctx, arg)
	if err != nil {
		return nil, nil, err
	}
	lastSeq := appended.LastSeq
	if want := s.LastSeq + int64(len(p.fresh)); lastSeq != want {
		// The row lock makes this impossible; refuse rather than misnumber
		// (or, committed with the statement, report it).
		return nil, nil, fmt.Errorf("append to session %s: last_seq %d after appending %d events to %d", s.ID, lastSeq, len(p.fresh), s.LastSeq)
	}
	out := p.kept
	for i, ev := range p.fresh {
		seq := s.LastSeq + int64(i) + 1
		out = append(out, Event{SessionID: s.ID, Seq: seq, ID: ev.ID, Type: ev.Type,
			Body: json.RawMessage(arg.Bodies[i]), CreatedAt: req.Now, ProcessedAt: &req.Now})
		if p.announces(ev) {
			payload, _ := json.Marshal(Interrupt{SessionID: s.ID, EventID: ev.ID, Seq: seq, OutboxID: appended.OutboxID})
			if err := q.NotifyInterrupt(ctx, string(payload)); err != nil {
				return nil, nil, err
			}
		}
	}
	s.LastSeq, s.LastEventAt = lastSeq, &req.Now
	return s, inRequestOrder(out, req.Events), nil
}

// eventsAppendParams are the EventsAppend arguments of the plan: the
// transcript entries and processed marks go in the same statement.
func (p *appendPlan) eventsAppendParams() dbsqlc.EventsAppendParams {
	s, req := p.session, p.req
	arg := dbsqlc.EventsAppendParams{SessionID: s.ID, SetStatus: p.setStatus, Status: string(s.Status), StopReason: p.stopReason,
		Now: req.Now, Wake: p.wake, WakeKind: p.wakeKind, ActiveMicros: s.ActiveMicros, RunningSince: s.RunningSince,
		SetUsage: p.setUsage, Processed: req.Processed}
	for _, e := range req.Transcript {
		arg.TranscriptKeys = append(arg.TranscriptKeys, e.Key)
		arg.TranscriptBodies = append(arg.TranscriptBodies, string(e.Body))
	}
	if p.setUsage {
		arg.Usage = s.Usage.json()
	}
	for _, ev := range p.fresh {
		body := ev.Body
		if len(body) == 0 {
			body = json.RawMessage(`{}`)
		}
		arg.Ids = append(arg.Ids, ev.ID)
		arg.Types = append(arg.Types, ev.Type)
		arg.Bodies = append(arg.Bodies, string(body))
		arg.Keys = append(arg.Keys, ev.Key)
		arg.Pending = append(arg.Pending, ev.Pending)
	}
	return arg
}

// checkToolResults checks an append's ToolResults under the session's row
// lock: each an agent.tool_use event of the session, unanswered, named
// once; else a *ToolUseError.
func checkToolResults(ctx context.Context, q *dbsqlc.Queries, sessionID string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := q.ToolUseStates(ctx, dbsqlc.ToolUseStatesParams{SessionID: sessionID, Ids: ids})
	if err != nil {
		return err
	}
	answered := make(map[string]bool, len(rows))
	for _, r := range rows {
		answered[r.ID] = r.Answered
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		done, ok := answered[id]
		if !ok {
			return &ToolUseError{ID: id}
		}
		if done || seen[id] {
			return &ToolUseError{ID: id, Answered: true}
		}
		seen[id] = true
	}
	return nil
}
