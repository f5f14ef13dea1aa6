package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

func createSession(t *testing.T, store *db.Store, id string, now time.Time, budgetCents *int64) {
	t.Helper()
	if _, _, err := store.SessionCreate(context.Background(), db.SessionCreateParams{ID: id, AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: now, BudgetMaxCents: budgetCents}, nil); err != nil {
		t.Fatalf("create session %s: %v", id, err)
	}
}

func setStatus(t *testing.T, store *db.Store, id string, to db.Status, at time.Time, turnEnd func(*db.Session) *db.NewEvent) []db.Event {
	t.Helper()
	_, evs, err := store.Append(context.Background(), id, &db.AppendRequest{Now: at, TurnEnd: turnEnd,
		Decide: func(*db.Session) (*db.Change, error) {
			return &db.Change{To: to, EventID: "sevt_" + string(to) + at.Format("150405.000000")}, nil
		}})
	if err != nil {
		t.Fatalf("move %s to %s: %v", id, to, err)
	}
	return evs
}

// TestUsageCountedOnceByKey: usage carried by an event is added to the
// session's totals in the append that inserts the event, and a retried
// append of the same keys adds nothing.
func TestUsageCountedOnceByKey(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	now := time.Now().UTC()
	createSession(t, store, "sesn_usage", now, nil)
	u := db.Usage{InputTokens: 1200, OutputTokens: 40, CacheReadInputTokens: 7, CacheCreation5m: 100, CacheCreation1h: 50,
		WebSearchRequests: 2, WebFetchRequests: 1, ListCostNanos: 4_321_987}
	batch := func() *db.AppendRequest {
		return &db.AppendRequest{Now: now, Events: []db.NewEvent{
			{ID: "sevt_u1", Type: "agent.message", Body: json.RawMessage(`{"content":[]}`), Key: "t/1/message"},
			{ID: "sevt_u2", Type: "span.model_request_end", Body: json.RawMessage(`{}`), Key: "t/1/span_end", Usage: &u},
		}}
	}
	for i := range 2 {
		sess, _, err := store.Append(ctx, "sesn_usage", batch())
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if sess.Usage != u {
			t.Fatalf("usage after append %d = %+v, want %+v (counted once)", i, sess.Usage, u)
		}
	}
	second := db.Usage{InputTokens: 1, OutputTokens: 2, ListCostNanos: 3}
	if _, _, err := store.Append(ctx, "sesn_usage", &db.AppendRequest{Now: now, Events: []db.NewEvent{
		{ID: "sevt_u3", Type: "span.model_request_end", Body: json.RawMessage(`{}`), Key: "t/2/span_end", Usage: &second},
	}}); err != nil {
		t.Fatalf("append a second request's usage: %v", err)
	}
	got, err := store.SessionGet(ctx, "sesn_usage")
	if err != nil {
		t.Fatal(err)
	}
	want := u
	want.Add(second)
	if got.Usage != want {
		t.Fatalf("stored usage = %+v, want the sum %+v", got.Usage, want)
	}
}

// TestActiveTimeAndTurnEnd: time in running status accumulates across
// turns; the turn-end hook's event comes just before the status event, and
// sees the usage of its own request; the duration freezes at termination.
func TestActiveTimeAndTurnEnd(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	createSession(t, store, "sesn_clock", t0, nil)
	setStatus(t, store, "sesn_clock", db.StatusRunning, t0.Add(time.Second), nil)
	calls := 0
	hook := func(cur *db.Session) *db.NewEvent {
		calls++
		body, _ := json.Marshal(map[string]any{"input": cur.Usage.InputTokens, "active": cur.ActiveSeconds(t0.Add(3 * time.Second))})
		return &db.NewEvent{ID: "sevt_usage1", Type: "session.usage", Body: body}
	}
	u := db.Usage{InputTokens: 10}
	_, evs, err := store.Append(ctx, "sesn_clock", &db.AppendRequest{Now: t0.Add(3 * time.Second), TurnEnd: hook,
		Events: []db.NewEvent{{ID: "sevt_end1", Type: "span.model_request_end", Body: json.RawMessage(`{}`), Key: "k/end", Usage: &u}},
		Decide: func(*db.Session) (*db.Change, error) {
			return &db.Change{To: db.StatusIdle, EventID: "sevt_idle1"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if len(types) != 3 || types[1] != "session.usage" || types[2] != "session.status_idle" {
		t.Fatalf("events = %v, want span end, session.usage, session.status_idle", types)
	}
	if string(evs[1].Body) != `{"active":2,"input":10}` {
		t.Fatalf("usage event body = %s, want the usage including this request and 2 active seconds", evs[1].Body)
	}
	// Idle → running is not a turn end: no hook call.
	setStatus(t, store, "sesn_clock", db.StatusRunning, t0.Add(10*time.Second), hook)
	if calls != 1 {
		t.Fatalf("turn-end hook called %d times, want 1 (only when a turn ends)", calls)
	}
	mid, err := store.SessionGet(ctx, "sesn_clock")
	if err != nil {
		t.Fatal(err)
	}
	if got := mid.ActiveSeconds(t0.Add(10500 * time.Millisecond)); got != 2.5 {
		t.Fatalf("active seconds half a second into the second turn = %v, want 2.5", got)
	}
	setStatus(t, store, "sesn_clock", db.StatusTerminated, t0.Add(14*time.Second), nil)
	end, err := store.SessionGet(ctx, "sesn_clock")
	if err != nil {
		t.Fatal(err)
	}
	later := t0.Add(time.Hour)
	if a, d := end.ActiveSeconds(later), end.DurationSeconds(later); a != 6 || d != 14 {
		t.Fatalf("after termination: active %v, duration %v; want 6 (2+4 running) and 14 (frozen at termination)", a, d)
	}
	idle := &db.Session{Status: db.StatusIdle, CreatedAt: t0}
	if d := idle.DurationSeconds(t0.Add(90 * time.Second)); d != 90 {
		t.Fatalf("duration of a live session = %v, want 90 (up to now)", d)
	}
}

// TestBudget: a budget is exhausted when the list cost reaches it or
// unpriced usage was counted; updates follow the public API's rules and
// are stored.
func TestBudget(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	now := time.Now().UTC()
	two := int64(2)
	createSession(t, store, "sesn_budget", now, &two)
	createSession(t, store, "sesn_nobudget", now, nil)
	add := func(id, key string, u db.Usage) *db.Session {
		t.Helper()
		sess, _, err := store.Append(ctx, id, &db.AppendRequest{Now: now, Events: []db.NewEvent{
			{ID: "sevt_" + id + key, Type: "span.model_request_end", Body: json.RawMessage(`{}`), Key: key, Usage: &u}}})
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	if s := add("sesn_budget", "a", db.Usage{ListCostNanos: 2*db.NanosPerCent - 1}); s.BudgetExhausted() {
		t.Fatalf("exhausted one nano-dollar below the budget")
	}
	if s := add("sesn_budget", "b", db.Usage{ListCostNanos: 1}); !s.BudgetExhausted() {
		t.Fatalf("not exhausted at exactly the budget: %+v", s.Usage)
	}
	if s := add("sesn_nobudget", "a", db.Usage{Unpriced: true, ListCostNanos: 1 << 40}); s.BudgetExhausted() {
		t.Fatalf("a session without a budget is never exhausted")
	}
	update := func(id string, cents *int64) (*db.Session, error) {
		return store.SessionUpdate(ctx, id, now, func(cur *db.Session) (*db.Session, error) {
			next := *cur
			return &next, db.CheckBudgetUpdate(&next, cents)
		})
	}
	if _, err := update("sesn_nobudget", &two); !errors.Is(err, db.ErrBudgetCreateOnly) {
		t.Fatalf("adding a budget = %v, want ErrBudgetCreateOnly", err)
	}
	if _, err := update("sesn_budget", &two); !errors.Is(err, db.ErrBudgetNotRaised) {
		t.Fatalf("a budget equal to the consumed cost = %v, want ErrBudgetNotRaised", err)
	}
	three := int64(3)
	s, err := update("sesn_budget", &three)
	if err != nil || s.BudgetExhausted() || *s.BudgetMaxCents != 3 {
		t.Fatalf("raise to 3 cents = %+v, %v; want stored and not exhausted", s, err)
	}
	if s, err = update("sesn_budget", nil); err != nil || s.HasBudget() || !s.BudgetRemoved {
		t.Fatalf("remove = %+v, %v; want no budget, marked removed", s, err)
	}
	if _, err := update("sesn_budget", &three); !errors.Is(err, db.ErrBudgetCreateOnly) {
		t.Fatalf("adding back a removed budget = %v, want ErrBudgetCreateOnly", err)
	}
}
