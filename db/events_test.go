package db_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// TestProcessedAtNeverGoesBack: an append stamped earlier than the newest
// event (another replica's clock, or a race for the row lock) takes the
// newest event's time, so processed_at follows seq.
func TestProcessedAtNeverGoesBack(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	wakeSession(t, store, "sesn_clock", 0)
	later := time.Now().UTC().Truncate(time.Microsecond)
	for i, now := range []time.Time{later, later.Add(-time.Minute), later.Add(time.Second)} {
		if _, _, err := store.Append(ctx, "sesn_clock", &db.AppendRequest{Now: now,
			Events: []db.NewEvent{{ID: "sevt_clock_" + string(rune('a'+i)), Type: "span.model_request_start", Body: json.RawMessage(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	evs, _, err := store.EventList(ctx, "sesn_clock", db.EventListParams{Limit: 10})
	if err != nil || len(evs) != 3 {
		t.Fatalf("list = %v, %v", evs, err)
	}
	want := []time.Time{later, later, later.Add(time.Second)}
	for i, e := range evs {
		if e.ProcessedAt == nil || !e.ProcessedAt.Equal(want[i]) {
			t.Errorf("event %d processed_at %v, want %v", i, e.ProcessedAt, want[i])
		}
	}
}

// TestQueuedMessagesJoinTheLogInOrder: queued messages stay out of the log
// until the session takes them up, one at a time, oldest first, each when
// no trigger in the log is left to take.
func TestQueuedMessagesJoinTheLogInOrder(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	wakeSession(t, store, "sesn_queue", 1) // one message in the log, not taken
	now := time.Now().UTC().Truncate(time.Microsecond)
	_, sent, err := store.Append(ctx, "sesn_queue", &db.AppendRequest{Now: now, Events: []db.NewEvent{
		{ID: "sevt_q1", Type: "user.message", Body: json.RawMessage(`{"content":[]}`), Queued: true},
		{ID: "sevt_q2", Type: "user.message", Body: json.RawMessage(`{"content":[]}`), Queued: true},
	}})
	if err != nil || len(sent) != 2 || sent[0].ID != "sevt_q1" || sent[0].Seq != 0 || sent[0].ProcessedAt != nil {
		t.Fatalf("queued append = %+v, %v; want both returned unnumbered, processed_at null", sent, err)
	}
	if evs, _, _ := store.EventList(ctx, "sesn_queue", db.EventListParams{Limit: 10}); len(evs) != 1 {
		t.Fatalf("log holds %d events, want only the first message", len(evs))
	}
	ids := func(evs []db.Event) (out []string) {
		for _, e := range evs {
			out = append(out, e.ID)
		}
		return out
	}
	// The log's trigger first: nothing is taken from the queue yet.
	pending, err := store.SessionPendingTriggers(ctx, "sesn_queue", now)
	if err != nil || len(pending) != 3 || pending[0].ID != "sevt_sesn_queue_0" || pending[1].Seq != 0 {
		t.Fatalf("pending = %v, %v; want the log's message, then q1 and q2 still queued", ids(pending), err)
	}
	if _, err := store.EventsMarkProcessed(ctx, "sesn_queue", []string{"sevt_sesn_queue_0"}, now); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"sevt_q1", "sevt_q2"} {
		took := now.Add(time.Duration(i+1) * time.Second)
		for range 2 { // asking again takes nothing more
			pending, err = store.SessionPendingTriggers(ctx, "sesn_queue", took)
			if err != nil || len(pending) == 0 || pending[0].ID != want || pending[0].Seq != int64(2+i) ||
				pending[0].ProcessedAt == nil || !pending[0].ProcessedAt.Equal(took) {
				t.Fatalf("pending = %+v, %v; want %s taken into the log at seq %d, processed at %v", pending, err, want, 2+i, took)
			}
		}
		if _, err := store.EventsMarkProcessed(ctx, "sesn_queue", []string{want}, took); err != nil {
			t.Fatal(err)
		}
	}
	if pending, err = store.SessionPendingTriggers(ctx, "sesn_queue", now.Add(time.Minute)); err != nil || len(pending) != 0 {
		t.Fatalf("pending at the end = %v, %v; want none", ids(pending), err)
	}
	if s, err := store.SessionGet(ctx, "sesn_queue"); err != nil || s.Queued != 0 {
		t.Errorf("session queued = %v (%v), want 0", s.Queued, err)
	}
}
