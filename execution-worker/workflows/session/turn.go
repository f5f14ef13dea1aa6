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
	// Calls are the tool calls this worker runs (NewCalls): an attempt
	// Temporal gives up on while this worker lives leaves its call running
	// for the next attempt. nil: a call ends with its attempt, and the next
	// attempt reports it ambiguous.
	Calls *agentruntime.Calls
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
func (a *TurnActivities) RunTurn(ctx context.Context, in RunTurnInput) (ended *RunTurnResult, failed error) {
	if a.OnTurn != nil {
		start := time.Now()
		defer func() {
			outcome := "error"
			if failed == nil && ended != nil {
				outcome = ended.Outcome
			}
			a.OnTurn(outcome, time.Since(start))
		}()
	}
	sid := in.SessionID
	queue := in.TaskQueue
	if l := in.Locality; l != "" {
		if a.Serves == nil || !a.Serves(l) {
			// Not run eagerly, and taken from the workflow's queue by a
			// worker of another locality: the locality's queue reaches
			// the sandbox.
			return &RunTurnResult{Outcome: TurnNothing, More: true, TaskQueue: l}, nil
		}
		queue = l
	}
	stopBeat := a.heartbeat(ctx)
	defer stopBeat()
	run, tr, err := a.Transcripts.load(ctx, a.ControlPlane, sid)
	if c := status.Code(err); c == codes.NotFound || c == codes.FailedPrecondition {
		// Deleted, or being deleted: nothing more to run, ever.
		return &RunTurnResult{Outcome: TurnGone}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load run of session %s: %w", sid, err)
	}
	res := &RunTurnResult{Outcome: TurnNothing}
	pending := run.GetPendingTriggers()
	if len(pending) == 0 {
		return res, nil
	}
	// A queued interrupt with no turn running has nothing to stop.
	if pending[0].GetType() == "user.interrupt" {
		if err := a.markProcessed(ctx, sid, pending[:1]); err != nil {
			return nil, err
		}
		res.More = len(pending) > 1
		return res, nil
	}
	// A turn runs only where the session's sandbox can be reached. A first
	// turn's activity is scheduled on the provider's queue, before any
	// sandbox exists; retried after the sandbox was bound to a locality
	// (its worker died after committing the turn's end), it must not run
	// a later turn on whichever worker took it: it hands the workflow the
	// binding's queue instead.
	if queue == "" {
		if queue, err = a.bindingQueue(ctx, sid); err != nil {
			return nil, fmt.Errorf("load binding of session %s: %w", sid, err)
		}
		if queue != "" && queue != activity.GetInfo(ctx).TaskQueue {
			return &RunTurnResult{Outcome: TurnNothing, More: true, TaskQueue: queue}, nil
		}
	}
	store := &cpStore{cp: a.ControlPlane, sessionID: sid}
	conv, keys, anchor := tr.projection()
	var batch []*pb.Event
	var turnKey string
	var unsaved []agentruntime.TranscriptMessage
	approved := map[string]bool{}
	if isAnswer(pending[0].GetType()) {
		for _, t := range pending {
			if !isAnswer(t.GetType()) {
				break
			}
			batch = append(batch, t)
			answered, r, journal, ok, err := answerOf(t)
			if err != nil {
				return nil, err
			}
			if journal {
				if _, err := store.RecordToolResult(ctx, answered, r); err != nil {
					return nil, err
				}
			}
			if ok {
				approved[answered] = true
			}
		}
		if len(keys) == 0 {
			return nil, errors.New("an answer arrived for a session without a parked turn")
		}
		turnKey, _, _ = strings.Cut(keys[len(keys)-1], "/")
	} else {
		batch = pending[:1]
		turnKey = pending[0].GetId()
		first := turnKey + "/0"
		if !contains(keys, first) {
			msg, err := userMessage(pending[0])
			if err != nil {
				return nil, err
			}
			// Stored with the turn's first commit.
			unsaved = append(unsaved, agentruntime.TranscriptMessage{Key: first, Msg: msg})
			conv, keys = append(conv, msg), append(keys, first)
		}
	}
	turnMessages := 0
	for _, k := range keys {
		if strings.HasPrefix(k, turnKey+"/") {
			turnMessages++
		}
	}
	res.More = len(pending) > len(batch)
	// The turn's work runs under a context a pushed interrupt cancels
	// (registered now, so that one pushed since GetRun counts); the
	// bookkeeping around it keeps the activity's.
	turnCtx, turn := a.Interrupts.Start(ctx, sid, run.GetLastSeq(), eventIDs(pending))
	defer turn.Done()
	if run.GetStatus() != pb.SessionStatus_SESSION_STATUS_RUNNING {
		if err := a.complete(ctx, sid, turnKey+"/a"+fmt.Sprint(in.Attempt), pb.TurnOutcome_TURN_OUTCOME_RUNNING, nil); err != nil {
			return nil, err
		}
	}

	var agent agentruntime.Agent
	if err := json.Unmarshal([]byte(run.GetAgent()), &agent); err != nil {
		return nil, fmt.Errorf("decode agent snapshot: %w", err)
	}
	toolCfg, err := agentruntime.ParseToolConfig(json.RawMessage(run.GetTools()))
	if err != nil {
		return nil, err
	}
	spec, err := sandboxSpec(run.GetEnvironmentConfig(), run.GetMcpServers())
	if err != nil {
		return nil, err
	}
	store.model = agent.Model.ID
	if a.ModelID != "" {
		store.model = a.ModelID
	}
	store.exhausted.Store(run.GetBudgetExhausted())
	// With the snapshot service the turn compacts its context, and
	// continues from the snapshot in force.
	var rtStore agentruntime.Store = store
	var snapshot *agentruntime.ContextSnapshot
	if a.Snapshots != nil {
		if snapshot, err = turnSnapshot(ctx, a.Snapshots, run); err != nil {
			return nil, err
		}
		rtStore = &snapStore{cpStore: store, snaps: a.Snapshots, summaryModel: a.Context.CompactionModel}
	}
	// The turn's last response commits with its end when the server can
	// store its transcript message there.
	core := &agentruntime.Core{Model: a.Model, Store: rtStore, MaxRounds: a.MaxRounds, ModelID: a.ModelID, MCP: a.MCP, Context: a.Context,
		HoldLast: run.GetCompleteTurnTranscript(), Calls: a.Calls}
	if a.Previews != nil {
		p := a.Previews(sid)
		core.Preview, store.previews = p, p
	}
	var once sessionfiles.Once
	acquire := func(ctx context.Context) (sandbox.Sandbox, error) { return a.Manager.Acquire(ctx, sid, spec) }
	if slices.Contains(toolCfg.BuiltinNames(), tools.Bash) {
		acquire = withShell(acquire)
	}
	var materialize func(context.Context, sandbox.Sandbox) error
	if a.Resources != nil {
		materialize = func(ctx context.Context, sb sandbox.Sandbox) error {
			if tc := run.GetTurnContext(); tc != nil {
				return a.Resources.MaterializeListed(ctx, sid, sb, tc.GetResources())
			}
			return a.Resources.Materialize(ctx, sid, sb) // a server that predates turn_context
		}
	}
	// Provisioning starts now, overlapping the first model call; the first
	// tool call waits only for what is left of it.
	stopEarly := func() {}
	if toolCfg.NeedsSandbox() {
		stopEarly = once.Start(turnCtx, acquire, materialize)
		defer stopEarly()
	}
	// File sources of content blocks are read on behalf of this session.
	result, runErr := core.Run(modelfiles.WithSession(turnCtx, sid), &agentruntime.Run{
		TurnKey: turnKey, SessionID: sid, Agent: &agent, Tools: toolCfg, Conversation: conv, TurnMessages: turnMessages, Approved: approved, Unsaved: unsaved,
		Anchor: anchor, Snapshot: snapshot,
		Sandbox: func(ctx context.Context) (sandbox.Sandbox, error) { return once.Acquire(ctx, acquire, materialize) },
	})
	stopEarly()
	// From here on the turn's ending must be recorded even if the activity
	// was cancelled (an interrupt): use a context that outlives it.
	done := context.WithoutCancel(ctx)
	res.TaskQueue = queue
	if queue == "" {
		// The sandbox, if the turn made one, was bound during it.
		if q, err := a.bindingQueue(done, sid); err == nil {
			res.TaskQueue = q
		}
	}
	switch {
	case runErr == nil:
	case turnCtx.Err() != nil && !interrupted(turnCtx):
		// The attempt was abandoned, not interrupted: the worker shut down
		// and its grace ran out, or Temporal no longer knows this attempt
		// (it timed out while Temporal or this worker was unreachable, and
		// another attempt runs the turn). This attempt fails; the next one
		// resumes from the transcript and the tool journal.
		return nil, temporal.NewApplicationErrorWithCause(abandonReason(ctx), "TurnAttemptAbandoned", runErr)
	case turnCtx.Err() != nil:
		// Interrupted: end the turn idle, and consume the interrupt.
		consumed := append([]*pb.Event(nil), batch...)
		for _, t := range pending[len(batch):] {
			if t.GetType() == "user.interrupt" {
				consumed = append(consumed, t)
			}
		}
		by, pushed := turn.Interrupted()
		if pushed && !slices.ContainsFunc(consumed, func(e *pb.Event) bool { return e.GetId() == by.EventID }) {
			// Committed after the turn loaded its run.
			consumed = append(consumed, &pb.Event{Id: by.EventID})
		}
		if err := a.complete(done, sid, turnKey+"/interrupted", pb.TurnOutcome_TURN_OUTCOME_END_TURN, nil, consumed...); err != nil {
			return nil, err
		}
		if interrupted(ctx) {
			return nil, temporal.NewCanceledError("turn interrupted")
		}
		// Only the push stopped the turn: Temporal has not asked to cancel
		// the activity, which therefore may not report "canceled"
		// (Temporal refuses that answer); it reports the interrupted turn
		// as a result. If the workflow's cancellation is requested
		// meanwhile, the completed result still settles the activity; the
		// turn's end was recorded once either way (keyed by turnKey).
		res.Outcome, res.More, res.InterruptOutboxID = TurnInterrupted, true, by.OutboxID
		return res, nil
	default:
		return a.failTurn(done, sid, turnKey, in.Attempt, batch, res, runErr)
	}
	// A note on outputs left unpublished precedes the turn's ending.
	var notes []*pb.NewEvent
	if note, err := a.publishOutputs(done, sid, turnKey, once.Sandbox()); err != nil {
		return nil, err
	} else if note != nil {
		notes = append(notes, note)
	}
	switch result.Outcome {
	case agentruntime.OutcomeRequiresAction:
		if len(notes) > 0 {
			if _, err := a.ControlPlane.AppendEvents(done, &pb.AppendEventsRequest{SessionId: sid, Events: notes}); err != nil {
				return nil, fmt.Errorf("report output limits: %w", err)
			}
		}
		if err := a.markProcessed(done, sid, batch); err != nil {
			return nil, err
		}
		if _, err := a.ControlPlane.ParkTurn(done, &pb.ParkTurnRequest{SessionId: sid, RequiredActionEventIds: result.RequiredEventIDs}); err != nil {
			return nil, fmt.Errorf("park turn: %w", err)
		}
		res.Outcome = TurnParked
		return res, nil
	case agentruntime.OutcomeRoundLimit:
		ev := errorEvent(turnKey+"/round_limit", "tool_use_limit_reached_error",
			fmt.Sprintf("the turn reached the limit of %d model requests and was ended", core.MaxRoundsOrDefault()), retryExhausted)
		if err := a.complete(done, sid, turnKey, pb.TurnOutcome_TURN_OUTCOME_END_TURN, append(notes, ev), batch...); err != nil {
			return nil, err
		}
	case agentruntime.OutcomeBudgetReached:
		// Idle with stop_reason budget_reached, before the next model
		// request; the client raises the budget to continue.
		if err := a.complete(done, sid, turnKey, pb.TurnOutcome_TURN_OUTCOME_BUDGET_REACHED, notes, batch...); err != nil {
			return nil, err
		}
	case agentruntime.OutcomeContextWindow:
		ev := errorEvent(turnKey+"/context_window", "unknown_error", result.Detail, retryExhausted)
		if err := a.complete(done, sid, turnKey, pb.TurnOutcome_TURN_OUTCOME_END_TURN, append(notes, ev), batch...); err != nil {
			return nil, err
		}
	default:
		// The model's last response (when the runtime held it) commits
		// with the turn's end: one transaction, one wake-up of the streams.
		transcript, events, err := store.lastCommit(result.Last)
		if err != nil {
			return nil, err
		}
		if err := a.completeTurn(done, &pb.CompleteTurnRequest{SessionId: sid, Outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN,
			Events: append(events, notes...), Transcript: transcript, TurnKey: turnKey, ProcessedEventIds: eventIDs(batch)}); err != nil {
			return nil, err
		}
	}
	res.Outcome = TurnIdle
	return res, nil
}

// failTurn records a failed turn: transient model errors are retried by
// the workflow (session.error retrying + rescheduled) until exhausted; a
// vanished sandbox or an unrecoverable model error terminates the session;
// a sandbox that cannot be provisioned ends the turn idle.
func (a *TurnActivities) failTurn(ctx context.Context, sid, turnKey string, attempt int, batch []*pb.Event, res *RunTurnResult, runErr error) (*RunTurnResult, error) {
	var vanished *sandbox.VanishedError
	var me *model.Error
	if !errors.As(runErr, &vanished) && errors.Is(runErr, sandbox.ErrNotFound) {
		// The cached sandbox disappeared between turns or mid-turn.
		a.Manager.Forget(sid)
		ref := sandbox.Ref{}
		if b, err := a.ControlPlane.GetBinding(ctx, &pb.GetBindingRequest{SessionId: sid}); err == nil {
			ref = sandbox.Ref{Provider: b.GetBinding().GetProvider(), ID: b.GetBinding().GetExternalId()}
		}
		vanished = &sandbox.VanishedError{SessionID: sid, Ref: ref}
	}
	var provision *sandbox.ProvisionError
	var unmountable *sessionfiles.ResourceError
	switch {
	case errors.As(runErr, &unmountable):
		// The client can fix the resource (or delete it); the next message
		// tries again.
		ev := errorEvent(turnKey+"/resource/"+unmountable.ResourceID, "unknown_error", unmountable.Error(), retryExhausted)
		if err := a.complete(ctx, sid, turnKey, pb.TurnOutcome_TURN_OUTCOME_END_TURN, []*pb.NewEvent{ev}, batch...); err != nil {
			return nil, err
		}
		res.Outcome = TurnIdle
		return res, nil
	case errors.As(runErr, &provision):
		// The environment cannot be set up as asked: retrying the turn
		// would fail the same way. The turn ends; the next message tries
		// again (the environment may have been fixed meanwhile).
		ev := errorEvent(turnKey+"/sandbox_provisioning", "unknown_error", provision.Error(), retryExhausted)
		if err := a.complete(ctx, sid, turnKey, pb.TurnOutcome_TURN_OUTCOME_END_TURN, []*pb.NewEvent{ev}, batch...); err != nil {
			return nil, err
		}
		res.Outcome = TurnIdle
		return res, nil
	case vanished != nil:
		ev := errorEvent(turnKey+"/sandbox_vanished", "unknown_error", vanished.Error(), retryTerminal)
		if err := a.complete(ctx, sid, turnKey, pb.TurnOutcome_TURN_OUTCOME_TERMINATED, []*pb.NewEvent{ev}, batch...); err != nil {
			return nil, err
		}
		res.Outcome = TurnStopped
		return res, nil
	case errors.As(runErr, &me) && me.Retryable:
		key := fmt.Sprintf("%s/attempt/%d", turnKey, attempt)
		if attempt+1 >= MaxModelAttempts {
			ev := errorEvent(key, me.SessionErrorType(), me.Message, retryExhausted)
			if err := a.complete(ctx, sid, turnKey, pb.TurnOutcome_TURN_OUTCOME_RETRIES_EXHAUSTED, []*pb.NewEvent{ev}, batch...); err != nil {
				return nil, err
			}
			res.Outcome = TurnIdle
			return res, nil
		}
		ev := errorEvent(key, me.SessionErrorType(), me.Message, retryRetrying)
		if err := a.complete(ctx, sid, key, pb.TurnOutcome_TURN_OUTCOME_RESCHEDULING, []*pb.NewEvent{ev}); err != nil {
			return nil, err
		}
		delay := me.RetryAfter
		if delay <= 0 {
			delay = time.Duration(1<<attempt) * time.Second
		}
		res.Outcome, res.RetryAfter = TurnRetry, min(delay, time.Minute)
		return res, nil
	case errors.As(runErr, &me):
		ev := errorEvent(turnKey+"/model_error", me.SessionErrorType(), me.Message, retryTerminal)
		if err := a.complete(ctx, sid, turnKey, pb.TurnOutcome_TURN_OUTCOME_TERMINATED, []*pb.NewEvent{ev}, batch...); err != nil {
			return nil, err
		}
		res.Outcome = TurnStopped
		return res, nil
	}
	// Anything else (ControlPlane unreachable, ...) fails the activity,
	// which Temporal retries; the retry resumes the turn.
	return nil, runErr
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
