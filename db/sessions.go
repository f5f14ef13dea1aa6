package db

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mangohq/mango/db/internal/dbsqlc"
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
}

func sessionFromRow(r dbsqlc.Session) (*Session, error) {
	s := &Session{ID: r.ID, AgentID: r.AgentID, AgentVersion: r.AgentVersion, Agent: r.Agent, EnvironmentID: r.EnvironmentID,
		Provider: r.Provider, Title: r.Title, Status: Status(r.Status), StopReason: r.StopReason,
		BudgetMaxCents: r.BudgetMaxCents, BudgetRemoved: r.BudgetRemoved, ActiveMicros: r.ActiveMicros, RunningSince: r.RunningSince,
		LastSeq: r.LastSeq, LastEventAt: r.LastEventAt, Queued: int(r.Queued),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ArchivedAt: r.ArchivedAt, Deleting: r.DeletingAt != nil,
		VaultIDs: r.VaultIds}
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

// Event is one entry of a session's event log.
type Event struct {
	SessionID   string
	Seq         int64
	ID          string
	Type        string
	Body        json.RawMessage
	CreatedAt   time.Time
	ProcessedAt *time.Time
	// Existed is set in Append's result on an event that was already
	// stored under its key, so this call did not append it.
	Existed bool
}

// eventsFromRows is eventFromRow of every row, in order.
func eventsFromRows(rows []dbsqlc.Event) []Event {
	out := make([]Event, 0, len(rows))
	for _, r := range rows {
		out = append(out, eventFromRow(r))
	}
	return out
}

func eventFromRow(r dbsqlc.Event) Event {
	return Event{SessionID: r.SessionID, Seq: r.Seq, ID: r.ID, Type: r.Type, Body: r.Body, CreatedAt: r.CreatedAt, ProcessedAt: r.ProcessedAt}
}

// JSON returns the event as the API shows it: id, type and processed_at
// followed by the members of Body.
func (e *Event) JSON() json.RawMessage {
	var b bytes.Buffer
	b.Grow(len(e.Body) + 96)
	b.WriteString(`{"id":`)
	b.WriteString(strconv.Quote(e.ID))
	b.WriteString(`,"type":`)
	b.WriteString(strconv.Quote(e.Type))
	b.WriteString(`,"processed_at":`)
	if e.ProcessedAt != nil {
		b.WriteByte('"')
		b.WriteString(e.ProcessedAt.UTC().Format(time.RFC3339Nano))
		b.WriteByte('"')
	} else {
		b.WriteString("null")
	}
	body := bytes.TrimSpace(e.Body)
	if len(body) > 2 {
		b.WriteByte(',')
		b.Write(body[1:])
	} else {
		b.WriteByte('}')
	}
	return b.Bytes()
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
	// VaultIDs are the session's vaults, in order.
	VaultIDs []string
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
			BudgetMaxCents: p.BudgetMaxCents,
		})
		if err != nil {
			return err
		}
		if _, err := s.insertResources(ctx, q, p.ID, p.Now, p.Resources); err != nil {
			return err
		}
		if len(p.VaultIDs) > 0 {
			if err := q.SessionSetVaultIDs(ctx, dbsqlc.SessionSetVaultIDsParams{ID: p.ID, VaultIds: p.VaultIDs}); err != nil {
				return err
			}
			row.VaultIds = p.VaultIDs
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
			(pgErr.ConstraintName == "events_key_idx" || pgErr.ConstraintName == "events_id_key")
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
func (s *Store) appendKeyed(ctx context.Context, q *dbsqlc.Queries, sessionID string, req *AppendRequest, lookup bool, last func()) (*Session, []Event, error) {
	row, err := q.SessionLock(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	cur, err := sessionFromRow(row)
	if err != nil {
		return nil, nil, err
	}
	if cur.Deleting {
		return nil, nil, fmt.Errorf("append to session %s: %w", sessionID, ErrDeleting)
	}
	req = monotonic(req, cur)
	var change *Change
	if req.Decide != nil {
		if change, err = req.Decide(cur); err != nil {
			return nil, nil, &decideError{err}
		}
	}
	// One lookup for every key: the change's and the events'.
	var keys []string
	if change != nil && change.Key != "" {
		keys = append(keys, change.Key)
	}
	for _, ev := range req.Events {
		if ev.Key != "" {
			keys = append(keys, ev.Key)
		}
	}
	stored := map[string]dbsqlc.Event{}
	if lookup && len(keys) > 0 {
		rows, err := q.EventsGetByKeys(ctx, dbsqlc.EventsGetByKeysParams{SessionID: sessionID, Keys: keys})
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rows {
			stored[*r.EventKey] = r
		}
	}
	if change != nil && change.Key != "" {
		if _, ok := stored[change.Key]; ok {
			change = nil // already applied
		}
	}
	out := make([]Event, 0, len(req.Events)+1)
	fresh := make([]NewEvent, 0, len(req.Events)+1)
	for _, ev := range req.Events {
		if ev.Queued {
			e, err := queue(ctx, q, sessionID, ev, req.Now)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, e)
			continue
		}
		if r, ok := stored[ev.Key]; ev.Key != "" && ok {
			e := eventFromRow(r)
			e.Existed = true
			out = append(out, e)
			continue
		}
		fresh = append(fresh, ev)
	}
	setUsage := false
	for _, ev := range fresh {
		if ev.Usage != nil {
			cur.Usage.Add(*ev.Usage)
			setUsage = true
		}
	}
	setStatus := false
	var stop []byte
	if change != nil && change.To == StatusIdle && cur.Status == StatusIdle && len(change.StopReason) > 0 {
		// Still idle with a new stop reason (required actions partly
		// answered): announce the remaining ones with a new idle event.
		setStatus, stop = true, change.StopReason
		cur.StopReason = change.StopReason
		if change.EventID != "" {
			fresh = append(fresh, NewEvent{ID: change.EventID, Type: StatusEventType(StatusIdle), Key: change.Key,
				Body: json.RawMessage(`{"stop_reason":` + string(change.StopReason) + `}`)})
		}
	}
	if change != nil && change.To != "" && change.To != cur.Status {
		if err := CheckTransition(cur.Status, change.To); err != nil {
			return nil, nil, err
		}
		if req.TurnEnd != nil && (cur.Status == StatusRunning || cur.Status == StatusRescheduling) &&
			(change.To == StatusIdle || change.To == StatusTerminated) {
			if ev := req.TurnEnd(cur); ev != nil {
				fresh = append(fresh, *ev)
			}
		}
		body := json.RawMessage(`{}`)
		stop = nil
		if change.To == StatusIdle {
			stop = change.StopReason
			if len(stop) == 0 {
				stop = []byte(`{"type":"end_turn"}`)
			}
			body = json.RawMessage(`{"stop_reason":` + string(stop) + `}`)
		}
		fresh = append(fresh, NewEvent{ID: change.EventID, Type: StatusEventType(change.To), Body: body, Key: change.Key})
		setStatus = true
		cur.moveClock(cur.Status, change.To, req.Now)
		cur.Status, cur.StopReason, cur.UpdatedAt = change.To, stop, req.Now
	}
	wake, wakeKind := change != nil && change.Wake, "wakeup"
	if wake && change.WakeKind != "" {
		wakeKind = change.WakeKind
	}
	if len(fresh) == 0 {
		// Nothing to number: only the rare writes without an event.
		for _, e := range req.Transcript {
			if _, err := q.TranscriptEntryInsert(ctx, dbsqlc.TranscriptEntryInsertParams{SessionID: sessionID, EntryKey: e.Key, Body: e.Body}); err != nil {
				return nil, nil, err
			}
		}
		if len(req.Processed) > 0 {
			if _, err := q.EventMarkProcessed(ctx, dbsqlc.EventMarkProcessedParams{SessionID: sessionID, Ids: req.Processed, Now: req.Now}); err != nil {
				return nil, nil, err
			}
		}
		if setStatus {
			if err := q.SessionSetStatus(ctx, dbsqlc.SessionSetStatusParams{ID: sessionID, Status: string(cur.Status), StopReason: stop, UpdatedAt: req.Now,
				ActiveMicros: cur.ActiveMicros, RunningSince: cur.RunningSince}); err != nil {
				return nil, nil, err
			}
		}
		if wake {
			if err := q.OutboxInsert(ctx, dbsqlc.OutboxInsertParams{SessionID: sessionID, Kind: wakeKind, Payload: json.RawMessage(`{}`)}); err != nil {
				return nil, nil, err
			}
		}
		return cur, out, nil
	}
	// The transcript entries and processed marks go in the same statement.
	arg := dbsqlc.EventsAppendParams{SessionID: sessionID, SetStatus: setStatus, Status: string(cur.Status), StopReason: stop,
		Now: req.Now, Wake: wake, WakeKind: wakeKind, ActiveMicros: cur.ActiveMicros, RunningSince: cur.RunningSince,
		SetUsage: setUsage, Processed: req.Processed}
	for _, e := range req.Transcript {
		arg.TranscriptKeys = append(arg.TranscriptKeys, e.Key)
		arg.TranscriptBodies = append(arg.TranscriptBodies, string(e.Body))
	}
	if setUsage {
		arg.Usage = cur.Usage.json()
	}
	for _, ev := range fresh {
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
	if last != nil && (!wake || wakeKind != "interrupt") {
		// Nothing follows (an interrupt's notification would, naming the
		// outbox row): COMMIT goes with the statement.
		last()
	}
	appended, err := q.EventsAppend(ctx, arg)
	if err != nil {
		return nil, nil, err
	}
	lastSeq := appended.LastSeq
	if want := cur.LastSeq + int64(len(fresh)); lastSeq != want {
		// The row lock makes this impossible; refuse rather than misnumber
		// (or, committed with the statement, report it).
		return nil, nil, fmt.Errorf("append to session %s: last_seq %d after appending %d events to %d", sessionID, lastSeq, len(fresh), cur.LastSeq)
	}
	for i, ev := range fresh {
		seq := cur.LastSeq + int64(i) + 1
		out = append(out, Event{SessionID: sessionID, Seq: seq, ID: ev.ID, Type: ev.Type,
			Body: json.RawMessage(arg.Bodies[i]), CreatedAt: req.Now, ProcessedAt: &req.Now})
		if wake && wakeKind == "interrupt" && ev.Type == InterruptEventType {
			payload, _ := json.Marshal(Interrupt{SessionID: sessionID, EventID: ev.ID, Seq: seq, OutboxID: appended.OutboxID})
			if err := q.NotifyInterrupt(ctx, string(payload)); err != nil {
				return nil, nil, err
			}
		}
	}
	cur.LastSeq, cur.LastEventAt = lastSeq, &req.Now
	return cur, inRequestOrder(out, req.Events), nil
}

// decideError carries an AppendRequest.Decide rejection through the
// transaction untouched by error mapping.
type decideError struct{ err error }

func (e *decideError) Error() string { return e.err.Error() }
func (e *decideError) Unwrap() error { return e.err }

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
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SessionArchive archives a session (idempotently).
func (s *Store) SessionArchive(ctx context.Context, id string, now time.Time) (*Session, error) {
	row, err := s.q.SessionArchive(ctx, dbsqlc.SessionArchiveParams{ID: id, Now: now})
	if err != nil {
		return nil, mapErr("archive session", err)
	}
	return sessionFromRow(row)
}

// SessionFence marks a session as being deleted: from this commit on no
// event is admitted and reads answer not found. Streams are notified, and a
// "delete" outbox row is written in the same transaction: a worker stops
// the session's workflow, tears down its sandbox if it has one (bound
// reports that) and finalizes the deletion. It is idempotent, so an
// interrupted deletion can be resumed.
func (s *Store) SessionFence(ctx context.Context, id string, now time.Time) (sess *Session, bound bool, err error) {
	err = s.inTx(ctx, "fence session", func(q *dbsqlc.Queries) error {
		row, err := q.SessionFence(ctx, dbsqlc.SessionFenceParams{ID: id, Now: now})
		if err != nil {
			return err
		}
		if err := q.NotifySession(ctx, id+":deleted"); err != nil {
			return err
		}
		if bound, err = q.SessionBindingExists(ctx, id); err != nil {
			return err
		}
		if err := q.OutboxInsert(ctx, dbsqlc.OutboxInsertParams{SessionID: id, Kind: "delete", Payload: json.RawMessage(`{}`)}); err != nil {
			return err
		}
		sess, err = sessionFromRow(row)
		return err
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
		IncludeArchived: p.IncludeArchived, AgentID: p.AgentID, AgentVersion: p.AgentVersion, Statuses: p.Statuses,
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

// EventListParams filter and page a session's events.
type EventListParams struct {
	Types      []string
	CreatedGT  *time.Time
	CreatedGTE *time.Time
	CreatedLT  *time.Time
	CreatedLTE *time.Time
	AfterSeq   *int64
	BeforeSeq  *int64
	Descending bool
	Limit      int
}

// EventList returns one page of a session's events and whether more follow.
func (s *Store) EventList(ctx context.Context, sessionID string, p EventListParams) ([]Event, bool, error) {
	arg := dbsqlc.EventListParams{SessionID: sessionID, Types: p.Types, CreatedGt: p.CreatedGT, CreatedGte: p.CreatedGTE,
		CreatedLt: p.CreatedLT, CreatedLte: p.CreatedLTE, AfterSeq: p.AfterSeq, BeforeSeq: p.BeforeSeq,
		Ascending: !p.Descending, RowLimit: int32(p.Limit + 1)}
	if arg.Types == nil {
		arg.Types = []string{}
	}
	rows, err := s.q.EventList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list events", err)
	}
	page, more := trim(eventsFromRows(rows), p.Limit)
	return page, more, nil
}

// EventsAfter returns up to limit events with a sequence number above seq,
// in order: what a stream has not delivered yet.
func (s *Store) EventsAfter(ctx context.Context, sessionID string, seq int64, limit int) ([]Event, error) {
	rows, err := s.q.EventsAfter(ctx, dbsqlc.EventsAfterParams{SessionID: sessionID, Seq: seq, Limit: int32(limit)})
	if err != nil {
		return nil, mapErr("read events", err)
	}
	return eventsFromRows(rows), nil
}

// EventSeq returns the sequence number of an event of the session.
func (s *Store) EventSeq(ctx context.Context, sessionID, eventID string) (int64, error) {
	seq, err := s.q.EventSeqByID(ctx, dbsqlc.EventSeqByIDParams{SessionID: sessionID, ID: eventID})
	if err != nil {
		return 0, mapErr("find event", err)
	}
	return seq, nil
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

// ProviderHasCapability reports whether a worker of provider that sent a
// heartbeat since `since` reports the capability.
func (s *Store) ProviderHasCapability(ctx context.Context, provider, capability string, since time.Time) (bool, error) {
	ok, err := s.q.ProviderHasCapability(ctx, dbsqlc.ProviderHasCapabilityParams{Provider: provider, Capability: capability, Since: since})
	if err != nil {
		return false, mapErr("look up provider capabilities", err)
	}
	return ok, nil
}
