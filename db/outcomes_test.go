package db_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// outcomeOf is the session's only outcome.
func outcomeOf(t *testing.T, store *db.Store, sid string) *db.Outcome {
	t.Helper()
	all, err := store.OutcomesOfSessions(context.Background(), []string{sid})
	if err != nil {
		t.Fatal(err)
	}
	if len(all[sid]) != 1 {
		t.Fatalf("outcomes of %s: %v, want one", sid, all[sid])
	}
	return all[sid][0]
}

// turnEnd ends a turn as CompleteTurn does: events, then idle with
// end_turn, keyed by the turn's key; processed triggers marked.
func turnEnd(t *testing.T, store *db.Store, sid, turnKey string, at time.Time, processed []string, events ...db.NewEvent) {
	t.Helper()
	key := turnKey + "/status/end_turn"
	_, _, err := store.Append(context.Background(), sid, &db.AppendRequest{Now: at, Events: events, Processed: processed,
		Decide: func(cur *db.Session) (*db.Change, error) {
			if cur.Status == db.StatusIdle {
				return nil, nil
			}
			return &db.Change{To: db.StatusIdle, StopReason: json.RawMessage(`{"type":"end_turn"}`), EventID: "sevt_idle_" + turnKey, Key: key}, nil
		}})
	if err != nil {
		t.Fatalf("end turn %s: %v", turnKey, err)
	}
}

// pendingOf is the session's first pending trigger.
func pendingOf(t *testing.T, store *db.Store, sid string, at time.Time) db.Event {
	t.Helper()
	p, err := store.SessionPendingTriggers(context.Background(), sid, at)
	if err != nil || len(p) == 0 {
		t.Fatalf("pending triggers of %s: %v (%v)", sid, p, err)
	}
	return p[0]
}

// verdictEvent is a grader's span.outcome_evaluation_end.
func verdictEvent(start db.Event, o *db.Outcome, result string) db.NewEvent {
	body, _ := json.Marshal(map[string]any{"outcome_id": o.ID, "iteration": o.Iteration, "outcome_evaluation_start_id": start.ID,
		"result": result, "explanation": "because " + result, "usage": map[string]int{"input_tokens": 1}})
	return db.NewEvent{ID: "sevt_end_" + start.ID, Type: db.EvaluationEndType, Body: body, Key: db.EvaluationEndKey(start.ID)}
}

// TestOutcomeLoop walks an outcome through its loop as the api-server and
// a worker drive it, each step retried as a worker retries its calls: a
// retry never ends a turn twice, never makes the session idle while the
// loop goes on, never starts a second evaluation.
func TestOutcomeLoop(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	sid := "sesn_outc00000000000000000001"
	def := db.NewEvent{ID: "sevt_define", Type: db.DefineOutcomeType, Pending: true,
		Body: json.RawMessage(`{"outcome_id":"outc_1","description":"write it","rubric":{"type":"text","content":"r"},"max_iterations":2}`)}
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: sid, AgentID: "agent_a", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: t0},
		&db.AppendRequest{Now: t0, Events: []db.NewEvent{def}, Decide: func(*db.Session) (*db.Change, error) {
			return &db.Change{To: db.StatusRunning, EventID: "sevt_running", Wake: true}, nil
		}}); err != nil {
		t.Fatal(err)
	}
	if o, s := outcomeOf(t, store, sid), sessionStatus(t, store, sid); o.Result != db.OutcomeRunning || s.OutcomeID == nil || *s.OutcomeID != "outc_1" {
		t.Fatalf("after the define: outcome %+v, session's outcome %v", o, s.OutcomeID)
	}
	at := t0
	twice := func(f func()) { at = at.Add(time.Second); f(); at = at.Add(time.Second); f() }
	trigger := "sevt_define"
	for iteration := range 2 {
		// The agent's turn ends: the evaluation starts, the session runs on.
		twice(func() { turnEnd(t, store, sid, trigger, at, []string{trigger}) })
		o := outcomeOf(t, store, sid)
		start := pendingOf(t, store, sid, at)
		if s := sessionStatus(t, store, sid); s.Status != db.StatusRunning || o.Result != db.OutcomeEvaluating ||
			start.Type != db.EvaluationStartType || o.EvaluationStartID == nil || *o.EvaluationStartID != start.ID || o.Iteration != iteration {
			t.Fatalf("iteration %d after the turn: session %s, outcome %+v, pending %s", iteration, s.Status, o, start.Type)
		}
		// The grader's verdict: a revision (the last one is
		// max_iterations_reached), pending as the next turn's trigger.
		twice(func() {
			turnEnd(t, store, sid, start.ID, at, []string{start.ID}, verdictEvent(start, o, db.OutcomeNeedsRevision))
		})
		revision := pendingOf(t, store, sid, at)
		if s := sessionStatus(t, store, sid); s.Status != db.StatusRunning || revision.Type != db.EvaluationEndType {
			t.Fatalf("iteration %d after the verdict: session %s, pending %s", iteration, s.Status, revision.Type)
		}
		trigger = revision.ID
	}
	o := outcomeOf(t, store, sid)
	last := pendingOf(t, store, sid, at)
	if o.Result != db.OutcomeMaxIterations || o.CompletedAt == nil || o.Iteration != 1 || !strings.Contains(string(last.Body), `"max_iterations_reached"`) {
		t.Fatalf("after the last verdict: outcome %+v, trigger %s", o, last.Body)
	}
	// The agent's acknowledgment ends the loop.
	twice(func() { turnEnd(t, store, sid, trigger, at, []string{trigger}) })
	s := sessionStatus(t, store, sid)
	if s.Status != db.StatusIdle || s.OutcomeID != nil {
		t.Fatalf("after the loop: session %s, outcome %v", s.Status, s.OutcomeID)
	}
	counts := map[string]int{}
	for _, ev := range threadEvents(t, store, sid) {
		counts[ev.Type]++
	}
	if counts[db.EvaluationStartType] != 2 || counts[db.EvaluationEndType] != 2 || counts["session.status_idle"] != 1 {
		t.Fatalf("events %v: want 2 evaluations and one idle", counts)
	}
}

// TestOutcomeInterruptedWhileQueued: an outcome defined behind a running
// turn is pending; an interrupt ends it; when its event is taken from the
// queue later it stays ended, and the session has no active outcome.
func TestOutcomeInterruptedWhileQueued(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC)
	sid := "sesn_outc00000000000000000002"
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: sid, AgentID: "agent_a", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: t0}, nil); err != nil {
		t.Fatal(err)
	}
	running(t, store, sid, t0)
	def := db.NewEvent{ID: "sevt_define2", Type: db.DefineOutcomeType, Pending: true, Queued: true,
		Body: json.RawMessage(`{"outcome_id":"outc_2","description":"d","rubric":{"type":"text","content":"r"},"max_iterations":3}`)}
	if _, _, err := store.Append(ctx, sid, &db.AppendRequest{Now: t0.Add(time.Second), Events: []db.NewEvent{def}}); err != nil {
		t.Fatal(err)
	}
	if o := outcomeOf(t, store, sid); o.Result != db.OutcomePending {
		t.Fatalf("queued outcome: %+v, want pending", o)
	}
	if _, _, err := store.Append(ctx, sid, &db.AppendRequest{Now: t0.Add(2 * time.Second),
		Events: []db.NewEvent{{ID: "sevt_interrupt2", Type: "user.interrupt", Body: json.RawMessage(`{}`), Pending: true}}}); err != nil {
		t.Fatal(err)
	}
	turnEnd(t, store, sid, "turn1", t0.Add(3*time.Second), []string{"sevt_interrupt2"})
	if _, err := store.SessionPendingTriggers(ctx, sid, t0.Add(4*time.Second)); err != nil { // takes the define from the queue
		t.Fatal(err)
	}
	o, s := outcomeOf(t, store, sid), sessionStatus(t, store, sid)
	if o.Result != db.OutcomeInterrupted || o.CompletedAt == nil || s.OutcomeID != nil {
		t.Fatalf("after the interrupt and the take: outcome %+v, session's outcome %v; want interrupted and none active", o, s.OutcomeID)
	}
}
