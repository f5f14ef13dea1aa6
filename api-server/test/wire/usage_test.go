package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// Public list prices of claude-sonnet-4-5 in nano-USD per token ($ per
// million tokens × 1000): input $3, output $15, cache writes (5 minutes)
// $3.75, cache reads $0.30.
const (
	sonnetInput   = 3000
	sonnetOutput  = 15000
	sonnetWrite5m = 3750
	sonnetRead    = 300
)

// pricedSession creates a session whose agent uses a priced model id (the
// fake model answers whatever id the agent names), with a budget when
// budgetCents is not empty.
func (e *turnEnv) pricedSession(t *testing.T, model, budgetCents string) (string, error) {
	t.Helper()
	ctx := context.Background()
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "usage",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: model}, Tools: toolset})
	if err != nil {
		t.Fatal(err)
	}
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("usage-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	p := anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID}
	if budgetCents != "" {
		p.Budget = anthropic.BetaManagedAgentsBudgetLimitParam{MaxListCost: anthropic.BetaMonetaryAmountParam{Amount: budgetCents, Currency: "USD"}}
	}
	s, err := e.client.Beta.Sessions.New(ctx, p)
	if err != nil {
		return "", err
	}
	return s.ID, nil
}

// spanUsage sums the model_usage the fake reported, as the SDK decodes the
// span.model_request_end events.
func spanUsage(t *testing.T, evs []streamed) (sum anthropic.BetaManagedAgentsSpanModelUsage, spans int) {
	t.Helper()
	for _, ev := range evs {
		if ev.Type != "span.model_request_end" {
			continue
		}
		var end anthropic.BetaManagedAgentsSpanModelRequestEndEvent
		if err := json.Unmarshal([]byte(ev.Raw), &end); err != nil {
			t.Fatal(err)
		}
		u := end.ModelUsage
		sum.InputTokens += u.InputTokens
		sum.OutputTokens += u.OutputTokens
		sum.CacheReadInputTokens += u.CacheReadInputTokens
		sum.CacheCreationInputTokens += u.CacheCreationInputTokens
		spans++
	}
	return sum, spans
}

// usageEvent decodes the last session.usage of evs through the SDK's
// stream union.
func usageEvent(t *testing.T, evs []streamed) anthropic.BetaManagedAgentsSessionUsageEvent {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type != "session.usage" {
			continue
		}
		var u anthropic.BetaManagedAgentsStreamSessionEventsUnion
		if err := json.Unmarshal([]byte(evs[i].Raw), &u); err != nil {
			t.Fatal(err)
		}
		ev, ok := u.AsAny().(anthropic.BetaManagedAgentsSessionUsageEvent)
		if !ok {
			t.Fatalf("session.usage decodes as %T, want BetaManagedAgentsSessionUsageEvent: %s", u.AsAny(), evs[i].Raw)
		}
		return ev
	}
	t.Fatalf("no session.usage in %v", typesOf(evs))
	return anthropic.BetaManagedAgentsSessionUsageEvent{}
}

// TestUsageThroughSDK: after a two-round turn, Sessions.Get's usage is the
// sum of what the fake reported in every span.model_request_end, the list
// cost is the price table applied to it, the turn ended with a
// session.usage snapshot saying the same, and stats measure the time.
func TestUsageThroughSDK(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	id, err := e.pricedSession(t, "claude-sonnet-4-5-20250929", "")
	if err != nil {
		t.Fatal(err)
	}
	events := e.watch(t, id)
	e.say(t, id, "#tool bash {\"command\":\"echo hi\"}\n#usage input=1200 output=40 cache_write=1000\n#usage input=1500 output=25 cache_read=1000")
	evs := until(t, events, "session.status_idle", 30*time.Second)
	inOrder(t, evs, "span.model_request_end", "agent.tool_result", "span.model_request_end", "session.usage", "session.status_idle")
	if evs[len(evs)-2].Type != "session.usage" {
		t.Fatalf("the event before session.status_idle is %s, want session.usage", evs[len(evs)-2].Type)
	}
	e.say(t, id, "#reply second turn")
	evs = append(evs, until(t, events, "session.status_idle", 30*time.Second)...)
	sum, spans := spanUsage(t, evs)
	if spans != 3 || sum.InputTokens < 2700 || sum.CacheReadInputTokens != 1000 || sum.CacheCreationInputTokens != 1000 {
		t.Fatalf("fake reported %+v over %d requests; want 3 requests with the #usage numbers", sum, spans)
	}
	wantNanos := sum.InputTokens*sonnetInput + sum.OutputTokens*sonnetOutput + sum.CacheCreationInputTokens*sonnetWrite5m +
		sum.CacheReadInputTokens*sonnetRead
	wantCost := strconv.FormatInt(wantNanos/10_000_000, 10)

	s, err := e.client.Beta.Sessions.Get(context.Background(), id, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	u := s.Usage
	if u.InputTokens != sum.InputTokens || u.OutputTokens != sum.OutputTokens || u.CacheReadInputTokens != sum.CacheReadInputTokens ||
		u.CacheCreation.Ephemeral5mInputTokens != sum.CacheCreationInputTokens || u.CacheCreation.Ephemeral1hInputTokens != 0 {
		t.Fatalf("Sessions.Get usage = %s, want the sum of the spans' usage %+v (cache writes as 5-minute writes)", u.RawJSON(), sum)
	}
	if u.ListCost.Amount != wantCost || u.ListCost.Currency != "USD" || !u.JSON.ServerToolUse.Valid() {
		t.Fatalf("list_cost = %+v, want %s cents (%d nano-USD at Sonnet 4.5 list prices, rounded down)", u.ListCost, wantCost, wantNanos)
	}
	snap := usageEvent(t, evs)
	if snap.Usage.InputTokens != sum.InputTokens || snap.Usage.ListCost.Amount != wantCost || snap.JSON.Budget.Valid() {
		t.Fatalf("last session.usage = %s, want the session's totals and no budget", snap.RawJSON())
	}
	st := s.Stats
	if st.ActiveSeconds <= 0 || st.DurationSeconds < st.ActiveSeconds || u.ActiveSeconds != st.ActiveSeconds {
		t.Fatalf("stats %+v, usage.active_seconds %v; want time spent running > 0, at most the duration, the same in both", st, u.ActiveSeconds)
	}
	list, err := e.client.Beta.Sessions.List(context.Background(), anthropic.BetaSessionListParams{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ls := range list.Data {
		if ls.ID == id {
			found = true
			if ls.Usage.InputTokens != sum.InputTokens || ls.Usage.ListCost.Amount != wantCost {
				t.Fatalf("Sessions.List usage = %s, want what Sessions.Get shows", ls.Usage.RawJSON())
			}
		}
	}
	if !found {
		t.Fatalf("session %s not listed", id)
	}
}

// TestBudgetThroughSDK: a budget stops a multi-round turn before the model
// request that would follow the one that reached it, the session refuses
// new messages until the budget is raised, and then it continues.
func TestBudgetThroughSDK(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	// Each round reports a million input tokens ($3 at Sonnet 4.5 prices):
	// the second round reaches the $5 budget, the third is never asked.
	id, err := e.pricedSession(t, "claude-sonnet-4-5", "500")
	if err != nil {
		t.Fatal(err)
	}
	events := e.watch(t, id)
	e.say(t, id, "#tool bash {\"command\":\"echo 1\"}\n#tool bash {\"command\":\"echo 2\"}\n#tool bash {\"command\":\"echo 3\"}\n#usage input=1000000 output=0")
	evs := until(t, events, "session.status_idle", 30*time.Second)
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "budget_reached" {
		t.Fatalf("stop_reason %q, want budget_reached; events %v", typ, typesOf(evs))
	}
	var idle anthropic.BetaManagedAgentsSessionStatusIdleEvent
	if err := json.Unmarshal([]byte(evs[len(evs)-1].Raw), &idle); err != nil {
		t.Fatal(err)
	}
	if _, ok := idle.StopReason.AsAny().(anthropic.BetaManagedAgentsSessionBudgetReached); !ok {
		t.Fatalf("stop_reason decodes as %T, want BetaManagedAgentsSessionBudgetReached", idle.StopReason.AsAny())
	}
	if n, r := count(evs, "span.model_request_start"), count(evs, "agent.tool_result"); n != 2 || r != 2 {
		t.Fatalf("%d model requests and %d tool results before budget_reached, want 2 and 2 (no request after the budget was reached): %v", n, r, typesOf(evs))
	}
	snap := usageEvent(t, evs)
	if snap.Usage.ListCost.Amount != "600" || snap.Budget.MaxListCost.Amount != "500" || snap.Budget.Type != "limit" {
		t.Fatalf("session.usage = %s, want list cost 600 cents and the 500 cent budget", snap.RawJSON())
	}

	ctx := context.Background()
	_, err = e.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{userMessage("#reply more")}})
	apiErr := apiErrorWithStatus(t, err, 409)
	if !strings.Contains(apiErr.RawJSON(), "budget_reached") || !strings.Contains(apiErr.RawJSON(), `"conflict_error"`) {
		t.Fatalf("message after the budget was reached: %s; want a conflict_error naming budget_reached", apiErr.RawJSON())
	}
	budget := func(cents string) anthropic.BetaSessionUpdateParams {
		return anthropic.BetaSessionUpdateParams{Budget: anthropic.BetaManagedAgentsBudgetLimitParam{
			MaxListCost: anthropic.BetaMonetaryAmountParam{Amount: cents, Currency: "USD"}}}
	}
	_, err = e.client.Beta.Sessions.Update(ctx, id, budget("600"))
	if apiErr := apiErrorWithStatus(t, err, 400); !strings.Contains(apiErr.RawJSON(), "budget_not_raised") {
		t.Fatalf("a budget equal to the consumed cost: %s; want budget_not_raised", apiErr.RawJSON())
	}
	s, err := e.client.Beta.Sessions.Update(ctx, id, budget("1000"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Budget.MaxListCost.Amount != "1000" || s.Usage.ListCost.Amount != "600" {
		t.Fatalf("after raising: budget %s, usage %s", s.Budget.RawJSON(), s.Usage.RawJSON())
	}
	e.say(t, id, "#reply carried on\n#usage input=10 output=1")
	evs = until(t, events, "session.status_idle", 30*time.Second)
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" || resultText(last(evs, "agent.message")) != "carried on" {
		t.Fatalf("after raising the budget: stop_reason %q, events %v; want the turn to run to end_turn", typ, typesOf(evs))
	}

	// Removing the budget is allowed; adding one back is not.
	r := do(t, e.srv, "POST", "/v1/sessions/"+id, "application/json", []byte(`{"budget":null}`), nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"budget":null`) {
		t.Fatalf("remove budget: %d %s", r.status, r.body)
	}
	_, err = e.client.Beta.Sessions.Update(ctx, id, budget("2000"))
	if apiErr := apiErrorWithStatus(t, err, 400); !strings.Contains(apiErr.RawJSON(), "budget_create_only") {
		t.Fatalf("adding back a removed budget: %s; want budget_create_only", apiErr.RawJSON())
	}
}

// TestBudgetNeedsAPricedModel: a budget for a session whose model has no
// list price is refused with the reason model_not_budgetable.
func TestBudgetNeedsAPricedModel(t *testing.T) {
	t.Parallel()
	prices := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(prices, []byte("house-model-8:\n  input: 2\n  output: 8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, testserver.WithEnv("MANGO_MODEL_PRICES", prices))
	e := &turnEnv{srv: srv, client: newClient(t, srv)}
	_, err := e.pricedSession(t, "house-model-7", "100")
	apiErr := apiErrorWithStatus(t, err, 400)
	if !strings.Contains(apiErr.RawJSON(), "model_not_budgetable") || !strings.Contains(apiErr.RawJSON(), "house-model-7") ||
		!strings.Contains(apiErr.RawJSON(), `"invalid_request_error"`) {
		t.Fatalf("budget for an unpriced model: %s; want invalid_request_error model_not_budgetable naming the model", apiErr.RawJSON())
	}
	if _, err := e.pricedSession(t, "house-model-7", ""); err != nil {
		t.Fatalf("the same session without a budget: %v", err)
	}
	if _, err := e.pricedSession(t, "house-model-8", "100"); err != nil {
		t.Fatalf("a budget for a model priced by MANGO_MODEL_PRICES: %v", err)
	}
}

// TestBudgetWithAnUnpricedModel: a worker that runs another model than the
// agent's (MANGO_MODEL_ID) without a list price makes the cost
// unmeasurable: the turn stops budget_reached after the first request,
// raising the budget is refused (model_not_budgetable), and removing it
// lets the session continue.
func TestBudgetWithAnUnpricedModel(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	e.worker = startWorkerWith(t, srv, "wire-unpriced", e.root, map[string]string{"MANGO_MODEL_ID": "house-unpriced-9"})
	id, err := e.pricedSession(t, "claude-sonnet-4-5", "100")
	if err != nil {
		t.Fatal(err)
	}
	events := e.watch(t, id)
	e.say(t, id, "#tool bash {\"command\":\"echo 1\"}\n#tool bash {\"command\":\"echo 2\"}")
	evs := until(t, events, "session.status_idle", 30*time.Second)
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "budget_reached" || count(evs, "span.model_request_start") != 1 {
		t.Fatalf("stop_reason %q after %d model requests, want budget_reached after 1: %v", typ, count(evs, "span.model_request_start"), typesOf(evs))
	}
	ctx := context.Background()
	_, err = e.client.Beta.Sessions.Update(ctx, id, anthropic.BetaSessionUpdateParams{Budget: anthropic.BetaManagedAgentsBudgetLimitParam{
		MaxListCost: anthropic.BetaMonetaryAmountParam{Amount: "100000", Currency: "USD"}}})
	if apiErr := apiErrorWithStatus(t, err, 400); !strings.Contains(apiErr.RawJSON(), "model_not_budgetable") {
		t.Fatalf("raising the budget of a session with unpriced usage: %s; want model_not_budgetable", apiErr.RawJSON())
	}
	if r := do(t, e.srv, "POST", "/v1/sessions/"+id, "application/json", []byte(`{"budget":null}`), nil); r.status != 200 {
		t.Fatalf("remove budget: %d %s", r.status, r.body)
	}
	e.say(t, id, "#reply on without a budget")
	evs = until(t, events, "session.status_idle", 30*time.Second)
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" {
		t.Fatalf("after removing the budget: stop_reason %q, want end_turn", typ)
	}
}
