package agentruntime_test

import (
	"context"
	"testing"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/sandbox"
)

// budgetStore is a memStore whose budget is used up once `limit` model
// requests' usage was committed, as the ControlPlane reports it.
type budgetStore struct {
	*memStore
	limit, counted int
}

func (s *budgetStore) AppendWithTranscript(ctx context.Context, ms []agentruntime.TranscriptMessage, evs []agentruntime.NewEvent) ([]string, error) {
	for _, e := range evs {
		if e.Usage != nil {
			s.counted++
		}
	}
	return s.memStore.AppendWithTranscript(ctx, ms, evs)
}

func (s *budgetStore) BudgetExhausted() bool { return s.counted >= s.limit }

// TestBudgetStopsBeforeTheNextModelRequest: the span end carries the
// model's usage, and once the store says the budget is used up no further
// model request is made: the tool the model asked for still runs and its
// result is kept in the transcript, then the turn ends budget_reached.
func TestBudgetStopsBeforeTheNextModelRequest(t *testing.T) {
	t.Parallel()
	box, tc := bashSandbox(t, "sess_budget")
	fake := modelfake.New()
	var calls int
	var reported []model.Usage
	fake.SetObserver(func(c modelfake.Call) { calls++; reported = append(reported, c.Response.Usage) })
	store := &budgetStore{memStore: newMemStore(), limit: 2}
	core := &agentruntime.Core{Model: fake, Store: store}
	agent := &agentruntime.Agent{ID: "agent_1"}
	agent.Model.ID = "claude-sonnet-4-5"
	text := "#tool bash {\"command\":\"echo 1\"}\n#tool bash {\"command\":\"echo 2\"}\n#tool bash {\"command\":\"echo 3\"}\n#usage input=100 output=7"
	msg := model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: text}}}
	res, err := core.Run(t.Context(), &agentruntime.Run{TurnKey: "sevt_t", Agent: agent, Tools: tc, Conversation: []model.Message{msg},
		TurnMessages: 1, Unsaved: []agentruntime.TranscriptMessage{{Key: "sevt_t/0", Msg: msg}},
		Sandbox: func(context.Context) (sandbox.Sandbox, error) { return box, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != agentruntime.OutcomeBudgetReached || calls != 2 {
		t.Fatalf("outcome %s after %d model requests, want budget_reached after 2", res.Outcome, calls)
	}
	var ends []model.Usage
	results := 0
	for _, e := range store.events {
		if e.Type == "span.model_request_end" && e.Usage != nil {
			ends = append(ends, *e.Usage)
		}
		if e.Type == "agent.tool_result" {
			results++
		}
	}
	if len(ends) != 2 || ends[0] != reported[0] || ends[1] != reported[1] || ends[0].InputTokens != 100 {
		t.Fatalf("span ends carried %+v, want the fake's usage %+v", ends, reported)
	}
	if results != 2 || len(store.keys) != 5 {
		t.Fatalf("%d tool results, transcript %v; want both tool rounds' results stored (5 messages)", results, store.keys)
	}
}
