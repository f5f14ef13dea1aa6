package db

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// The order of a session's log, in one place.
//
// A session's events are listed, paged (by seq) and streamed (after a
// seq, Last-Event-ID included) in one order, seq, and processed_at never
// goes backwards along it: processed_at is the time an event took its
// place in the log, clamped to the newest event's (monotonic), so two
// replicas' clocks or two appends racing for the row lock cannot reorder
// it. Whether a worker has consumed a trigger is separate (taken_at).
//
// Triggers take their place when the session takes them up: at once on an
// idle session (and for interrupts and answers to a parked turn), but a
// user.message sent while a turn runs, or while earlier messages still
// wait, is queued outside the log (queue) and appended only when the
// session starts on it (SessionPendingTriggers). Until then the send
// call's answer shows it with processed_at null, and neither lists nor
// streams show it; afterwards it sits after the turn it waited for, as the
// agent saw it.

// monotonic returns req with Now no earlier than the session's newest
// event, so processed_at never goes backwards along seq.
func monotonic(req *AppendRequest, cur *Session) *AppendRequest {
	if cur.LastEventAt == nil || !req.Now.Before(*cur.LastEventAt) {
		return req
	}
	r := *req
	r.Now = *cur.LastEventAt
	return &r
}

// queuedEvent is ev as it waits outside the log from now on, until the
// session takes it up.
func queuedEvent(sessionID string, ev NewEvent, now time.Time) Event {
	body := ev.Body
	if len(body) == 0 {
		body = json.RawMessage(`{}`)
	}
	return Event{SessionID: sessionID, ID: ev.ID, Type: ev.Type, Body: body, CreatedAt: now}
}

// queue stores the queued event e (queuedEvent) outside the log until the
// session takes it up.
func queue(ctx context.Context, q *dbsqlc.Queries, e Event) error {
	return q.QueuedEventInsert(ctx, dbsqlc.QueuedEventInsertParams{SessionID: e.SessionID, ID: e.ID, Type: e.Type,
		Body: e.Body, CreatedAt: e.CreatedAt})
}

// inRequestOrder puts the events of an append's request first, in the
// request's order (queued ones are stored apart from the numbered ones),
// followed by those the append added (status and usage events).
func inRequestOrder(out []Event, req []NewEvent) []Event {
	queued := false
	for _, ev := range req {
		queued = queued || ev.Queued
	}
	if !queued {
		return out
	}
	byID := make(map[string]Event, len(out))
	for _, e := range out {
		byID[e.ID] = e
	}
	sorted := make([]Event, 0, len(out))
	for _, ev := range req {
		if e, ok := byID[ev.ID]; ok {
			sorted = append(sorted, e)
			delete(byID, ev.ID)
		}
	}
	for _, e := range out {
		if _, ok := byID[e.ID]; ok {
			sorted = append(sorted, e)
		}
	}
	return sorted
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

// ToolUseAnswer returns the agent.tool_use event toolUseID of a session
// (ErrNotFound when the session has no such event) and the event that
// answers it, a user.tool_result or agent.tool_result naming it as
// tool_use_id (nil while unanswered).
func (s *Store) ToolUseAnswer(ctx context.Context, sessionID, toolUseID string) (answer *Event, use *Event, err error) {
	row, err := s.q.ToolUseGet(ctx, dbsqlc.ToolUseGetParams{SessionID: sessionID, ID: toolUseID})
	if err != nil {
		return nil, nil, mapErr("get tool use", err)
	}
	u := eventFromRow(row)
	arow, err := s.q.ToolUseAnswerGet(ctx, dbsqlc.ToolUseAnswerGetParams{SessionID: sessionID, ToolUseID: toolUseID})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &u, nil
	}
	if err != nil {
		return nil, nil, mapErr("get tool use answer", err)
	}
	a := eventFromRow(arow)
	return &a, &u, nil
}
