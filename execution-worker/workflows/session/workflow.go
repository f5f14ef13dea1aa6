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
	signals := workflow.GetSignalChannel(ctx, sessionwf.SignalWakeup)
	queue := in.GetTaskQueue()
	pending := true // started (or continued) because work may be waiting
	attempt := 0
	deleted := false
	// Outbox ids of interrupts whose turn a worker's push already stopped
	// (TurnInterrupted results): their signals, arriving later, are spent.
	// The latest are carried across continue-as-new, since a signal may
	// arrive after it.
	pushed := slices.Clone(in.GetPushedInterruptOutboxIds())
	// Whether turns may run eagerly: not after one was handed back.
	eagerOK := true

	receive := func(sig *sessionv1.WakeupSignal, cancelTurn func()) {
		switch sig.GetKind() {
		case sessionv1.WakeupKind_WAKEUP_KIND_DELETE:
			deleted = true
			if cancelTurn != nil {
				cancelTurn()
			}
		case sessionv1.WakeupKind_WAKEUP_KIND_INTERRUPT:
			pending = true
			if id := sig.GetOutboxId(); id != 0 && slices.Contains(pushed, id) &&
				workflow.GetVersion(ctx, pushedInterruptChange, workflow.DefaultVersion, 1) == 1 {
				return // its turn already ended: the running one is a later turn
			}
			if cancelTurn != nil {
				cancelTurn()
			}
		default:
			pending = true
		}
	}

	for !deleted {
		if ctx.Err() != nil {
			// Cancelled (the session is being deleted): stop here.
			return temporal.NewCanceledError("session workflow cancelled")
		}
		for {
			var sig sessionv1.WakeupSignal
			if !signals.ReceiveAsync(&sig) {
				break
			}
			receive(&sig, nil)
		}
		if deleted {
			break
		}
		if !pending {
			limit := continueAsNewAfter
			if l := int(in.GetHistoryLimit()); l > 0 {
				limit = l
			}
			if workflow.GetInfo(ctx).GetCurrentHistoryLength() > limit {
				return workflow.NewContinueAsNewError(ctx, sessionwf.WorkflowType,
					&sessionv1.SessionWorkflowInput{SessionId: in.GetSessionId(), Provider: in.GetProvider(), TaskQueue: queue,
						HistoryLimit: in.GetHistoryLimit(), HostQueueTimeoutSeconds: in.GetHostQueueTimeoutSeconds(),
						PushedInterruptOutboxIds: pushed[max(0, len(pushed)-carriedInterrupts):]})
			}
			// Wait for a signal or for cancellation (the deletion workflow
			// cancels this one): a blocking Receive alone ignores the latter.
			idle := workflow.NewSelector(ctx)
			idle.AddReceive(signals, func(c workflow.ReceiveChannel, _ bool) {
				var sig sessionv1.WakeupSignal
				c.Receive(ctx, &sig)
				receive(&sig, nil)
			})
			idle.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
			idle.Select(ctx)
			continue
		}
		pending = false

		turnCtx, cancelTurn := workflow.WithCancel(ctx)
		opts := workflow.ActivityOptions{
			TaskQueue:           queue,
			StartToCloseTimeout: 30 * time.Minute,
			HeartbeatTimeout:    time.Second,
			WaitForCancellation: true,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
		}
		if queue != "" {
			// The host holding the sandbox must pick the turn up: if it is
			// gone for good the session fails instead of waiting forever.
			opts.ScheduleToStartTimeout = defaultHostQueueTimeout
			if s := in.GetHostQueueTimeoutSeconds(); s > 0 {
				opts.ScheduleToStartTimeout = time.Duration(s) * time.Second
			}
		}
		turn := RunTurnInput{SessionID: in.GetSessionId(), Attempt: attempt, TaskQueue: queue}
		// (A remote provider's binding names the workflow's own queue,
		// where the SDK runs turns eagerly anyway.)
		own := workflow.GetInfo(ctx).TaskQueueName
		eager := queue != "" && queue != own && eagerOK && w.eager(ctx, queue)
		if eager {
			opts.TaskQueue = own
			turn.TaskQueue, turn.Locality = "", queue
		}
		fut := workflow.ExecuteActivity(workflow.WithActivityOptions(turnCtx, opts), RunTurnActivity, turn)
		var res RunTurnResult
		var runErr error
		sel := workflow.NewSelector(ctx)
		finished := false
		sel.AddFuture(fut, func(f workflow.Future) {
			finished = true
			runErr = f.Get(ctx, &res)
		})
		sel.AddReceive(signals, func(c workflow.ReceiveChannel, _ bool) {
			var sig sessionv1.WakeupSignal
			c.Receive(ctx, &sig)
			receive(&sig, cancelTurn)
		})
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { cancelTurn() })
		for !finished {
			sel.Select(ctx)
		}
		cancelTurn()
		var canceled *temporal.CanceledError
		var timeout *temporal.TimeoutError
		switch {
		case errors.As(runErr, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
			// Nobody picked the turn up from the sandbox's locality queue:
			// ask, from the provider's shared queue, why.
			checkCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
				RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second}})
			if workflow.GetVersion(ctx, localityCheckChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				if err := workflow.ExecuteActivity(checkCtx, HostGoneActivity, HostGoneInput{SessionID: in.GetSessionId(), TaskQueue: queue,
					Waited: opts.ScheduleToStartTimeout}).Get(ctx, nil); err != nil {
					return err
				}
				return nil
			}
			var check CheckLocalityResult
			if err := workflow.ExecuteActivity(checkCtx, CheckLocalityActivity, CheckLocalityInput{SessionID: in.GetSessionId(),
				TaskQueue: queue, Window: opts.ScheduleToStartTimeout}).Get(ctx, &check); err != nil {
				return err
			}
			switch check.Outcome {
			case LocalityDeleted:
				return nil
			case LocalityMoved:
				queue = check.TaskQueue
				pending = true
			case LocalityAlive:
				pending = true // busy, not gone: schedule the turn again
			default:
				// LocalityGone: the turn failed explicitly and consumed the
				// pending work; the next message tries the locality again.
				attempt = 0
			}
		case errors.As(runErr, &canceled):
			attempt = 0
			pending = true // the turn was interrupted: look for queued work
		case runErr != nil:
			return runErr
		default:
			if res.Outcome == TurnGone {
				return nil
			}
			if eager && res.Outcome == TurnNothing && res.More && res.TaskQueue == queue {
				// Handed back by a worker of another locality: the same
				// turn again, through the locality queue, and so the turns
				// after it in this run.
				eagerOK, pending = false, true
				continue
			}
			if res.TaskQueue != "" {
				queue = res.TaskQueue
			}
			if res.Outcome == TurnInterrupted && res.InterruptOutboxID != 0 {
				pushed = append(pushed, res.InterruptOutboxID)
			}
			if res.Outcome == TurnRetry {
				attempt++
				if err := workflow.Sleep(ctx, res.RetryAfter); err != nil {
					return err
				}
				pending = true
				continue
			}
			attempt = 0
			pending = pending || res.More
		}
	}
	return nil
}
