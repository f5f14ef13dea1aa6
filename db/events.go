package db

import (
	"context"
	"encoding/json"
	"time"

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

// queue stores ev outside the log until the session takes it up.
func queue(ctx context.Context, q *dbsqlc.Queries, sessionID string, ev NewEvent, now time.Time) (Event, error) {
	body := ev.Body
	if len(body) == 0 {
		body = json.RawMessage(`{}`)
	}
	if err := q.QueuedEventInsert(ctx, dbsqlc.QueuedEventInsertParams{SessionID: sessionID, ID: ev.ID, Type: ev.Type,
		Body: body, CreatedAt: now}); err != nil {
		return Event{}, err
	}
	return Event{SessionID: sessionID, ID: ev.ID, Type: ev.Type, Body: body, CreatedAt: now}, nil
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
