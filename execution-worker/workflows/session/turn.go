package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/interrupts"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfiles"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
	"github.com/mangohq/mango/execution-worker/tools"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// RunTurnActivity is the activity that runs one turn.
const RunTurnActivity = "RunTurn"

// MaxModelAttempts bounds the tries of one turn on transient model errors:
// after the third failure the turn ends idle with retries_exhausted.
const MaxModelAttempts = 3

// RunTurnInput is the input of RunTurn.
type RunTurnInput struct {
	SessionID string `json:"session_id"`
	// Attempt counts earlier tries of the pending turn that ended in a
	// transient model error (0 on the first try).
	Attempt int `json:"attempt"`
	// TaskQueue is the sandbox's queue as the workflow knows it; when set,
	// RunTurn does not look the binding up again.
	TaskQueue string `json:"task_queue,omitempty"`
	// Locality, set instead of TaskQueue, is the locality queue of the
	// session's sandbox for a turn scheduled on the workflow's own queue
	// to run eagerly on the workflow's worker, which polls that locality
	// queue too. A worker that does not poll it runs nothing and hands the
	// turn back (RunTurnResult.TaskQueue); so does a worker that predates
	// the field, which sees a turn without TaskQueue and checks the
	// binding.
	Locality string `json:"locality,omitempty"`
}

// Turn outcomes reported to the workflow.
const (
	TurnNothing = "nothing"    // no pending trigger
	TurnIdle    = "idle"       // ended (end_turn, limit, exhausted, interrupted)
	TurnParked  = "parked"     // requires_action
	TurnRetry   = "retry"      // transient model error: try again after RetryAfter
	TurnStopped = "terminated" // unrecoverable
	TurnGone    = "gone"       // the session was deleted: the workflow ends
	// TurnInterrupted: a pushed interrupt stopped the turn before Temporal
	// cancelled the activity; the turn ended idle as an interrupted one
	// does, and More is set, so the workflow looks for queued work as after
	// a cancelled turn.
	TurnInterrupted = "interrupted"
)

// RunTurnResult is what RunTurn reports.
type RunTurnResult struct {
	Outcome string `json:"outcome"`
	// More reports pending triggers left after this turn.
	More bool `json:"more"`
	// TaskQueue is the queue that reaches the session's sandbox ("" when
	// it has none): later turns run there.
	TaskQueue string `json:"task_queue"`
	// RetryAfter is the delay before a retry.
	RetryAfter time.Duration `json:"retry_after"`
	// InterruptOutboxID, with TurnInterrupted, names the wake-up signal
	// of the pushed interrupt that stopped the turn
	// (WakeupSignal.outbox_id): the workflow, receiving it after the
	// turn ended, must not cancel the next turn with it.
	InterruptOutboxID int64 `json:"interrupt_outbox_id,omitempty"`
}

// TurnActivities run turns. They hold the worker's model client, sandbox
// manager and ControlPlane client.
type TurnActivities struct {
	ControlPlane pb.ControlPlaneClient
	Manager      *sandbox.SessionManager
	Model        model.Client
	ModelID      string
	Previews     func(sessionID string) Previewer // per-turn preview sink; nil: none
	MaxRounds    int
	// Tracer makes the spans of model requests, tool calls, the sandbox's
	// acquisition and the session's files; nil makes none.
	Tracer trace.Tracer
	// CaptureContent lets the spans carry the model's text, tool input and
	// tool output (MANGO_OTEL_CAPTURE_CONTENT).
	CaptureContent bool
	// Metrics measures the turns' model requests, tool calls and sandbox
	// acquisitions; nil measures nothing.
	Metrics agentruntime.Metrics
	// MCP reaches the agents' MCP servers; nil offers no MCP tools.
	MCP agentruntime.MCPClient
	// Context tunes context-window management (MANGO_MODEL_CONTEXT_WINDOW,
	// MANGO_COMPACTION_MODEL).
	Context agentruntime.ContextConfig
	// Snapshots stores context snapshots; nil: turns do not compact (a
	// request over the window ends the turn).
	Snapshots pb.ContextSnapshotsClient
	// OnTurn, when set, is told how each RunTurn ended ("error" when it
	// failed) and how long it took.
	OnTurn func(outcome string, took time.Duration)
	// OnStart, when set, is told how long each RunTurn's first attempt
	// waited between being scheduled and starting (Temporal's
	// schedule-to-start; about 0 for a turn run eagerly).
	OnStart func(scheduleToStart time.Duration)
	// HeartbeatEvery spaces heartbeats (which carry cancellation).
	HeartbeatEvery time.Duration
	// Resources materializes the session's resources into its sandbox the
	// first time a turn needs the sandbox; nil mounts nothing.
	Resources *sessionfiles.Materializer
	// Outputs publishes what the agent left under /mnt/session/outputs
	// before the session goes idle; nil publishes nothing.
	Outputs *sessionfiles.Publisher
	// Interrupts registers running turns so that interrupts the
	// api-server pushes stop them at once; nil waits for Temporal's
	// cancellation (a heartbeat round trip).
	Interrupts *interrupts.Registry
	// Transcripts keeps recent sessions' transcripts so that a turn
	// fetches only what was appended since; nil fetches the whole
	// transcript every turn.
	Transcripts *TranscriptCache
	// Serves reports whether this worker polls a task queue: a turn
	// scheduled for eager execution (RunTurnInput.Locality) runs only on a
	// worker of its locality. nil serves none.
	Serves func(queue string) bool
	// SelfHostedToolTimeout is how long the client's worker of a
	// self-hosted environment has to answer a built-in tool call
	// (MANGO_SELF_HOSTED_TOOL_TIMEOUT); 0 means
	// DefaultSelfHostedToolTimeout.
	SelfHostedToolTimeout time.Duration
	// Calls are the tool calls this worker runs (NewCalls): an attempt
	// Temporal gives up on while this worker lives leaves its call running
	// for the next attempt. nil: a call ends with its attempt, and the next
	// attempt reports it ambiguous.
	Calls *agentruntime.Calls
	// Threads reaches the SessionThreads service: a multi-agent session's
	// coordinator is given its thread tools. nil offers none.
	Threads pb.SessionThreadsClient
	// GraderModel grades the agent's work against an outcome's rubric
	// (MANGO_OUTCOME_GRADER_MODEL); empty: the agent's model.
	GraderModel string
	// OngoingEvery spaces the span.outcome_evaluation_ongoing heartbeats
	// of a running grader; 0 means DefaultOngoingEvery.
	OngoingEvery time.Duration
}

// NewCalls returns the tool calls of a worker's turns: a call outlives
// an attempt that was abandoned (Temporal answered its heartbeat "no such
// attempt"), and is cancelled when its attempt is interrupted or the
// worker stops.
func NewCalls() *agentruntime.Calls { return &agentruntime.Calls{Abandoned: abandoned} }

// abandoned reports whether the done context of an attempt was given up
// rather than asked to stop: neither an interrupt nor the worker's stop.
func abandoned(ctx context.Context) bool {
	if interrupted(ctx) {
		return false
	}
	select {
	case <-activity.GetWorkerStopChannel(ctx):
		return false
	default:
		return true
	}
}

// Register registers RunTurn, CheckLocality and HostGone on w.
func (a *TurnActivities) Register(w Registrar) {
	w.RegisterActivityWithOptions(a.RunTurn, activity.RegisterOptions{Name: RunTurnActivity})
	w.RegisterActivityWithOptions(a.CheckLocality, activity.RegisterOptions{Name: CheckLocalityActivity})
	w.RegisterActivityWithOptions(a.HostGone, activity.RegisterOptions{Name: HostGoneActivity})
}

// HostGoneActivity terminated a session whose sandbox host stopped
// serving. Workflows started before CheckLocality (see
// localityCheckChange) still schedule it.
const HostGoneActivity = "FailSessionHostGone"

// HostGoneInput is the input of HostGone.
type HostGoneInput struct {
	SessionID string        `json:"session_id"`
	TaskQueue string        `json:"task_queue"`
	Waited    time.Duration `json:"waited"`
}

// HostGone ends a session whose sandbox lives on a worker that has not
// picked up work for the host queue timeout: the sandbox is unreachable,
// so the session terminates with a session.error naming it rather than
// waiting forever or silently starting over elsewhere.
func (a *TurnActivities) HostGone(ctx context.Context, in HostGoneInput) error {
	run, err := a.ControlPlane.GetRun(ctx, &pb.GetRunRequest{SessionId: in.SessionID})
	if c := status.Code(err); c == codes.NotFound || c == codes.FailedPrecondition {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load run of session %s: %w", in.SessionID, err)
	}
	ref := ""
	if b, err := a.ControlPlane.GetBinding(ctx, &pb.GetBindingRequest{SessionId: in.SessionID}); err == nil && b.GetBinding() != nil {
		ref = b.GetBinding().GetProvider() + " sandbox " + b.GetBinding().GetExternalId()
	}
	msg := fmt.Sprintf("the worker holding this session's %s (task queue %s) has not picked up work for %s; the sandbox is unreachable",
		ref, in.TaskQueue, in.Waited)
	ev := errorEvent("host_gone/"+in.TaskQueue, "unknown_error", msg, retryTerminal)
	return a.complete(ctx, in.SessionID, "host_gone/"+in.TaskQueue, pb.TurnOutcome_TURN_OUTCOME_TERMINATED, []*pb.NewEvent{ev}, run.GetPendingTriggers()...)
}

func isAnswer(t string) bool {
	return t == "user.custom_tool_result" || t == "user.tool_confirmation"
}

// RunTurn runs the oldest pending trigger of a session to the end of its
// turn. It is safe to retry: effects are keyed and the transcript lets a
// retry resume.
//
// A turn runs in phases: prepare it from its trigger, build the core that
// runs it, run it, classify how the run ended, and finish (publish the
// outputs, commit the outcome).
func (a *TurnActivities) RunTurn(ctx context.Context, in RunTurnInput) (ended *RunTurnResult, failed error) {
	if a.OnTurn != nil {
		defer a.observe(time.Now(), &ended, &failed)
	}
	t := &turn{a: a, in: in, sid: in.SessionID, attempt: a.started(ctx)}
	defer t.release()
	if res, err := t.prepare(ctx); res != nil || err != nil {
		return res, err
	}
	if t.evaluation {
		return t.evaluate(ctx)
	}
	if err := t.buildCore(ctx); err != nil {
		return nil, err
	}
	result, runErr := t.runCore()
	// From here on the turn's ending must be recorded even if the activity
	// was cancelled (an interrupt): use a context that outlives it.
	done := context.WithoutCancel(ctx)
	t.settleQueue(done)
	switch classifyEnd(runErr, t.work.Err() != nil, interrupted(t.work)) {
	case endAbandoned:
		return nil, temporal.NewApplicationErrorWithCause(abandonReason(ctx), "TurnAttemptAbandoned", runErr)
	case endInterrupted:
		return t.finishInterrupted(ctx, done)
	case endFailed:
		return a.failTurn(done, t.sid, t.box, t.key, in.Attempt, t.batch, t.res, runErr)
	}
	return t.finish(done, result)
}

// started tells OnStart how long the RunTurn of ctx waited to start, and
// returns its attempt number. Only a first attempt is told: Temporal's
// activity info has the first attempt's scheduled time only, so a later
// attempt's wait would count the earlier attempts.
func (a *TurnActivities) started(ctx context.Context) int {
	info := activity.GetInfo(ctx)
	if a.OnStart != nil && info.Attempt == 1 && !info.ScheduledTime.IsZero() {
		a.OnStart(max(info.StartedTime.Sub(info.ScheduledTime), 0))
	}
	return int(info.Attempt)
}

// observe tells OnTurn how the RunTurn that started at start ended.
func (a *TurnActivities) observe(start time.Time, ended **RunTurnResult, failed *error) {
	outcome := "error"
	if *failed == nil && *ended != nil {
		outcome = (*ended).Outcome
	}
	a.OnTurn(outcome, time.Since(start))
}

// turn is one RunTurn: what its phases learn and hand on to the next.
type turn struct {
	a   *TurnActivities
	in  RunTurnInput
	sid string
	// attempt is the activity attempt's number (from 1).
	attempt int
	// box is the session whose sandbox, resources and memory stores the
	// turn uses: sid, or a child thread's session.
	box string
	// queue reaches the session's sandbox ("" while the turn does not
	// know it).
	queue string
	// res is what RunTurn reports, filled in as the phases go.
	res *RunTurnResult
	// cleanups run, last first, when RunTurn returns.
	cleanups []func()

	// Set by prepare.
	run     *pb.GetRunResponse
	tr      *transcript
	pending []*pb.Event
	// batch is the triggers the turn consumes: its message, or the
	// answers that resume it.
	batch []*pb.Event
	// key is the turn's key: the event id of its message.
	key      string
	conv     []model.Message
	keys     []string
	anchor   *agentruntime.Anchor
	unsaved  []agentruntime.TranscriptMessage
	approved map[string]bool
	store    *cpStore
	// work is the context the turn's work runs under: a pushed interrupt
	// cancels it. The bookkeeping around the work keeps the activity's.
	work context.Context
	reg  *interrupts.Turn
	// evaluation: the trigger is an outcome's evaluation (outcomes.go).
	evaluation bool

	// Set by buildCore.
	agent    agentruntime.Agent
	tools    *agentruntime.ToolConfig
	core     *agentruntime.Core
	snapshot *agentruntime.ContextSnapshot
	once     sessionfiles.Once
	// selfHosted: the session's environment is self_hosted: its built-in
	// tools run on the client's worker, and it has no sandbox.
	selfHosted  bool
	acquire     func(context.Context) (sandbox.Sandbox, error)
	materialize func(context.Context, sandbox.Sandbox) error
	// provisioned: an acquisition provisioned the sandbox since a tool
	// call last got it (toolSandbox).
	provisioned atomic.Bool
	// readOnly are the mounts of the session's read_only memory stores.
	readOnly []string
}

// thread reports whether the turn is a child thread's.
func (t *turn) thread() bool { return t.box != t.sid }

// onReturn has f run when RunTurn returns, before what was registered
// earlier.
func (t *turn) onReturn(f func()) { t.cleanups = append(t.cleanups, f) }

// release runs the cleanups, last registered first.
func (t *turn) release() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}

// prepare readies the turn from its pending triggers: it routes it, loads
// the session's run and transcript, triages the triggers, takes the
// batch it runs and registers the turn for pushed interrupts. A result
// (or an error) ends RunTurn there: nothing to run, or not here.
func (t *turn) prepare(ctx context.Context) (*RunTurnResult, error) {
	queue, here := routeTurn(t.in, t.a.Serves)
	if !here {
		// Not run eagerly, and taken from the workflow's queue by a
		// worker of another locality: the locality's queue reaches the
		// sandbox.
		return &RunTurnResult{Outcome: TurnNothing, More: true, TaskQueue: queue}, nil
	}
	t.queue = queue
	t.onReturn(t.a.heartbeat(ctx))
	if res, err := t.load(ctx); res != nil || err != nil {
		return res, err
	}
	kind, batch := triage(t.pending)
	switch kind {
	case triggerNone:
		return t.res, nil
	case triggerInterrupt:
		// A queued interrupt with no turn running has nothing to stop.
		if err := t.a.markProcessed(ctx, t.sid, batch); err != nil {
			return nil, err
		}
		t.res.More = len(t.pending) > len(batch)
		return t.res, nil
	}
	if kind == triggerEvaluation {
		// The grader needs no sandbox: it runs wherever the turn landed.
		t.batch, t.key, t.evaluation = batch, batch[0].GetId(), true
		t.conv, t.keys, t.anchor = t.tr.projection()
		t.res.More = len(t.pending) > len(t.batch)
		return nil, t.register(ctx)
	}
	if res, err := t.checkBinding(ctx); res != nil || err != nil {
		return res, err
	}
	t.batch = batch
	t.store = &cpStore{cp: t.a.ControlPlane, sessionID: t.sid}
	t.conv, t.keys, t.anchor = t.tr.projection()
	take := t.takeMessage
	if kind == triggerAnswers {
		take = t.takeAnswers
	}
	if err := take(ctx); err != nil {
		return nil, err
	}
	t.res.More = len(t.pending) > len(t.batch)
	return nil, t.register(ctx)
}

// load loads the session's run and its transcript. A session deleted (or
// being deleted) has nothing more to run, ever: TurnGone.
func (t *turn) load(ctx context.Context) (*RunTurnResult, error) {
	run, tr, err := t.a.Transcripts.load(ctx, t.a.ControlPlane, t.sid)
	if c := status.Code(err); c == codes.NotFound || c == codes.FailedPrecondition {
		return &RunTurnResult{Outcome: TurnGone}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load run of session %s: %w", t.sid, err)
	}
	t.run, t.tr, t.pending = run, tr, run.GetPendingTriggers()
	t.box = t.sid
	if p := run.GetThread().GetParentSessionId(); p != "" {
		t.box = p
	}
	t.res = &RunTurnResult{Outcome: TurnNothing}
	return nil, nil
}

// routeTurn returns the queue that reaches the session's sandbox as the
// turn's input knows it ("" when it does not), and whether the turn runs
// on this worker (serves reports the queues it polls). A turn scheduled
// for eager execution runs only on a worker of its locality; any other
// hands it back to that locality's queue (the queue returned).
func routeTurn(in RunTurnInput, serves func(queue string) bool) (queue string, here bool) {
	if l := in.Locality; l != "" {
		return l, serves != nil && serves(l)
	}
	return in.TaskQueue, true
}

// checkBinding makes sure the turn runs where the session's sandbox can
// be reached. A first turn's activity is scheduled on the provider's
// queue, before any sandbox exists; retried after the sandbox was bound
// to a locality (its worker died after committing the turn's end), it
// must not run a later turn on whichever worker took it: it hands the
// workflow the binding's queue instead (the result returned).
func (t *turn) checkBinding(ctx context.Context) (*RunTurnResult, error) {
	if t.queue != "" {
		return nil, nil
	}
	queue, err := t.a.bindingQueue(ctx, t.box)
	if err != nil {
		return nil, fmt.Errorf("load binding of session %s: %w", t.box, err)
	}
	t.queue = queue
	if queue != "" && queue != activity.GetInfo(ctx).TaskQueue {
		return &RunTurnResult{Outcome: TurnNothing, More: true, TaskQueue: queue}, nil
	}
	return nil, nil
}

// trigger is what the pending triggers of a session start.
type trigger int

const (
	triggerNone       trigger = iota // nothing pending
	triggerInterrupt                 // a lone interrupt: no turn runs, it is consumed
	triggerAnswers                   // answers resume the parked turn
	triggerMessage                   // a message starts a turn
	triggerEvaluation                // an outcome's evaluation runs its grader
)

// triage tells what the pending triggers start, and the batch of them
// that is consumed: the interrupt alone, every answer up to the first
// trigger that is not one, or the message alone.
func triage(pending []*pb.Event) (trigger, []*pb.Event) {
	switch {
	case len(pending) == 0:
		return triggerNone, nil
	case pending[0].GetType() == "user.interrupt":
		return triggerInterrupt, pending[:1]
	case isAnswer(pending[0].GetType()):
		n := 1
		for n < len(pending) && isAnswer(pending[n].GetType()) {
			n++
		}
		return triggerAnswers, pending[:n]
	case pending[0].GetType() == evaluationStartType:
		return triggerEvaluation, pending[:1]
	default:
		return triggerMessage, pending[:1]
	}
}

// takeAnswers takes a batch of answers: it journals the results they
// carry, notes the tool calls they approve, and resumes the parked turn
// (the last one of the transcript).
func (t *turn) takeAnswers(ctx context.Context) error {
	t.approved = map[string]bool{}
	for _, ev := range t.batch {
		answered, r, journal, ok, err := answerOf(ev)
		if err != nil {
			return err
		}
		if journal {
			if _, err := t.store.RecordToolResult(ctx, answered, r); err != nil {
				return err
			}
		}
		if ok {
			t.approved[answered] = true
		}
	}
	key, err := parkedTurnKey(t.keys)
	if err != nil {
		return err
	}
	t.key = key
	return nil
}

// parkedTurnKey is the key of the turn the last transcript message
// belongs to (transcript keys are "<turn key>/<n>"): the parked turn that
// answers resume.
func parkedTurnKey(keys []string) (string, error) {
	if len(keys) == 0 {
		return "", errors.New("an answer arrived for a session without a parked turn")
	}
	key, _, _ := strings.Cut(keys[len(keys)-1], "/")
	return key, nil
}

// takeMessage takes a message that starts a turn: its user message opens
// the conversation's new turn unless a retry already stored it, and is
// stored with the turn's first commit.
func (t *turn) takeMessage(context.Context) error {
	t.approved = map[string]bool{}
	t.key = t.batch[0].GetId()
	first := t.key + "/0"
	if contains(t.keys, first) {
		return nil
	}
	msg, err := userMessage(t.batch[0])
	if err != nil {
		return err
	}
	if !t.thread() {
		msg.Content = withReplyHeader(t.batch[0], msg.Content)
	}
	msg.Content = append(unansweredResults(t.conv), msg.Content...)
	t.unsaved = append(t.unsaved, agentruntime.TranscriptMessage{Key: first, Msg: msg})
	t.conv, t.keys = append(t.conv, msg), append(t.keys, first)
	return nil
}

// unansweredText is the result given to a tool call left without one
// when a new message starts the next turn.
const unansweredText = "This tool call has no result: the turn ended (interrupted, or the session moved on) before it finished, " +
	"and it may or may not have run. Check its effects before relying on it."

// unansweredResults returns an error tool_result for each tool use of the
// conversation's last message when that is the model's (its turn was
// interrupted while the calls ran, or a message arrived while they waited
// for the client): the Messages API requires every tool_use to be
// answered at the start of the next user message.
func unansweredResults(conv []model.Message) []model.Block {
	if len(conv) == 0 || conv[len(conv)-1].Role != "assistant" {
		return nil
	}
	content, _ := json.Marshal([]map[string]string{{"type": "text", "text": unansweredText}})
	var out []model.Block
	for _, b := range conv[len(conv)-1].Content {
		if b.Type == "tool_use" {
			out = append(out, model.Block{Type: "tool_result", ToolUseID: b.ID, Content: content, IsError: true})
		}
	}
	return out
}

// turnMessages counts the transcript messages of the turn under key.
func turnMessages(keys []string, key string) int {
	n := 0
	for _, k := range keys {
		if strings.HasPrefix(k, key+"/") {
			n++
		}
	}
	return n
}

// register registers the turn for pushed interrupts (now, so that one
// pushed since the run was loaded counts) and marks the session running.
func (t *turn) register(ctx context.Context) error {
	t.work, t.reg = t.a.Interrupts.Start(ctx, t.sid, t.run.GetLastSeq(), eventIDs(t.pending))
	t.onReturn(t.reg.Done)
	if t.thread() {
		// A child thread's bash keeps its own shell in the shared sandbox:
		// its own directory and environment, running beside the others.
		t.work = sandbox.WithShellKey(t.work, t.sid)
	}
	if t.run.GetStatus() == pb.SessionStatus_SESSION_STATUS_RUNNING {
		return nil
	}
	return t.a.complete(ctx, t.sid, t.key+"/a"+fmt.Sprint(t.in.Attempt), pb.TurnOutcome_TURN_OUTCOME_RUNNING, nil)
}

// buildCore decodes the agent (its system prompt then lists the session's
// skills) and its tools from the run and wires the runtime core of the
// turn: its store (with context snapshots when the worker has the
// service), previews and sandbox access.
func (t *turn) buildCore(ctx context.Context) error {
	a, run := t.a, t.run
	if err := json.Unmarshal([]byte(run.GetAgent()), &t.agent); err != nil {
		return fmt.Errorf("decode agent snapshot: %w", err)
	}
	toolCfg, err := agentruntime.ParseToolConfig(json.RawMessage(run.GetTools()))
	if err != nil {
		return err
	}
	t.tools = toolCfg
	if t.selfHosted, err = selfHostedEnvironment(run.GetEnvironmentConfig()); err != nil {
		return err
	}
	// The model learns the session's skills from the system prompt, and
	// reads a skill's SKILL.md when a task needs it.
	resources := run.GetTurnContext().GetResources()
	t.agent.System = agentruntime.SystemWithSkills(t.agent.System, sessionSkills(resources, t.selfHosted))
	// And its memory stores: where they are, their access, what they are
	// for. The write and edit tools refuse the read_only ones' mounts.
	t.agent.System = agentruntime.SystemWithMemory(t.agent.System, sessionMemoryStores(resources, t.selfHosted))
	t.readOnly = readOnlyMounts(resources)
	// The client's system messages extend the system context, from the
	// turn they accompany on.
	t.agent.System = systemWithMessages(t.agent.System, run.GetSystemMessages())
	spec, err := sandboxSpec(run.GetEnvironmentConfig(), run.GetMcpServers())
	if err != nil {
		return err
	}
	t.store.model = t.agent.Model.ID
	if a.ModelID != "" {
		t.store.model = a.ModelID
	}
	t.store.exhausted.Store(run.GetBudgetExhausted())
	// With the snapshot service the turn compacts its context, and
	// continues from the snapshot in force.
	var rtStore agentruntime.Store = t.store
	if a.Snapshots != nil {
		if t.snapshot, err = turnSnapshot(ctx, a.Snapshots, run); err != nil {
			return err
		}
		rtStore = &snapStore{cpStore: t.store, snaps: a.Snapshots, summaryModel: a.Context.CompactionModel}
	}
	// The turn's last response commits with its end when the server can
	// store its transcript message there.
	t.core = &agentruntime.Core{Model: a.Model, Store: rtStore, MaxRounds: a.MaxRounds, ModelID: a.ModelID, MCP: a.MCP, Context: a.Context,
		HoldLast: run.GetCompleteTurnTranscript(), Calls: a.Calls, Tracer: a.Tracer, CaptureContent: a.CaptureContent, Metrics: a.Metrics}
	if a.Previews != nil {
		p := a.Previews(t.sid)
		t.core.Preview, t.store.previews = p, p
	}
	t.wireSandbox(spec)
	return nil
}

// wireSandbox sets how the turn acquires the session's sandbox (starting
// its shell when the agent has bash) and materializes the session's
// resources in it. A self-hosted session has no sandbox: acquiring it
// fails, naming why.
func (t *turn) wireSandbox(spec sandbox.Spec) {
	a, sid := t.a, t.box
	if t.selfHosted {
		t.acquire = noSandbox
		return
	}
	t.acquire = func(ctx context.Context) (sandbox.Sandbox, error) {
		sb, provisioned, err := a.Manager.AcquireProvisioned(ctx, sid, spec)
		if provisioned {
			t.provisioned.Store(true)
		}
		return sb, err
	}
	if slices.Contains(t.tools.BuiltinNames(), tools.Bash) {
		t.acquire = withShell(t.acquire)
	}
	if a.Resources != nil {
		t.materialize = t.materializeResources
	}
}

// materializeResources brings sb up to date with the session's resources
// (files, repositories, skills, memory stores), in a files.materialize
// span.
func (t *turn) materializeResources(ctx context.Context, sb sandbox.Sandbox) (err error) {
	tc := t.run.GetTurnContext()
	var attrs []attribute.KeyValue
	if tc != nil {
		attrs = append(attrs, attribute.Int("mango.files.resources", len(tc.GetResources())))
	}
	ctx, span := t.a.startSpan(ctx, "files.materialize", attrs...)
	defer func() { endSpan(span, err, "resources not materialized") }()
	if tc != nil {
		return t.a.Resources.MaterializeListed(ctx, t.box, sb, tc.GetResources())
	}
	return t.a.Resources.Materialize(ctx, t.box, sb) // a server that predates turn_context
}

// toolSandbox hands a call of the turn the session's sandbox. The first
// call to get it after an acquisition provisioned it (usually the turn's
// first, which may have waited for the acquisition runCore started early)
// tells its span so (agentruntime.MarkProvisioned).
func (t *turn) toolSandbox(ctx context.Context) (sandbox.Sandbox, error) {
	sb, err := t.once.Acquire(ctx, t.acquire, t.materialize)
	if err == nil && t.provisioned.Swap(false) {
		agentruntime.MarkProvisioned(ctx)
	}
	return sb, err
}

// runCore runs the turn's core. Provisioning starts first, overlapping
// the first model call: the first tool call waits only for what is left
// of it.
func (t *turn) runCore() (*agentruntime.Result, error) {
	stopEarly := func() {}
	if t.tools.NeedsSandbox() && !t.selfHosted {
		stopEarly = t.once.Start(t.work, t.acquire, t.materialize)
		t.onReturn(stopEarly)
	}
	run := &agentruntime.Run{
		TurnKey: t.key, SessionID: t.sid, Agent: &t.agent, Tools: t.tools, Conversation: t.conv, TurnMessages: turnMessages(t.keys, t.key),
		Approved: t.approved, Unsaved: t.unsaved, Anchor: t.anchor, Snapshot: t.snapshot, ReadOnlyRoots: t.readOnly,
		Sandbox: t.toolSandbox, Attempt: t.attempt,
	}
	if t.selfHosted {
		run.Sandbox, run.ToolResults = noSandbox, t.a.toolResults(t.sid)
	}
	// File sources of content blocks are read on behalf of this session.
	if tc := t.run.GetThread(); len(tc.GetRoster()) > 0 && tc.GetParentSessionId() == "" && t.a.Threads != nil {
		run.Coordinator = &threadTools{cp: t.a.Threads, sid: t.sid, roster: tc.GetRoster()}
	}
	result, err := t.core.Run(modelfiles.WithSession(t.work, t.box), run)
	stopEarly()
	return result, err
}

// toolResults is where a self-hosted session's turn awaits the answers to
// its built-in tool calls.
func (a *TurnActivities) toolResults(sid string) *rpcToolResults {
	timeout := a.SelfHostedToolTimeout
	if timeout <= 0 {
		timeout = DefaultSelfHostedToolTimeout
	}
	return &rpcToolResults{cp: a.ControlPlane, sessionID: sid, timeout: timeout, maxWait: awaitMaxWait}
}

// settleQueue reports the queue that reaches the session's sandbox: the
// turn's, or, when it had none, the binding's (the sandbox, if the turn
// made one, was bound during it).
func (t *turn) settleQueue(ctx context.Context) {
	t.res.TaskQueue = t.queue
	if t.queue != "" {
		return
	}
	if q, err := t.a.bindingQueue(ctx, t.box); err == nil {
		t.res.TaskQueue = q
	}
}

// turnEnd is how the run of a turn's core ended.
type turnEnd int

const (
	endCompleted   turnEnd = iota // the core ran to an outcome
	endAbandoned                  // the attempt was given up: it fails, the next one resumes
	endInterrupted                // an interrupt stopped the turn: it ends idle
	endFailed                     // the run failed: failTurn decides
)

// classifyEnd tells how a run that returned runErr ended, cancelled
// reporting whether the turn's work context was cancelled and interrupted
// whether by an interrupt.
//
// A cancellation that is not an interrupt abandons the attempt: the
// worker shut down and its grace ran out, or Temporal no longer knows
// this attempt (it timed out while Temporal or this worker was
// unreachable, and another attempt runs the turn).
func classifyEnd(runErr error, cancelled, interrupted bool) turnEnd {
	switch {
	case runErr == nil:
		return endCompleted
	case cancelled && !interrupted:
		return endAbandoned
	case cancelled:
		return endInterrupted
	default:
		return endFailed
	}
}

// finishInterrupted ends an interrupted turn idle, consuming the
// interrupt.
func (t *turn) finishInterrupted(ctx, done context.Context) (*RunTurnResult, error) {
	by, pushed := t.reg.Interrupted()
	consumed := interruptConsumed(t.batch, t.pending[len(t.batch):], by.EventID, pushed)
	// What the agent changed in its memory stores before the interrupt
	// is saved like at any turn's end (a failure is only logged: the
	// interrupted turn ends, and the next placement syncs what is left).
	if !t.thread() {
		t.a.syncMemoryInterrupted(done, t.sid, t.once.Sandbox(), t.run.GetTurnContext())
	}
	if err := t.a.complete(done, t.sid, t.key+"/interrupted", pb.TurnOutcome_TURN_OUTCOME_END_TURN, nil, consumed...); err != nil {
		return nil, err
	}
	if interrupted(ctx) {
		return nil, temporal.NewCanceledError("turn interrupted")
	}
	// Only the push stopped the turn: Temporal has not asked to cancel
	// the activity, which therefore may not report "canceled" (Temporal
	// refuses that answer); it reports the interrupted turn as a result.
	// If the workflow's cancellation is requested meanwhile, the
	// completed result still settles the activity; the turn's end was
	// recorded once either way (keyed by the turn's key).
	t.res.Outcome, t.res.More, t.res.InterruptOutboxID = TurnInterrupted, true, by.OutboxID
	return t.res, nil
}

// interruptConsumed lists the triggers an interrupted turn consumes: its
// batch, the interrupts pending after it and, when pushed, the pushed
// interrupt (pushedID) if it was committed after the turn loaded its run.
func interruptConsumed(batch, rest []*pb.Event, pushedID string, pushed bool) []*pb.Event {
	consumed := append([]*pb.Event(nil), batch...)
	for _, ev := range rest {
		if ev.GetType() == "user.interrupt" {
			consumed = append(consumed, ev)
		}
	}
	if pushed && !slices.ContainsFunc(consumed, func(e *pb.Event) bool { return e.GetId() == pushedID }) {
		consumed = append(consumed, &pb.Event{Id: pushedID})
	}
	return consumed
}

// finish ends a turn whose core ran to an outcome: it syncs the session's
// memory stores, publishes the outputs the agent left (a note on those
// left unpublished precedes the turn's ending) and commits the outcome.
func (t *turn) finish(done context.Context, result *agentruntime.Result) (*RunTurnResult, error) {
	var notes []*pb.NewEvent
	// A self-hosted session never acquires a sandbox (t.once.Sandbox() is
	// nil): it syncs no memory store and publishes no outputs. The memory
	// stores are synced first: the session goes idle with them saved.
	if !t.thread() {
		// A child thread's changes to the shared sandbox are its
		// session's: the primary thread's turn end saves them.
		if err := t.a.syncMemory(done, t.sid, t.once.Sandbox(), t.run.GetTurnContext()); err != nil {
			return nil, err
		}
		if note, err := t.a.publishOutputs(done, t.sid, t.key, t.once.Sandbox()); err != nil {
			return nil, err
		} else if note != nil {
			notes = append(notes, note)
		}
	}
	c := planCommit(result, t.key, t.core.MaxRoundsOrDefault(), notes)
	if err := t.commit(done, result, c); err != nil {
		return nil, err
	}
	t.res.Outcome = c.reported
	return t.res, nil
}

// endCommit is how a turn that ran to an outcome is committed.
type endCommit struct {
	// park: the turn waits for the client (requires_action): events are
	// appended, the batch marked processed, and the turn parked.
	park bool
	// last: the model's last response, held by the runtime, commits with
	// the turn's end (one transaction, one wake-up of the streams),
	// before events.
	last bool
	// outcome ends the turn (unless park), with events.
	outcome pb.TurnOutcome
	events  []*pb.NewEvent
	// reported is the outcome reported to the workflow.
	reported string
}

// planCommit decides how a turn of key that ended with result is
// committed, notes (on outputs) preceding its ending; maxRounds is the
// core's limit of model requests.
func planCommit(result *agentruntime.Result, key string, maxRounds int, notes []*pb.NewEvent) endCommit {
	switch result.Outcome {
	case agentruntime.OutcomeRequiresAction:
		return endCommit{park: true, events: notes, reported: TurnParked}
	case agentruntime.OutcomeRoundLimit:
		ev := errorEvent(key+"/round_limit", "tool_use_limit_reached_error",
			fmt.Sprintf("the turn reached the limit of %d model requests and was ended", maxRounds), retryExhausted)
		return endCommit{outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN, events: append(notes, ev), reported: TurnIdle}
	case agentruntime.OutcomeBudgetReached:
		// Idle with stop_reason budget_reached, before the next model
		// request; the client raises the budget to continue.
		return endCommit{outcome: pb.TurnOutcome_TURN_OUTCOME_BUDGET_REACHED, events: notes, reported: TurnIdle}
	case agentruntime.OutcomeContextWindow:
		ev := errorEvent(key+"/context_window", "unknown_error", result.Detail, retryExhausted)
		return endCommit{outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN, events: append(notes, ev), reported: TurnIdle}
	default:
		return endCommit{last: true, outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN, events: notes, reported: TurnIdle}
	}
}

// commit carries out c for the turn that ended with result.
func (t *turn) commit(done context.Context, result *agentruntime.Result, c endCommit) error {
	a, sid := t.a, t.sid
	switch {
	case c.park:
		if len(c.events) > 0 {
			if _, err := a.ControlPlane.AppendEvents(done, &pb.AppendEventsRequest{SessionId: sid, Events: c.events}); err != nil {
				return fmt.Errorf("report output limits: %w", err)
			}
		}
		if err := a.markProcessed(done, sid, t.batch); err != nil {
			return err
		}
		if _, err := a.ControlPlane.ParkTurn(done, &pb.ParkTurnRequest{SessionId: sid, RequiredActionEventIds: result.RequiredEventIDs}); err != nil {
			return fmt.Errorf("park turn: %w", err)
		}
		return nil
	case c.last:
		transcript, events, err := t.store.lastCommit(result.Last)
		if err != nil {
			return err
		}
		if reply := threadReply(t.run.GetThread(), t.key, lastBlocks(result.Last)); reply != nil {
			events = append(events, reply)
		}
		return a.completeTurn(done, &pb.CompleteTurnRequest{SessionId: sid, Outcome: c.outcome,
			Events: append(events, c.events...), Transcript: transcript, TurnKey: t.key, ProcessedEventIds: eventIDs(t.batch)})
	default:
		return a.complete(done, sid, t.key, c.outcome, c.events, t.batch...)
	}
}

// failTurn records a failed turn of session sid, whose sandbox is box's: transient model errors are retried by
// the workflow (session.error retrying + rescheduled) until exhausted; a
// vanished sandbox or an unrecoverable model error terminates the session;
// a sandbox that cannot be provisioned ends the turn idle. Anything else
// (ControlPlane unreachable, ...) fails the activity, which Temporal
// retries; the retry resumes the turn.
func (a *TurnActivities) failTurn(ctx context.Context, sid, box, turnKey string, attempt int, batch []*pb.Event, res *RunTurnResult, runErr error) (*RunTurnResult, error) {
	f, ok := planFailure(runErr, a.vanishedSandbox(ctx, box, runErr), turnKey, attempt)
	if !ok {
		return nil, runErr
	}
	var processed []*pb.Event
	if f.consume {
		processed = batch
	}
	if err := a.complete(ctx, sid, f.key, f.outcome, []*pb.NewEvent{f.event}, processed...); err != nil {
		return nil, err
	}
	res.Outcome, res.RetryAfter = f.reported, f.retryAfter
	return res, nil
}

// vanishedSandbox returns the sandbox runErr reports gone: the one it
// names, or, when an operation found the session's cached sandbox missing
// (between turns or mid-turn), that one, forgotten. nil: none.
func (a *TurnActivities) vanishedSandbox(ctx context.Context, sid string, runErr error) *sandbox.VanishedError {
	var vanished *sandbox.VanishedError
	if errors.As(runErr, &vanished) || !errors.Is(runErr, sandbox.ErrNotFound) {
		return vanished
	}
	a.Manager.Forget(sid)
	ref := sandbox.Ref{}
	if b, err := a.ControlPlane.GetBinding(ctx, &pb.GetBindingRequest{SessionId: sid}); err == nil {
		ref = sandbox.Ref{Provider: b.GetBinding().GetProvider(), ID: b.GetBinding().GetExternalId()}
	}
	return &sandbox.VanishedError{SessionID: sid, Ref: ref}
}

// failure is how a failed turn is recorded: one CompleteTurn.
type failure struct {
	key     string // CompleteTurn's turn key
	outcome pb.TurnOutcome
	event   *pb.NewEvent // the session.error
	// consume: the turn's batch is marked processed with it (not when
	// the turn is tried again).
	consume bool
	// reported is the outcome reported to the workflow, retryAfter the
	// delay before the retry of TurnRetry.
	reported   string
	retryAfter time.Duration
}

// planFailure decides how a turn of key whose run failed with runErr on
// its attempt-th try is recorded; vanished is the sandbox that
// disappeared, if one did. ok is false for a failure none of those
// describe: the activity fails.
func planFailure(runErr error, vanished *sandbox.VanishedError, key string, attempt int) (f failure, ok bool) {
	var provision *sandbox.ProvisionError
	var unmountable *sessionfiles.ResourceError
	var me *model.Error
	endIdle := func(eventKey, msg string) failure {
		return failure{key: key, outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN, consume: true, reported: TurnIdle,
			event: errorEvent(eventKey, "unknown_error", msg, retryExhausted)}
	}
	terminate := func(eventKey, typ, msg string) failure {
		return failure{key: key, outcome: pb.TurnOutcome_TURN_OUTCOME_TERMINATED, consume: true, reported: TurnStopped,
			event: errorEvent(eventKey, typ, msg, retryTerminal)}
	}
	switch {
	case errors.As(runErr, &unmountable):
		// The client can fix the resource (or delete it); the next message
		// tries again.
		return endIdle(key+"/resource/"+unmountable.ResourceID, unmountable.Error()), true
	case errors.As(runErr, &provision):
		// The environment cannot be set up as asked: retrying the turn
		// would fail the same way. The turn ends; the next message tries
		// again (the environment may have been fixed meanwhile).
		return endIdle(key+"/sandbox_provisioning", provision.Error()), true
	case vanished != nil:
		return terminate(key+"/sandbox_vanished", "unknown_error", vanished.Error()), true
	case errors.As(runErr, &me) && me.Retryable:
		return retryFailure(me, key, attempt), true
	case errors.As(runErr, &me):
		return terminate(key+"/model_error", me.SessionErrorType(), me.Message), true
	}
	return failure{}, false
}

// retryFailure records a transient model error on the attempt-th try of
// the turn of key: the turn is rescheduled, after the server's delay or a
// doubling one (at most a minute), until MaxModelAttempts tries failed;
// then it ends idle, its retries exhausted.
func retryFailure(me *model.Error, key string, attempt int) failure {
	attemptKey := fmt.Sprintf("%s/attempt/%d", key, attempt)
	if attempt+1 >= MaxModelAttempts {
		return failure{key: key, outcome: pb.TurnOutcome_TURN_OUTCOME_RETRIES_EXHAUSTED, consume: true, reported: TurnIdle,
			event: errorEvent(attemptKey, me.SessionErrorType(), me.Message, retryExhausted)}
	}
	delay := me.RetryAfter
	if delay <= 0 {
		delay = time.Duration(1<<attempt) * time.Second
	}
	return failure{key: attemptKey, outcome: pb.TurnOutcome_TURN_OUTCOME_RESCHEDULING, reported: TurnRetry,
		retryAfter: min(delay, time.Minute), event: errorEvent(attemptKey, me.SessionErrorType(), me.Message, retryRetrying)}
}

// Retry statuses of a session.error (its error.retry_status.type): what
// the client should expect next.
const (
	retryRetrying  = "retrying"  // the turn is tried again by itself
	retryExhausted = "exhausted" // the turn ended; the session is idle and usable
	retryTerminal  = "terminal"  // the session terminated
)

// errorEvent is a session.error; retryStatus is one of the retry*
// constants and is sent as the object {"type": retryStatus} the SDK's
// typed union expects.
func errorEvent(key, typ, message, retryStatus string) *pb.NewEvent {
	body := map[string]any{"type": typ, "message": message, "retry_status": map[string]string{"type": retryStatus}}
	b, _ := json.Marshal(map[string]any{"error": body})
	return &pb.NewEvent{Key: key + "/session_error", Type: "session.error", Body: string(b)}
}

// complete ends (or reschedules) the turn with events, marking the
// processed triggers in the same transaction.
func (a *TurnActivities) complete(ctx context.Context, sid, turnKey string, outcome pb.TurnOutcome, events []*pb.NewEvent, processed ...*pb.Event) error {
	return a.completeTurn(ctx, &pb.CompleteTurnRequest{SessionId: sid, Outcome: outcome, Events: events, TurnKey: turnKey,
		ProcessedEventIds: eventIDs(processed)})
}

// completeTurn sends req.
func (a *TurnActivities) completeTurn(ctx context.Context, req *pb.CompleteTurnRequest) error {
	if _, err := a.ControlPlane.CompleteTurn(ctx, req); err != nil {
		return fmt.Errorf("complete turn (%s): %w", req.GetOutcome(), err)
	}
	return nil
}

func (a *TurnActivities) markProcessed(ctx context.Context, sid string, evs []*pb.Event) error {
	if len(evs) == 0 {
		return nil
	}
	ids := make([]string, 0, len(evs))
	for _, e := range evs {
		ids = append(ids, e.GetId())
	}
	_, err := a.ControlPlane.MarkTriggersProcessed(ctx, &pb.MarkTriggersProcessedRequest{SessionId: sid, EventIds: ids})
	if err != nil {
		return fmt.Errorf("mark triggers processed: %w", err)
	}
	return nil
}

func (a *TurnActivities) bindingQueue(ctx context.Context, sid string) (string, error) {
	resp, err := a.ControlPlane.GetBinding(ctx, &pb.GetBindingRequest{SessionId: sid})
	if err != nil {
		return "", err
	}
	return resp.GetBinding().GetTaskQueue(), nil
}

// interrupted reports whether the turn's cancellation is an interrupt:
// one Temporal requested (the workflow cancelled the turn: a
// user.interrupt, a deletion) or a pushed user.interrupt meant for the
// turn (interrupts.ErrInterrupted). A worker shutting down, or a
// heartbeat answered "no such attempt" (the attempt timed out meanwhile),
// cancel the context with other causes.
func interrupted(ctx context.Context) bool {
	var canceled *temporal.CanceledError
	cause := context.Cause(ctx)
	return errors.As(cause, &canceled) || errors.Is(cause, interrupts.ErrInterrupted)
}

// eventIDs lists the ids of evs.
func eventIDs(evs []*pb.Event) []string {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.GetId()
	}
	return ids
}

// abandonReason says why a cancelled attempt that was not interrupted ends.
func abandonReason(ctx context.Context) string {
	select {
	case <-activity.GetWorkerStopChannel(ctx):
		return "worker shutting down; the turn resumes on another worker"
	default:
		return "this attempt of the turn is no longer current; the turn resumes in the next attempt"
	}
}

// heartbeat records a heartbeat every HeartbeatEvery until stopped;
// heartbeat responses carry the cancellation of an interrupted turn. The
// first comes after one interval, not at once: a short turn (most turns)
// ends before it, saving Temporal a history write per turn.
func (a *TurnActivities) heartbeat(ctx context.Context) func() {
	every := a.HeartbeatEvery
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			activity.RecordHeartbeat(ctx)
		}
	}()
	return func() { close(stop) }
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// transcriptBody is a transcript entry as stored: the provider-native
// message and, on assistant messages, the anchor of the request that
// produced it (never sent to the model).
type transcriptBody struct {
	model.Message
	Anchor *agentruntime.Anchor `json:"mango_anchor,omitempty"`
}

func userMessage(ev *pb.Event) (model.Message, error) {
	if msg, ok, err := outcomeMessage(ev); ok {
		return msg, err
	}
	var body struct {
		Content []json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal([]byte(ev.GetBody()), &body); err != nil {
		return model.Message{}, fmt.Errorf("decode user.message %s: %w", ev.GetId(), err)
	}
	blocks, err := contentBlocks(body.Content)
	if err != nil {
		return model.Message{}, fmt.Errorf("decode user.message %s: %w", ev.GetId(), err)
	}
	return model.Message{Role: "user", Content: blocks}, nil
}

// answerOf interprets an answer trigger: the event id it answers, the
// result to journal (journal) and whether it approves (ok).
func answerOf(ev *pb.Event) (answered string, r tools.Result, journal, ok bool, err error) {
	var ids struct {
		ToolUseID       string `json:"tool_use_id"`
		CustomToolUseID string `json:"custom_tool_use_id"`
	}
	if err := json.Unmarshal([]byte(ev.GetBody()), &ids); err != nil {
		return "", r, false, false, err
	}
	answered = ids.ToolUseID
	if answered == "" {
		answered = ids.CustomToolUseID
	}
	r, journal, ok, err = agentruntime.Answer(ev.GetType(), json.RawMessage(ev.GetBody()))
	return answered, r, journal, ok, err
}

// withShell has acquire also start the sandbox's persistent shell, where it
// keeps one, so that the first bash call does not wait for it (a
// container's shell costs an exec): in the early acquisition, that happens
// while the model is still answering. It does so once, after the first
// acquisition that succeeds (every tool call of the turn acquires). A
// shell that fails to start is started, and its error reported, by the
// call.
func withShell(acquire func(context.Context) (sandbox.Sandbox, error)) func(context.Context) (sandbox.Sandbox, error) {
	var started atomic.Bool
	return func(ctx context.Context) (sandbox.Sandbox, error) {
		sb, err := acquire(ctx)
		if sh, ok := sb.(sandbox.Shell); ok && err == nil && started.CompareAndSwap(false, true) {
			_ = sh.StartShell(ctx)
		}
		return sb, err
	}
}

// systemWithMessages is the system prompt system followed by the session's
// system messages (system.message events), in order, each a paragraph of
// its own.
func systemWithMessages(system string, messages []string) string {
	for _, m := range messages {
		if system != "" {
			system += "\n\n"
		}
		system += m
	}
	return system
}
