package session

// This file holds a session's outcome loop as the worker runs it (the
// api-server decides it: db/outcomes.go). Its triggers are events of the
// session's log: user.define_outcome starts the agent's turn on the
// outcome's description; span.outcome_evaluation_start runs the grader,
// a model call of its own context (the rubric, the description, the
// agent's final message and its published outputs) that answers through
// the submit_evaluation tool; a span.outcome_evaluation_end that asks for
// a revision starts the agent's next turn with the grader's explanation.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/tools"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// Outcome event types.
const (
	defineOutcomeType     = "user.define_outcome"
	evaluationStartType   = "span.outcome_evaluation_start"
	evaluationOngoingType = "span.outcome_evaluation_ongoing"
	evaluationEndType     = "span.outcome_evaluation_end"
)

// Verdicts of an evaluation.
const (
	verdictSatisfied     = "satisfied"
	verdictNeedsRevision = "needs_revision"
	verdictMaxIterations = "max_iterations_reached"
	verdictFailed        = "failed"
)

// DefaultOngoingEvery spaces the span.outcome_evaluation_ongoing
// heartbeats of a running grader.
const DefaultOngoingEvery = 10 * time.Second

// Grader limits: its model requests (a verdict not given through the tool
// counts as a failed one), their spacing, its answer, and the agent's
// final message as it reads it.
const (
	graderAttempts      = 3
	graderBackoff       = time.Second
	graderMaxTokens     = 4096
	maxGradedReplyBytes = 64 << 10
)

// graderTool is the tool the grader answers through.
const graderTool = "submit_evaluation"

var graderToolDef = model.ToolDef{
	Name:        graderTool,
	Description: "Submit the verdict of the evaluation: satisfied when the work meets every criterion of the rubric, needs_revision with what is missing or wrong, failed when the rubric cannot apply to the work at all.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{` +
		`"result":{"type":"string","enum":["satisfied","needs_revision","failed"]},` +
		`"explanation":{"type":"string","description":"Which criteria pass or fail, and why; for needs_revision, what the agent must change."}},` +
		`"required":["result","explanation"]}`),
}

const graderSystem = "You are a grader. You evaluate the work of an agent against a rubric, criterion by criterion, " +
	"independently of how the agent went about it. You see the rubric, the task the agent was given, the agent's final " +
	"message and the files it left in its outputs directory. Judge only what is there: a claim in the final message that " +
	"a file exists does not make it exist. Answer with the submit_evaluation tool."

// outcomeMessage is the user message that starts the agent's turn for an
// outcome trigger (ok false for other events): the outcome's description,
// or the grader's verdict to act on.
func outcomeMessage(ev *pb.Event) (msg model.Message, ok bool, err error) {
	var text string
	switch ev.GetType() {
	case defineOutcomeType:
		var body struct {
			Description string `json:"description"`
		}
		if err := json.Unmarshal([]byte(ev.GetBody()), &body); err != nil {
			return msg, true, fmt.Errorf("decode %s %s: %w", defineOutcomeType, ev.GetId(), err)
		}
		text = body.Description
	case evaluationEndType:
		var body struct {
			Iteration   int    `json:"iteration"`
			Result      string `json:"result"`
			Explanation string `json:"explanation"`
		}
		if err := json.Unmarshal([]byte(ev.GetBody()), &body); err != nil {
			return msg, true, fmt.Errorf("decode %s %s: %w", evaluationEndType, ev.GetId(), err)
		}
		text = revisionText(body.Iteration, body.Result, body.Explanation)
	default:
		return msg, false, nil
	}
	return model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: text}}}, true, nil
}

// revisionText is what the agent is told of a verdict that did not end
// the outcome satisfied.
func revisionText(iteration int, result, explanation string) string {
	if result == verdictMaxIterations {
		return fmt.Sprintf("An independent grader evaluated your work against the outcome's rubric (evaluation %d) and found it still "+
			"needs revision:\n\n%s\n\nNo evaluation remains: the outcome reached its max_iterations. Do not revise further; "+
			"end with a brief message on where the work stands.", iteration+1, explanation)
	}
	return fmt.Sprintf("An independent grader evaluated your work against the outcome's rubric (evaluation %d) and found it needs "+
		"revision:\n\n%s\n\nRevise your work to meet the rubric. It is evaluated again when your turn ends.", iteration+1, explanation)
}

// verdict is a grader's answer.
type verdict struct {
	Result      string `json:"result"`
	Explanation string `json:"explanation"`
}

// evaluate runs the grader of the outcome evaluation the turn's trigger
// starts and commits its verdict: the span.outcome_evaluation_end, with
// the grader's usage, ends the turn (the api-server decides what
// follows). An interrupt stops the grader: the interrupt already ended
// the evaluation.
func (t *turn) evaluate(ctx context.Context) (*RunTurnResult, error) {
	done := context.WithoutCancel(ctx)
	start := t.batch[0]
	oc := t.run.GetOutcome()
	if oc.GetEvaluationStartId() != start.GetId() {
		// The outcome ended (interrupted) before the grader took it.
		return t.res, t.a.markProcessed(done, t.sid, t.batch)
	}
	g := &grader{a: t.a, sid: t.sid, oc: oc, model: t.graderModel()}
	stop, err := g.beat(t.work, start.GetId())
	if err != nil {
		return nil, err
	}
	v, usage := verdict{Result: verdictFailed, Explanation: "The session reached its budget (budget_reached) before the evaluation."}, model.Usage{}
	outcome := pb.TurnOutcome_TURN_OUTCOME_BUDGET_REACHED
	if !t.run.GetBudgetExhausted() {
		v, usage = g.grade(t.work, lastReply(t.conv))
		outcome = pb.TurnOutcome_TURN_OUTCOME_END_TURN
	}
	stop()
	switch classifyEnd(t.work.Err(), t.work.Err() != nil, interrupted(t.work)) {
	case endInterrupted:
		return t.finishInterrupted(ctx, done)
	case endAbandoned, endFailed:
		return nil, fmt.Errorf("evaluation %s of session %s: %w", start.GetId(), t.sid, t.work.Err())
	}
	end, err := g.endEvent(start.GetId(), v, &usage)
	if err != nil {
		return nil, err
	}
	resp, err := t.a.ControlPlane.CompleteTurn(done, &pb.CompleteTurnRequest{SessionId: t.sid, Outcome: outcome,
		Events: []*pb.NewEvent{end}, TurnKey: start.GetId(), ProcessedEventIds: eventIDs(t.batch)})
	if err != nil {
		return nil, fmt.Errorf("complete evaluation %s: %w", start.GetId(), err)
	}
	t.res.Outcome = TurnIdle
	// The revision (or the acknowledgment) that follows is a trigger of
	// its own: the session is still running.
	t.res.More = t.res.More || resp.GetStatus() == pb.SessionStatus_SESSION_STATUS_RUNNING
	return t.res, nil
}

// graderModel is the model the grader asks: the configured one, or the
// model the agent's turns use.
func (t *turn) graderModel() string {
	if t.a.GraderModel != "" {
		return t.a.GraderModel
	}
	if t.a.ModelID != "" {
		return t.a.ModelID
	}
	var agent agentruntime.Agent
	_ = json.Unmarshal([]byte(t.run.GetAgent()), &agent)
	return agent.Model.ID
}

// lastReply is the text of the agent's last message in the conversation,
// at most maxGradedReplyBytes.
func lastReply(conv []model.Message) string {
	for i := len(conv) - 1; i >= 0; i-- {
		if conv[i].Role != "assistant" {
			continue
		}
		var parts []string
		for _, b := range conv[i].Content {
			if b.Type == "text" && b.Text != "" {
				parts = append(parts, b.Text)
			}
		}
		if len(parts) > 0 {
			return truncateText(strings.Join(parts, "\n\n"), maxGradedReplyBytes)
		}
	}
	return ""
}

// truncateText cuts s to at most n bytes, on a rune boundary, noting it.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return tools.CutUTF8(s, n) + fmt.Sprintf("\n[truncated at %d bytes]", n)
}

// grader runs one evaluation of an outcome.
type grader struct {
	a     *TurnActivities
	sid   string
	oc    *pb.OutcomeContext
	model string
}

// beat appends the evaluation's first span.outcome_evaluation_ongoing and
// keeps appending one every OngoingEvery until stop is called.
func (g *grader) beat(ctx context.Context, startID string) (stop func(), err error) {
	every := g.a.OngoingEvery
	if every <= 0 {
		every = DefaultOngoingEvery
	}
	if err := g.ongoing(ctx, startID, 0); err != nil {
		return nil, err
	}
	beatCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-beatCtx.Done():
				return
			case <-tick.C:
				// A heartbeat that fails is not retried: the next one, or
				// the evaluation's end, tells the same.
				_ = g.ongoing(beatCtx, startID, n)
			}
		}
	}()
	return func() { cancel(); <-stopped }, nil
}

// ongoing appends heartbeat n of the evaluation startID started.
func (g *grader) ongoing(ctx context.Context, startID string, n int) error {
	body, err := json.Marshal(map[string]any{"outcome_id": g.oc.GetOutcomeId(), "iteration": g.oc.GetIteration()})
	if err != nil {
		return err
	}
	_, err = g.a.ControlPlane.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: g.sid, Events: []*pb.NewEvent{{
		Key: fmt.Sprintf("outcome_ongoing/%s/%d", startID, n), Type: evaluationOngoingType, Body: string(body)}}})
	if err != nil {
		return fmt.Errorf("append %s: %w", evaluationOngoingType, err)
	}
	return nil
}

// grade asks the grader for its verdict on the agent's work, reply its
// final message: up to graderAttempts model requests. A grader that gives
// none fails the evaluation, saying why. usage is the sum of its
// requests'.
func (g *grader) grade(ctx context.Context, reply string) (v verdict, usage model.Usage) {
	if e := g.oc.GetRubricError(); e != "" {
		return verdict{Result: verdictFailed, Explanation: "The rubric could not be read: " + e + "."}, usage
	}
	req := &model.Request{Model: g.model, System: graderSystem, MaxTokens: graderMaxTokens, Tools: []model.ToolDef{graderToolDef},
		ToolChoice: &model.ToolChoice{Type: "tool", Name: graderTool},
		Messages:   []model.Message{{Role: "user", Content: []model.Block{{Type: "text", Text: g.prompt(reply)}}}}}
	var last error
	for attempt := range graderAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return v, usage
			case <-time.After(graderBackoff << (attempt - 1)):
			}
		}
		resp, err := g.a.Model.Create(ctx, req)
		if ctx.Err() != nil {
			return v, usage
		}
		if err == nil {
			addUsage(&usage, &resp.Usage)
			if v, err = verdictOf(resp); err == nil {
				return v, usage
			}
		}
		last = err
	}
	return verdict{Result: verdictFailed, Explanation: fmt.Sprintf("The grader gave no verdict after %d attempts (%s).",
		graderAttempts, graderFailure(last))}, usage
}

// graderFailure names what went wrong with the grader's last request,
// without the provider's internals.
func graderFailure(err error) string {
	var me *model.Error
	if errors.As(err, &me) {
		return "model error: " + me.Type
	}
	return err.Error()
}

// errNoVerdict reports a grader answer without a valid verdict.
var errNoVerdict = errors.New("the grader did not answer through " + graderTool + " with result satisfied, needs_revision or failed")

// verdictOf reads the verdict of a grader's response.
func verdictOf(resp *model.Response) (verdict, error) {
	for _, b := range resp.Content {
		if b.Type != "tool_use" || b.Name != graderTool {
			continue
		}
		var v verdict
		if json.Unmarshal(b.Input, &v) != nil {
			return v, errNoVerdict
		}
		switch v.Result {
		case verdictSatisfied, verdictNeedsRevision, verdictFailed:
		default:
			return v, errNoVerdict
		}
		if strings.TrimSpace(v.Explanation) == "" {
			v.Explanation = "(The grader gave no explanation.)"
		}
		return v, nil
	}
	return verdict{}, errNoVerdict
}

func addUsage(sum, u *model.Usage) {
	sum.InputTokens += u.InputTokens
	sum.OutputTokens += u.OutputTokens
	sum.CacheReadInputTokens += u.CacheReadInputTokens
	sum.CacheCreationInputTokens += u.CacheCreationInputTokens
	sum.CacheCreation5mInputTokens += u.CacheCreation5mInputTokens
	sum.CacheCreation1hInputTokens += u.CacheCreation1hInputTokens
}

// prompt is the grader's one message: the rubric, the task, the agent's
// final message and its outputs, each in a tagged section.
func (g *grader) prompt(reply string) string {
	oc := g.oc
	var b strings.Builder
	fmt.Fprintf(&b, "<rubric>\n%s\n</rubric>\n\n", oc.GetRubric())
	fmt.Fprintf(&b, "<task>\n%s\n</task>\n\n", oc.GetDescription())
	fmt.Fprintf(&b, "<agent_final_message>\n%s\n</agent_final_message>\n\n", reply)
	b.WriteString("<outputs>\n")
	if len(oc.GetOutputs()) == 0 {
		b.WriteString("(The agent left no files in /mnt/session/outputs.)\n")
	}
	for _, o := range oc.GetOutputs() {
		fmt.Fprintf(&b, "<file path=\"%s\" size_bytes=\"%d\" media_type=\"%s\"", html.EscapeString(o.GetPath()), o.GetSizeBytes(),
			html.EscapeString(o.GetMediaType()))
		if o.GetTruncated() {
			b.WriteString(" truncated=\"true\"")
		}
		fmt.Fprintf(&b, ">\n%s\n</file>\n", o.GetContent())
	}
	b.WriteString("</outputs>\n\n")
	fmt.Fprintf(&b, "This is evaluation %d of at most %d. Evaluate the work against every criterion of the rubric and submit "+
		"your verdict with the %s tool.", oc.GetIteration()+1, oc.GetMaxIterations(), graderTool)
	return b.String()
}

// endEvent is the span.outcome_evaluation_end of the evaluation startID
// started, carrying the grader's verdict and usage.
func (g *grader) endEvent(startID string, v verdict, u *model.Usage) (*pb.NewEvent, error) {
	body, err := json.Marshal(map[string]any{"outcome_id": g.oc.GetOutcomeId(), "iteration": g.oc.GetIteration(),
		"outcome_evaluation_start_id": startID, "result": v.Result, "explanation": v.Explanation,
		"usage": map[string]int64{"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
			"cache_read_input_tokens": u.CacheReadInputTokens, "cache_creation_input_tokens": u.CacheCreationInputTokens}})
	if err != nil {
		return nil, err
	}
	ev := &pb.NewEvent{Key: "outcome_end/" + startID, Type: evaluationEndType, Body: string(body)}
	if *u != (model.Usage{}) {
		ev.Usage = (&cpStore{model: g.model}).usageToPB(u)
	}
	return ev, nil
}
