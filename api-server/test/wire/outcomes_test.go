package wire

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
)

// The scripted grader: a rubric's "#grade <needle> <explanation>" line
// makes the fake model's grader answer satisfied when the agent's work
// contains the needle, needs_revision with the explanation otherwise
// (docs/fake-model.md). The agent's revision turn, unscripted, echoes the
// grader's explanation; an explanation that names the needle is thus met
// at the second evaluation, one that does not is never met.

func defineOutcome(desc string, rubric anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion, maxIter int64) anthropic.BetaManagedAgentsEventParamsUnion {
	p := anthropic.BetaManagedAgentsUserDefineOutcomeEventParams{Description: desc, Rubric: rubric}
	if maxIter > 0 {
		p.MaxIterations = anthropic.Int(maxIter)
	}
	return anthropic.BetaManagedAgentsEventParamsUnion{OfUserDefineOutcome: &p}
}

func textRubric(content string) anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion {
	return anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{OfText: &anthropic.BetaManagedAgentsTextRubricParams{Content: content}}
}

// outcomeEnv is a server, a worker whose fake model records its requests,
// and an SDK client.
type outcomeEnv struct {
	*turnEnv
	record string
}

func newOutcomeEnv(t *testing.T) *outcomeEnv {
	t.Helper()
	srv := testserver.Start(t)
	e := &outcomeEnv{turnEnv: &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}, record: filepath.Join(t.TempDir(), "requests.jsonl")}
	e.worker = startWorkerWith(t, srv, "wire-outcomes", e.root, map[string]string{"MANGO_FAKE_MODEL_RECORD": e.record})
	return e
}

// send sends events to a session through the SDK.
func (e *outcomeEnv) send(t *testing.T, sid string, events ...anthropic.BetaManagedAgentsEventParamsUnion) {
	t.Helper()
	if _, err := e.client.Beta.Sessions.Events.Send(context.Background(), sid, anthropic.BetaSessionEventSendParams{Events: events}); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// outcome is the session's only outcome_evaluations entry, as the SDK
// decodes Sessions.Get.
func (e *outcomeEnv) outcome(t *testing.T, sid string) anthropic.BetaManagedAgentsOutcomeEvaluationResource {
	t.Helper()
	s, err := e.client.Beta.Sessions.Get(context.Background(), sid, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.OutcomeEvaluations) != 1 {
		t.Fatalf("outcome_evaluations = %s, want one", s.RawJSON())
	}
	return s.OutcomeEvaluations[0]
}

// evaluationEnds decodes the span.outcome_evaluation_end events through
// the SDK.
func evaluationEnds(t *testing.T, evs []streamed) []anthropic.BetaManagedAgentsSpanOutcomeEvaluationEndEvent {
	t.Helper()
	var out []anthropic.BetaManagedAgentsSpanOutcomeEvaluationEndEvent
	for _, ev := range evs {
		if ev.Type != "span.outcome_evaluation_end" {
			continue
		}
		var end anthropic.BetaManagedAgentsSpanOutcomeEvaluationEndEvent
		if err := json.Unmarshal([]byte(ev.Raw), &end); err != nil {
			t.Fatalf("decode %s: %v", ev.Raw, err)
		}
		out = append(out, end)
	}
	return out
}

// recordedWith are the recorded model requests whose messages contain
// marker, as JSON text, in order.
func recordedWith(t *testing.T, path, marker string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the model's record: %v", err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			System   string          `json:"system"`
			Messages json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("decode a recorded request: %v", err)
		}
		if joined := r.System + "\n" + string(r.Messages); strings.Contains(joined, marker) {
			out = append(out, joined)
		}
	}
	return out
}

// TestOutcomes runs the outcome loop through the SDK with a scripted
// agent and a scripted grader.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	e := newOutcomeEnv(t)
	t.Run("revision", func(t *testing.T) { t.Parallel(); outcomeRevised(t, e) })
	t.Run("never met", func(t *testing.T) { t.Parallel(); outcomeNeverMet(t, e) })
	t.Run("file rubric", func(t *testing.T) { t.Parallel(); outcomeFileRubric(t, e) })
	t.Run("interrupted", func(t *testing.T) { t.Parallel(); outcomeInterrupted(t, e) })
	t.Run("budget", func(t *testing.T) { t.Parallel(); outcomeBudget(t, e) })
	t.Run("grader fails", func(t *testing.T) { t.Parallel(); outcomeGraderFails(t, e) })
	t.Run("validation", func(t *testing.T) { t.Parallel(); outcomeValidation(t, e) })
	t.Run("outputs", func(t *testing.T) { t.Parallel(); outcomeOutputs(t, e) })
	t.Run("interrupted at work", func(t *testing.T) { t.Parallel(); outcomeInterruptedAtWork(t, e) })
}

// outcomeRevised: the first evaluation asks for a revision, the second is
// satisfied; the events come in order, the grader's explanation reaches
// the agent's second request, the outcome reads satisfied at iteration 1
// (the second evaluation).
func outcomeRevised(t *testing.T, e *outcomeEnv) {
	id := e.session(t, nil)
	events := e.watch(t, id)
	e.send(t, id, defineOutcome("#reply draft REV1", textRubric("# Report rubric\n#grade HEADLINE Add a line with the word HEADLINE."), 0))
	evs := until(t, events, "session.status_idle", time.Minute)
	inOrder(t, evs, "user.define_outcome", "session.status_running", "agent.message",
		"span.outcome_evaluation_start", "span.outcome_evaluation_ongoing", "span.outcome_evaluation_end",
		"agent.message", "span.outcome_evaluation_start", "span.outcome_evaluation_ongoing", "span.outcome_evaluation_end",
		"session.status_idle")
	if n := count(evs, "session.status_idle"); n != 1 {
		t.Errorf("%d session.status_idle events, want 1: the session is idle only when the loop ended", n)
	}
	ends := evaluationEnds(t, evs)
	if len(ends) != 2 || ends[0].Result != "needs_revision" || ends[0].Iteration != 0 || ends[1].Result != "satisfied" || ends[1].Iteration != 1 {
		t.Fatalf("evaluation ends = %+v, want needs_revision at iteration 0 then satisfied at iteration 1", ends)
	}
	var def anthropic.BetaManagedAgentsUserDefineOutcomeEvent
	var start anthropic.BetaManagedAgentsSpanOutcomeEvaluationStartEvent
	for _, ev := range evs {
		switch ev.Type {
		case "user.define_outcome":
			_ = json.Unmarshal([]byte(ev.Raw), &def)
		case "span.outcome_evaluation_start":
			_ = json.Unmarshal([]byte(ev.Raw), &start) // the last one
		}
	}
	if !strings.HasPrefix(def.OutcomeID, "outc_") || def.MaxIterations != 3 || def.Rubric.Type != "text" {
		t.Errorf("user.define_outcome = %s, want an outc_ id, max_iterations 3 (the default) and the text rubric", def.RawJSON())
	}
	if ends[1].OutcomeEvaluationStartID != start.ID || start.Iteration != 1 || ends[1].OutcomeID != def.OutcomeID ||
		ends[0].Explanation != "Add a line with the word HEADLINE." || ends[1].Usage.InputTokens == 0 || ends[1].ProcessedAt.IsZero() {
		t.Errorf("evaluation end %s, want it to name its start %s (iteration 1), the outcome, the grader's usage", ends[1].RawJSON(), start.RawJSON())
	}
	o := e.outcome(t, id)
	if o.OutcomeID != def.OutcomeID || o.Result != "satisfied" || o.Iteration != 1 || o.CompletedAt.IsZero() ||
		o.Description != "#reply draft REV1" || o.Type != "outcome_evaluation" || !strings.Contains(o.Explanation, "HEADLINE") {
		t.Errorf("outcome_evaluations[0] = %s, want satisfied at iteration 1, completed", o.RawJSON())
	}
	// The graders' usage is the session's, beside the agent's requests'.
	agentUsage, _ := spanUsage(t, evs)
	s, err := e.client.Beta.Sessions.Get(context.Background(), id, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if want := agentUsage.InputTokens + ends[0].Usage.InputTokens + ends[1].Usage.InputTokens; s.Usage.InputTokens != want {
		t.Errorf("session usage input_tokens = %d, want %d (the agent's and the grader's)", s.Usage.InputTokens, want)
	}
	listed, err := e.client.Beta.Sessions.List(context.Background(), anthropic.BetaSessionListParams{AgentID: anthropic.String(s.Agent.ID)})
	if err != nil || len(listed.Data) != 1 || len(listed.Data[0].OutcomeEvaluations) != 1 || listed.Data[0].OutcomeEvaluations[0].Result != "satisfied" {
		t.Errorf("Sessions.List: %v (%v), want the session with its satisfied outcome", listed, err)
	}
	// Agent, grader, agent (told the grader's explanation), grader.
	reqs := recordedWith(t, e.record, "REV1")
	if len(reqs) != 4 {
		t.Fatalf("%d model requests of the session, want 4 (agent, grader, agent, grader)", len(reqs))
	}
	if !strings.Contains(reqs[2], "Add a line with the word HEADLINE.") || strings.Contains(reqs[2], "# Report rubric") {
		t.Errorf("the agent's second request lacks the grader's explanation, or shows the rubric: %s", reqs[2])
	}
	for _, i := range []int{1, 3} {
		if !strings.Contains(reqs[i], "# Report rubric") || !strings.Contains(reqs[i], "agent_final_message") {
			t.Errorf("grader request %d lacks the rubric or the agent's work: %s", i, reqs[i])
		}
	}
	// The outcome ended: another may be defined.
	e.send(t, id, defineOutcome("#reply second", textRubric("#grade second fine"), 1))
	until(t, events, "session.status_idle", time.Minute)
}

// outcomeNeverMet: a rubric never met ends max_iterations_reached after
// max_iterations evaluations, with the agent's final acknowledgment.
func outcomeNeverMet(t *testing.T, e *outcomeEnv) {
	id := e.session(t, nil)
	events := e.watch(t, id)
	e.send(t, id, defineOutcome("#reply attempt NEVER1", textRubric("#grade ZEBRA Draw a striped animal."), 2))
	evs := until(t, events, "session.status_idle", time.Minute)
	ends := evaluationEnds(t, evs)
	if len(ends) != 2 || ends[0].Result != "needs_revision" || ends[1].Result != "max_iterations_reached" || ends[1].Iteration != 1 {
		t.Fatalf("evaluation ends = %+v, want needs_revision then max_iterations_reached at iteration 1", ends)
	}
	inOrder(t, evs, "span.outcome_evaluation_end", "agent.message", "span.outcome_evaluation_end", "agent.message", "session.status_idle")
	if n := count(evs, "span.outcome_evaluation_start"); n != 2 {
		t.Errorf("%d evaluations, want 2 (max_iterations)", n)
	}
	o := e.outcome(t, id)
	if o.Result != "max_iterations_reached" || o.Iteration != 1 || o.CompletedAt.IsZero() {
		t.Errorf("outcome_evaluations[0] = %s, want max_iterations_reached at iteration 1", o.RawJSON())
	}
	if reqs := recordedWith(t, e.record, "NEVER1"); len(reqs) != 5 || !strings.Contains(reqs[4], "No evaluation remains") {
		t.Errorf("%d model requests, want 5 (agent, grader, agent, grader, acknowledgment told no evaluation remains)", len(reqs))
	}
}

// outcomeFileRubric: a rubric uploaded as a file reaches the grader.
func outcomeFileRubric(t *testing.T, e *outcomeEnv) {
	ctx := context.Background()
	f, err := e.client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(strings.NewReader("# FILERUBRIC criteria\n#grade FILEOK Say FILEOK.\n"), "rubric.md", "text/markdown")})
	if err != nil {
		t.Fatal(err)
	}
	id := e.session(t, nil)
	events := e.watch(t, id)
	e.send(t, id, defineOutcome("#reply all FILEOK", anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{
		OfFile: &anthropic.BetaManagedAgentsFileRubricParams{FileID: f.ID}}, 0))
	evs := until(t, events, "session.status_idle", time.Minute)
	if ends := evaluationEnds(t, evs); len(ends) != 1 || ends[0].Result != "satisfied" || ends[0].Iteration != 0 {
		t.Fatalf("evaluation ends = %+v, want satisfied at the first evaluation", ends)
	}
	if reqs := recordedWith(t, e.record, "# FILERUBRIC criteria"); len(reqs) != 1 {
		t.Errorf("%d grader requests with the rubric file's text, want 1", len(reqs))
	}
}

// outcomeInterrupted: an interrupt while the grader runs ends the
// evaluation and the outcome interrupted, and the session idle at once.
func outcomeInterrupted(t *testing.T, e *outcomeEnv) {
	id := e.session(t, nil)
	events := e.watch(t, id)
	e.send(t, id, defineOutcome("#reply slowly", textRubric("#slow 50s\n#grade NEVER takes a minute"), 0))
	until(t, events, "span.outcome_evaluation_ongoing", time.Minute)
	sent := time.Now()
	e.send(t, id, anthropic.BetaManagedAgentsEventParamsUnion{OfUserInterrupt: &anthropic.BetaManagedAgentsUserInterruptEventParams{}})
	evs := until(t, events, "session.status_idle", 20*time.Second)
	if d := time.Since(sent); d > 10*time.Second {
		t.Errorf("the interrupt took %v to end the evaluation", d)
	}
	if ends := evaluationEnds(t, evs); len(ends) != 1 || ends[0].Result != "interrupted" {
		t.Fatalf("evaluation ends = %+v, want one, interrupted", ends)
	}
	if o := e.outcome(t, id); o.Result != "interrupted" || o.CompletedAt.IsZero() {
		t.Errorf("outcome_evaluations[0] = %s, want interrupted", o.RawJSON())
	}
	// The session takes work again, and the grader that was stopped
	// leaves no second end.
	e.say(t, id, "#reply after")
	evs = until(t, events, "session.status_idle", time.Minute)
	if n := count(evs, "span.outcome_evaluation_end"); n != 0 {
		t.Errorf("%d evaluation ends after the interrupt, want 0: %v", n, typesOf(evs))
	}
}

// outcomeBudget: a budget stops the loop: the session goes idle with
// budget_reached and the outcome ends failed, with no further evaluation.
func outcomeBudget(t *testing.T, e *outcomeEnv) {
	id, err := e.pricedSession(t, "claude-sonnet-4-5", "500")
	if err != nil {
		t.Fatal(err)
	}
	events := e.watch(t, id)
	// The agent's turn costs $6: over the $5 budget.
	e.send(t, id, defineOutcome("#usage input=2000000 output=0\n#reply costly", textRubric("#grade NEVER more"), 5))
	evs := until(t, events, "session.status_idle", time.Minute)
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "budget_reached" {
		t.Fatalf("stop_reason %q, want budget_reached: %v", typ, typesOf(evs))
	}
	if n := count(evs, "span.model_request_start"); n != 1 {
		t.Errorf("%d model requests of the agent, want 1", n)
	}
	if o := e.outcome(t, id); o.Result != "failed" || !strings.Contains(o.Explanation, "budget") || o.CompletedAt.IsZero() {
		t.Errorf("outcome_evaluations[0] = %s, want failed, naming the budget", o.RawJSON())
	}
}

// outcomeGraderFails: a grader whose model requests all fail ends the
// outcome failed, saying so.
func outcomeGraderFails(t *testing.T, e *outcomeEnv) {
	id := e.session(t, nil)
	events := e.watch(t, id)
	e.send(t, id, defineOutcome("#reply fine", textRubric("#error overloaded 0\n#grade X y"), 0))
	evs := until(t, events, "session.status_idle", time.Minute)
	ends := evaluationEnds(t, evs)
	if len(ends) != 1 || ends[0].Result != "failed" || !strings.Contains(ends[0].Explanation, "no verdict") {
		t.Fatalf("evaluation ends = %+v, want one, failed: the grader gave no verdict", ends)
	}
	if o := e.outcome(t, id); o.Result != "failed" {
		t.Errorf("outcome_evaluations[0] = %s, want failed", o.RawJSON())
	}
}

// outcomeValidation: user.define_outcome is checked as the SDK types it,
// and a session has one active outcome at a time.
func outcomeValidation(t *testing.T, e *outcomeEnv) {
	ctx := context.Background()
	id := e.session(t, nil)
	for name, ev := range map[string]anthropic.BetaManagedAgentsEventParamsUnion{
		"max_iterations 0":  defineOutcome("d", textRubric("r"), -1),
		"max_iterations 21": defineOutcome("d", textRubric("r"), 21),
		"empty description": defineOutcome("", textRubric("r"), 0),
		"empty rubric":      defineOutcome("d", textRubric(""), 0),
		"unknown file":      defineOutcome("d", anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{OfFile: &anthropic.BetaManagedAgentsFileRubricParams{FileID: "file_011CNha8iCJcU1wXNR6q4V8w"}}, 0),
		"two at once":       {},
	} {
		events := []anthropic.BetaManagedAgentsEventParamsUnion{ev}
		if name == "two at once" {
			events = []anthropic.BetaManagedAgentsEventParamsUnion{defineOutcome("a", textRubric("r"), 0), defineOutcome("b", textRubric("r"), 0)}
		}
		if name == "max_iterations 0" {
			p := *ev.OfUserDefineOutcome
			p.MaxIterations = anthropic.Int(0)
			events = []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserDefineOutcome: &p}}
		}
		_, err := e.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{Events: events})
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		wantAPIError(t, err, 400)
	}
	// One active outcome at a time: the second is refused while the first
	// is evaluated (its grader is slow).
	events := e.watch(t, id)
	e.send(t, id, defineOutcome("#reply one", textRubric("#slow 50s\n#grade NEVER slow"), 0))
	until(t, events, "span.outcome_evaluation_start", time.Minute)
	_, err := e.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{defineOutcome("two", textRubric("r"), 0)}})
	apiErr := apiErrorWithStatus(t, err, 409)
	if apiErr != nil && !strings.Contains(apiErr.RawJSON(), "active outcome") {
		t.Errorf("second outcome refused with %s, want it to name the active outcome", apiErr.RawJSON())
	}
	e.send(t, id, anthropic.BetaManagedAgentsEventParamsUnion{OfUserInterrupt: &anthropic.BetaManagedAgentsUserInterruptEventParams{}})
	until(t, events, "session.status_idle", 20*time.Second)
	// As an initial event of a new session.
	s, err := e.client.Beta.Sessions.Get(ctx, id, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	created, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(s.Agent.ID)}, EnvironmentID: s.EnvironmentID,
		InitialEvents: []anthropic.BetaSessionNewParamsInitialEventUnion{{OfUserDefineOutcome: &anthropic.BetaManagedAgentsUserDefineOutcomeEventParams{
			Description: "#reply initial INIT1", Rubric: textRubric("#grade INIT1 fine")}}}})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the initial outcome satisfied", func() (bool, string) {
		o := e.outcome(t, created.ID)
		return o.Result == "satisfied", o.RawJSON()
	})
}

// outcomeOutputs: the grader reads what the agent left in
// /mnt/session/outputs.
func outcomeOutputs(t *testing.T, e *outcomeEnv) {
	id := e.session(t, toolset)
	events := e.watch(t, id)
	e.send(t, id, defineOutcome("#tool bash {\"command\":\"mkdir -p /mnt/session/outputs && echo OUTMARK42 > /mnt/session/outputs/report.md\"}\n#reply written",
		textRubric("#grade OUTMARK42 The report must say OUTMARK42."), 0))
	evs := until(t, events, "session.status_idle", time.Minute)
	if ends := evaluationEnds(t, evs); len(ends) != 1 || ends[0].Result != "satisfied" {
		t.Fatalf("evaluation ends = %+v, want satisfied at the first evaluation: the grader read the output", ends)
	}
	reqs := recordedWith(t, e.record, "The report must say OUTMARK42")
	if len(reqs) != 1 || !strings.Contains(reqs[0], "/mnt/session/outputs/report.md") {
		t.Errorf("grader requests %v, want one naming the output file", reqs)
	}
}

// TestOutcomeWorkerCrash kills the worker (SIGKILL) while the grader
// runs: a new worker runs the evaluation again, and the outcome ends once,
// with one evaluation's start and end.
func TestOutcomeWorkerCrash(t *testing.T) {
	t.Parallel()
	e := newOutcomeEnv(t)
	id := e.session(t, nil)
	events := e.watch(t, id)
	e.send(t, id, defineOutcome("#reply CRASHOK", textRubric("#slow 3s\n#grade CRASHOK fine"), 0))
	until(t, events, "span.outcome_evaluation_ongoing", time.Minute)
	e.worker.stop(syscall.SIGKILL)
	startWorkerWith(t, e.srv, "wire-outcomes-2", e.root, map[string]string{"MANGO_FAKE_MODEL_RECORD": e.record})
	evs := until(t, events, "session.status_idle", time.Minute)
	if ends := evaluationEnds(t, evs); len(ends) != 1 || ends[0].Result != "satisfied" {
		t.Fatalf("evaluation ends = %+v, want one, satisfied", ends)
	}
	seen := e.typeCounts(t, id)
	if seen["span.outcome_evaluation_start"] != 1 || seen["span.outcome_evaluation_end"] != 1 || seen["session.status_idle"] != 1 ||
		seen["agent.message"] != 1 || seen["span.outcome_evaluation_ongoing"] < 1 {
		t.Errorf("event counts after the crash: %v, want one evaluation, one agent.message, one idle", seen)
	}
	if o := e.outcome(t, id); o.Result != "satisfied" || o.Iteration != 0 {
		t.Errorf("outcome_evaluations[0] = %s, want satisfied at iteration 0", o.RawJSON())
	}
}

// outcomeInterruptedAtWork: an interrupt while the agent works on the
// outcome ends it interrupted, with no evaluation.
func outcomeInterruptedAtWork(t *testing.T, e *outcomeEnv) {
	id := e.session(t, toolset)
	events := e.watch(t, id)
	e.send(t, id, defineOutcome(`#tool bash {"command":"sleep 29.5"}`, textRubric("#grade NEVER slow"), 0))
	until(t, events, "agent.tool_use", time.Minute)
	e.send(t, id, anthropic.BetaManagedAgentsEventParamsUnion{OfUserInterrupt: &anthropic.BetaManagedAgentsUserInterruptEventParams{}})
	evs := until(t, events, "session.status_idle", 20*time.Second)
	if n := count(evs, "span.outcome_evaluation_start"); n != 0 {
		t.Errorf("%d evaluations after the interrupt, want 0: %v", n, typesOf(evs))
	}
	if o := e.outcome(t, id); o.Result != "interrupted" || o.CompletedAt.IsZero() {
		t.Errorf("outcome_evaluations[0] = %s, want interrupted", o.RawJSON())
	}
}
