package session

import (
	"errors"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// continueAsNewAfter bounds a run's history (events) before it continues
// as new.
const continueAsNewAfter = 4000

// carriedInterrupts bounds the outbox ids of pushed interrupts carried
// across continue-as-new: a signal is due within moments of its push, so
// only the latest few can still be in flight.
const carriedInterrupts = 64

// defaultHostQueueTimeout is how long a turn waits on the locality queue
// of the session's sandbox before the workflow asks whether any worker of
// that locality is alive (MANGO_HOST_GONE_AFTER on the api-server).
const defaultHostQueueTimeout = 2 * time.Minute

// localityCheckChange versions the handling of a turn nobody picked up:
// before it the session was terminated at once (FailSessionHostGone);
// since, CheckLocality tells a busy locality (schedule again), a moved
// binding (follow it) and a dead one (the turn fails, the session stays
// usable) apart.
const localityCheckChange = "locality-check"

// pushedInterruptChange versions the handling of an interrupt signal whose
// interrupt a worker's push already applied: before it the signal
// cancelled whichever turn was running when it arrived (after the pushed
// stop, the session's next one); since, it cancels nothing.
const pushedInterruptChange = "pushed-interrupt"

// eagerTurnChange versions where a turn of a session bound to a locality
// is scheduled: before it, always on the locality queue; since, on the
// workflow's own queue when its worker polls the locality queue too
// (Workflow.Serves), so that Temporal hands the turn to that worker at once.
const eagerTurnChange = "eager-turn"

// Workflow is the Session Workflow with what it knows of the worker
// process that runs it.
type Workflow struct {
	// Serves reports whether this worker process polls a task queue. A
	// turn of a session whose sandbox's locality queue it polls is
	// scheduled on the workflow's own queue, where Temporal hands the
	// activity to this worker in its answer to the workflow task that
	// scheduled it (eager activity execution), not through the locality
	// queue: one task hand-off and one poll fewer per turn (measured: 29%
	// less Temporal CPU per turn). A worker of another locality that
	// takes it anyway hands it back, and the session's later turns of this
	// run go through the locality queue. nil: every turn does.
	Serves func(queue string) bool
}

// SessionWorkflow is the Session Workflow of a worker that runs no turn
// eagerly (Workflow with a nil Serves): tests and replays.
func SessionWorkflow(ctx workflow.Context, in *sessionv1.SessionWorkflowInput) error {
	return (&Workflow{}).Run(ctx, in)
}

// eager reports whether this worker serves the locality queue, as
// recorded in the history (a marker each time the answer changes).
func (w *Workflow) eager(ctx workflow.Context, queue string) bool {
	if workflow.GetVersion(ctx, eagerTurnChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false
	}
	var serves bool
	err := workflow.MutableSideEffect(ctx, "serves/"+queue,
		func(workflow.Context) any { return w.Serves != nil && w.Serves(queue) },
		func(a, b any) bool { return a == b }).Get(&serves)
	return err == nil && serves
}

// Run runs a session's turns, one RunTurn activity per pending
// trigger, in order. Wake-up signals (sent by the api-server after it
// admits work) make it look for pending triggers; an interrupt signal
// cancels the turn in flight (the activity ends it idle); a delete signal
// stops the workflow. Transient model errors are retried after a delay,
// the session rescheduled meanwhile. The first turn runs on the
// provider's queue; once the session has a sandbox, turns run on the queue
// its binding names (the host holding it, for local and docker), or
// eagerly on the workflow's worker when that worker polls that queue.
func (w *Workflow) Run(ctx workflow.Context, in *sessionv1.SessionWorkflowInput) error {
	s := newSessionState(ctx, w, in)
	for !s.deleted {
		if ctx.Err() != nil {
			// Cancelled (the session is being deleted): stop here.
			return temporal.NewCanceledError("session workflow cancelled")
		}
		s.drainSignals(ctx)
		if s.deleted {
			break
		}
		if !s.pending {
			if err := s.maybeContinueAsNew(ctx); err != nil {
				return err
			}
			s.awaitSignal(ctx)
			continue
		}
		s.pending = false
		if end, err := s.runTurn(ctx); end {
			return err
		}
	}
	return nil
}

// sessionState is what a run of the Session Workflow knows of its session
// between turns.
type sessionState struct {
	w       *Workflow
	in      *sessionv1.SessionWorkflowInput
	signals workflow.ReceiveChannel
	// queue is where turns run: the queue that reaches the session's
	// sandbox ("" before it has one: the provider's).
	queue string
	// pending: work may be waiting (the run started or continued, a
	// wake-up signal came, a turn left more).
	pending bool
	// attempt counts the tries of the pending turn that ended in a
	// transient model error.
	attempt int
	// deleted: a delete signal came; the workflow ends.
	deleted bool
	// pushed holds the outbox ids of interrupts whose turn a worker's
	// push already stopped (TurnInterrupted results): their signals,
	// arriving later, are spent. The latest are carried across
	// continue-as-new, since a signal may arrive after it.
	pushed []int64
	// eagerOK: turns may run eagerly; not after one was handed back.
	eagerOK bool
}

// newSessionState is the state a run of the workflow starts from: started
// (or continued) because work may be waiting.
func newSessionState(ctx workflow.Context, w *Workflow, in *sessionv1.SessionWorkflowInput) *sessionState {
	return &sessionState{
		w:       w,
		in:      in,
		signals: workflow.GetSignalChannel(ctx, sessionwf.SignalWakeup),
		queue:   in.GetTaskQueue(),
		pending: true,
		pushed:  slices.Clone(in.GetPushedInterruptOutboxIds()),
		eagerOK: true,
	}
}

// receive applies a wake-up signal; cancelTurn, when a turn is in flight,
// cancels it.
func (s *sessionState) receive(ctx workflow.Context, sig *sessionv1.WakeupSignal, cancelTurn func()) {
	switch sig.GetKind() {
	case sessionv1.WakeupKind_WAKEUP_KIND_DELETE:
		s.deleted = true
		if cancelTurn != nil {
			cancelTurn()
		}
	case sessionv1.WakeupKind_WAKEUP_KIND_INTERRUPT:
		s.pending = true
		if id := sig.GetOutboxId(); id != 0 && slices.Contains(s.pushed, id) &&
			workflow.GetVersion(ctx, pushedInterruptChange, workflow.DefaultVersion, 1) == 1 {
			return // its turn already ended: the running one is a later turn
		}
		if cancelTurn != nil {
			cancelTurn()
		}
	default:
		s.pending = true
	}
}

// receiveOn returns the selector callback that receives one wake-up
// signal from the channel and applies it (see receive).
func (s *sessionState) receiveOn(ctx workflow.Context, cancelTurn func()) func(workflow.ReceiveChannel, bool) {
	return func(c workflow.ReceiveChannel, _ bool) {
		var sig sessionv1.WakeupSignal
		c.Receive(ctx, &sig)
		s.receive(ctx, &sig, cancelTurn)
	}
}

// drainSignals applies every wake-up signal already received.
func (s *sessionState) drainSignals(ctx workflow.Context) {
	for {
		var sig sessionv1.WakeupSignal
		if !s.signals.ReceiveAsync(&sig) {
			return
		}
		s.receive(ctx, &sig, nil)
	}
}

// awaitSignal waits for a signal or for cancellation (the deletion
// workflow cancels this one): a blocking Receive alone ignores the latter.
func (s *sessionState) awaitSignal(ctx workflow.Context) {
	idle := workflow.NewSelector(ctx)
	idle.AddReceive(s.signals, s.receiveOn(ctx, nil))
	idle.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
	idle.Select(ctx)
}

// maybeContinueAsNew returns the continue-as-new error that ends this run
// once its history is over the limit, nil before.
func (s *sessionState) maybeContinueAsNew(ctx workflow.Context) error {
	if workflow.GetInfo(ctx).GetCurrentHistoryLength() <= s.historyLimit() {
		return nil
	}
	in := s.in
	return workflow.NewContinueAsNewError(ctx, sessionwf.WorkflowType,
		&sessionv1.SessionWorkflowInput{SessionId: in.GetSessionId(), Provider: in.GetProvider(), TaskQueue: s.queue,
			HistoryLimit: in.GetHistoryLimit(), HostQueueTimeoutSeconds: in.GetHostQueueTimeoutSeconds(),
			PushedInterruptOutboxIds: s.pushed[max(0, len(s.pushed)-carriedInterrupts):]})
}

// historyLimit is the history length (events) past which a run continues
// as new.
func (s *sessionState) historyLimit() int {
	if l := int(s.in.GetHistoryLimit()); l > 0 {
		return l
	}
	return continueAsNewAfter
}

// turnOptions are the options of a RunTurn activity on the session's
// queue. When that queue is a sandbox's, the host holding the sandbox
// must pick the turn up: if it is gone for good the session fails instead
// of waiting forever.
func (s *sessionState) turnOptions() workflow.ActivityOptions {
	opts := workflow.ActivityOptions{
		TaskQueue:           s.queue,
		StartToCloseTimeout: 30 * time.Minute,
		HeartbeatTimeout:    time.Second,
		WaitForCancellation: true,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
	}
	if s.queue != "" {
		opts.ScheduleToStartTimeout = defaultHostQueueTimeout
		if sec := s.in.GetHostQueueTimeoutSeconds(); sec > 0 {
			opts.ScheduleToStartTimeout = time.Duration(sec) * time.Second
		}
	}
	return opts
}

// runTurn runs the pending turn as a RunTurn activity and applies how it
// ended. end reports that the workflow ends, with err.
func (s *sessionState) runTurn(ctx workflow.Context) (end bool, err error) {
	turnCtx, cancelTurn := workflow.WithCancel(ctx)
	opts, turn, eager := s.scheduleTurn(ctx)
	fut := workflow.ExecuteActivity(workflow.WithActivityOptions(turnCtx, opts), RunTurnActivity, turn)
	res, runErr := s.awaitTurn(ctx, fut, cancelTurn)
	cancelTurn()
	var canceled *temporal.CanceledError
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(runErr, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		return s.hostTimeout(ctx, opts.ScheduleToStartTimeout)
	case errors.As(runErr, &canceled):
		s.attempt = 0
		s.pending = true // the turn was interrupted: look for queued work
		return false, nil
	case runErr != nil:
		return true, runErr
	}
	end, retry := s.applyResult(res, eager)
	if end || !retry {
		return end, nil
	}
	// A transient model error: the same turn again, after a delay.
	if err := workflow.Sleep(ctx, res.RetryAfter); err != nil {
		return true, err
	}
	s.pending = true
	return false, nil
}

// scheduleTurn decides where the pending turn runs: on the session's
// queue or, eagerly, on the workflow's own queue when its worker polls
// the sandbox's locality queue (eager).
func (s *sessionState) scheduleTurn(ctx workflow.Context) (opts workflow.ActivityOptions, turn RunTurnInput, eager bool) {
	opts = s.turnOptions()
	turn = RunTurnInput{SessionID: s.in.GetSessionId(), Attempt: s.attempt, TaskQueue: s.queue}
	// (A remote provider's binding names the workflow's own queue,
	// where the SDK runs turns eagerly anyway.)
	own := workflow.GetInfo(ctx).TaskQueueName
	eager = s.queue != "" && s.queue != own && s.eagerOK && s.w.eager(ctx, s.queue)
	if eager {
		opts.TaskQueue = own
		turn.TaskQueue, turn.Locality = "", s.queue
	}
	return opts, turn, eager
}

// awaitTurn waits for the turn's activity to end. A signal that arrives
// meanwhile is applied at once: an interrupt or a deletion cancels the
// turn (cancelTurn), as does the workflow's cancellation.
func (s *sessionState) awaitTurn(ctx workflow.Context, fut workflow.Future, cancelTurn func()) (RunTurnResult, error) {
	var res RunTurnResult
	var runErr error
	sel := workflow.NewSelector(ctx)
	finished := false
	sel.AddFuture(fut, func(f workflow.Future) {
		finished = true
		runErr = f.Get(ctx, &res)
	})
	sel.AddReceive(s.signals, s.receiveOn(ctx, cancelTurn))
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { cancelTurn() })
	for !finished {
		sel.Select(ctx)
	}
	return res, runErr
}

// applyResult applies a turn's result to the state. end reports that the
// session is gone (the workflow ends); retry that the turn is tried again
// after res.RetryAfter. eager reports that the turn was scheduled for
// eager execution.
func (s *sessionState) applyResult(res RunTurnResult, eager bool) (end, retry bool) {
	if res.Outcome == TurnGone {
		return true, false
	}
	if eager && res.Outcome == TurnNothing && res.More && res.TaskQueue == s.queue {
		// Handed back by a worker of another locality: the same turn
		// again, through the locality queue, and so the turns after it in
		// this run.
		s.eagerOK, s.pending = false, true
		return false, false
	}
	if res.TaskQueue != "" {
		s.queue = res.TaskQueue
	}
	if res.Outcome == TurnInterrupted && res.InterruptOutboxID != 0 {
		s.pushed = append(s.pushed, res.InterruptOutboxID)
	}
	if res.Outcome == TurnRetry {
		s.attempt++
		return false, true
	}
	s.attempt = 0
	s.pending = s.pending || res.More
	return false, false
}

// hostTimeout handles a turn nobody picked up from the sandbox's locality
// queue within waited: it asks, from the provider's shared queue, why,
// and applies the answer. end reports that the workflow ends, with err.
func (s *sessionState) hostTimeout(ctx workflow.Context, waited time.Duration) (end bool, err error) {
	checkCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second}})
	if workflow.GetVersion(ctx, localityCheckChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return true, workflow.ExecuteActivity(checkCtx, HostGoneActivity, HostGoneInput{SessionID: s.in.GetSessionId(), TaskQueue: s.queue,
			Waited: waited}).Get(ctx, nil)
	}
	var check CheckLocalityResult
	if err := workflow.ExecuteActivity(checkCtx, CheckLocalityActivity, CheckLocalityInput{SessionID: s.in.GetSessionId(),
		TaskQueue: s.queue, Window: waited}).Get(ctx, &check); err != nil {
		return true, err
	}
	return s.applyLocality(check), nil
}

// applyLocality applies the answer of CheckLocality about a turn nobody
// picked up; it reports whether the workflow ends (the session was
// deleted).
func (s *sessionState) applyLocality(check CheckLocalityResult) (end bool) {
	switch check.Outcome {
	case LocalityDeleted:
		return true
	case LocalityMoved:
		s.queue = check.TaskQueue
		s.pending = true
	case LocalityAlive:
		s.pending = true // busy, not gone: schedule the turn again
	default:
		// LocalityGone: the turn failed explicitly and consumed the
		// pending work; the next message tries the locality again.
		s.attempt = 0
	}
	return false
}
