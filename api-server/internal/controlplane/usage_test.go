package controlplane_test

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

func spanEnd(key string, u *pb.ModelUsage) *pb.NewEvent {
	return &pb.NewEvent{Key: key, Type: "span.model_request_end", Usage: u,
		Body: `{"model_request_start_id":"sevt_x","is_error":false,"model_usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}`}
}

// TestUsageAccounting: the usage a worker reports with an event is priced
// and added in the append that inserts the event, a retried append adds
// nothing, the response says when the budget is used up, and the turn's
// end carries a session.usage snapshot before the status event.
func TestUsageAccounting(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	sid, _ := e.session(t, true)
	oneCent := int64(1)
	// Give the session a one-cent budget (sessions get it at creation
	// through the HTTP API; the store is the same).
	if _, err := e.store.Pool().Exec(context.Background(), `UPDATE sessions SET budget_max_cents = $2 WHERE id = $1`, sid, oneCent); err != nil {
		t.Fatal(err)
	}
	// claude-sonnet-4-5: $3 input, $15 output, $3.75 5m writes, $6 1h
	// writes, $0.30 reads per million tokens, $10 per thousand searches.
	first := &pb.ModelUsage{Model: "claude-sonnet-4-5-20250929", InputTokens: 1000, OutputTokens: 100, CacheReadInputTokens: 10,
		CacheCreation_5MInputTokens: 20, CacheCreation_1HInputTokens: 30, WebSearchRequests: 0, WebFetchRequests: 2}
	wantNanos := int64(1000*3000 + 100*15000 + 10*300 + 20*3750 + 30*6000)
	for i := range 2 {
		resp, err := e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid, Events: []*pb.NewEvent{spanEnd("t1/0/span_end", first)}})
		if err != nil {
			t.Fatalf("AppendEvents %d: %v", i, err)
		}
		if resp.BudgetExhausted {
			t.Fatalf("append %d: budget exhausted at %d nano-USD of a 1 cent budget", i, wantNanos)
		}
	}
	sess, err := e.store.SessionGet(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	want := db.Usage{InputTokens: 1000, OutputTokens: 100, CacheReadInputTokens: 10, CacheCreation5m: 20, CacheCreation1h: 30,
		WebFetchRequests: 2, ListCostNanos: wantNanos}
	if sess.Usage != want {
		t.Fatalf("usage after an append and its retry = %+v, want %+v (counted once)", sess.Usage, want)
	}
	second := &pb.ModelUsage{Model: "claude-sonnet-4-5", InputTokens: 2000}
	resp, err := e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid, Events: []*pb.NewEvent{spanEnd("t1/1/span_end", second)}})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.BudgetExhausted {
		t.Fatalf("budget not reported exhausted at %d nano-USD of a 1 cent budget", wantNanos+2000*3000)
	}
	run, err := e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid})
	if err != nil || !run.BudgetExhausted {
		t.Fatalf("GetRun budget_exhausted = %v, %v; want true", run.GetBudgetExhausted(), err)
	}
	done, err := e.client.CompleteTurn(ctx, &pb.CompleteTurnRequest{SessionId: sid, Outcome: pb.TurnOutcome_TURN_OUTCOME_BUDGET_REACHED, TurnKey: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if !jsonEqual(done.StopReason, `{"type":"budget_reached"}`) || done.Status != pb.SessionStatus_SESSION_STATUS_IDLE {
		t.Fatalf("CompleteTurn budget_reached -> %v %s, want idle budget_reached", done.Status, done.StopReason)
	}
	evs, _, err := e.store.EventList(context.Background(), sid, db.EventListParams{Descending: true, Limit: 2})
	if err != nil || len(evs) != 2 || evs[0].Type != "session.status_idle" || evs[1].Type != "session.usage" {
		t.Fatalf("last events = %+v, %v; want session.usage then session.status_idle", evs, err)
	}
	var snap struct {
		Usage struct {
			InputTokens int64                             `json:"input_tokens"`
			ListCost    struct{ Amount, Currency string } `json:"list_cost"`
		}
		Budget struct {
			Type        string
			MaxListCost struct{ Amount string } `json:"max_list_cost"`
		}
	}
	if err := json.Unmarshal(evs[1].Body, &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Usage.InputTokens != 3000 || snap.Usage.ListCost.Amount != "1" || snap.Usage.ListCost.Currency != "USD" ||
		snap.Budget.Type != "limit" || snap.Budget.MaxListCost.Amount != "1" {
		t.Fatalf("session.usage = %s; want 3000 input tokens, list cost 1 cent (rounded down from %d nano-USD), budget 1 cent",
			evs[1].Body, wantNanos+2000*3000)
	}
	// A retried end adds neither a status nor a usage event.
	if _, err := e.client.CompleteTurn(ctx, &pb.CompleteTurnRequest{SessionId: sid, Outcome: pb.TurnOutcome_TURN_OUTCOME_BUDGET_REACHED, TurnKey: "t1"}); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, `SELECT count(*) FROM events WHERE session_id = $1 AND type = 'session.usage'`, sid); n != 1 {
		t.Fatalf("session.usage events after a retried end = %d, want 1", n)
	}

	// A model without a price: the tokens count, the cost cannot.
	sid2, _ := e.session(t, true)
	if _, err := e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid2,
		Events: []*pb.NewEvent{spanEnd("t/span_end", &pb.ModelUsage{Model: "no-such-model", InputTokens: 5})}}); err != nil {
		t.Fatal(err)
	}
	s2, err := e.store.SessionGet(context.Background(), sid2)
	if err != nil || s2.Usage.InputTokens != 5 || s2.Usage.ListCostNanos != 0 || !s2.Usage.Unpriced {
		t.Fatalf("usage of an unpriced model = %+v, %v; want 5 tokens, no cost, unpriced", s2.Usage, err)
	}
	_, err = e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid2,
		Events: []*pb.NewEvent{spanEnd("t/bad", &pb.ModelUsage{Model: "claude-sonnet-4-5", OutputTokens: -1})}})
	wantCode(t, "negative usage", err, codes.InvalidArgument)
}
