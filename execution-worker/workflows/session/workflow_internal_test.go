package session

import (
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

func TestTurnOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		queue          string
		timeoutSeconds int32
		want           time.Duration // ScheduleToStartTimeout
	}{
		{"the provider's queue waits as long as it takes", "", 30, 0},
		{"a sandbox's queue waits the default", "mango.docker.l1", 0, defaultHostQueueTimeout},
		{"a sandbox's queue waits the configured time", "mango.docker.l1", 30, 30 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := &sessionState{queue: c.queue, in: &sessionv1.SessionWorkflowInput{HostQueueTimeoutSeconds: c.timeoutSeconds}}
			got := s.turnOptions()
			if got.TaskQueue != c.queue || got.ScheduleToStartTimeout != c.want {
				t.Errorf("turnOptions: queue %q, schedule-to-start %v; want %q, %v", got.TaskQueue, got.ScheduleToStartTimeout, c.queue, c.want)
			}
			if got.StartToCloseTimeout != 30*time.Minute || got.HeartbeatTimeout != time.Second || !got.WaitForCancellation ||
				got.RetryPolicy == nil || got.RetryPolicy.MaximumInterval != 30*time.Second {
				t.Errorf("turnOptions = %+v, want 30m start-to-close, 1s heartbeat, waiting for cancellation, retries up to 30s apart", got)
			}
		})
	}
}

func TestHistoryLimit(t *testing.T) {
	t.Parallel()
	for limit, want := range map[int32]int{0: continueAsNewAfter, -1: continueAsNewAfter, 50: 50} {
		s := &sessionState{in: &sessionv1.SessionWorkflowInput{HistoryLimit: limit}}
		if got := s.historyLimit(); got != want {
			t.Errorf("historyLimit with input limit %d = %d, want %d", limit, got, want)
		}
	}
}

func TestApplyResult(t *testing.T) {
	t.Parallel()
	const here, there = "mango.docker.here", "mango.docker.there"
	start := sessionState{queue: here, attempt: 1, pushed: []int64{7}, eagerOK: true}
	for _, c := range []struct {
		name      string
		res       RunTurnResult
		eager     bool
		pending   bool // before
		want      sessionState
		wantEnd   bool
		wantRetry bool
	}{
		{"the session is gone", RunTurnResult{Outcome: TurnGone}, false, false, start, true, false},
		{"an eager turn handed back", RunTurnResult{Outcome: TurnNothing, More: true, TaskQueue: here}, true, false,
			sessionState{queue: here, attempt: 1, pushed: []int64{7}, pending: true}, false, false},
		{"a turn handed back that was not eager moves to its queue", RunTurnResult{Outcome: TurnNothing, More: true, TaskQueue: there}, false, false,
			sessionState{queue: there, pushed: []int64{7}, pending: true, eagerOK: true}, false, false},
		{"an idle turn with more", RunTurnResult{Outcome: TurnIdle, More: true}, false, false,
			sessionState{queue: here, pushed: []int64{7}, pending: true, eagerOK: true}, false, false},
		{"an idle turn with nothing more", RunTurnResult{Outcome: TurnIdle}, false, false,
			sessionState{queue: here, pushed: []int64{7}, eagerOK: true}, false, false},
		{"an idle turn after a signal", RunTurnResult{Outcome: TurnIdle}, false, true,
			sessionState{queue: here, pushed: []int64{7}, pending: true, eagerOK: true}, false, false},
		{"a turn interrupted by a push", RunTurnResult{Outcome: TurnInterrupted, More: true, InterruptOutboxID: 42}, false, false,
			sessionState{queue: here, pushed: []int64{7, 42}, pending: true, eagerOK: true}, false, false},
		{"a retry", RunTurnResult{Outcome: TurnRetry, RetryAfter: time.Second, TaskQueue: there}, false, false,
			sessionState{queue: there, attempt: 2, pushed: []int64{7}, eagerOK: true}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := start
			s.pushed = slices.Clone(start.pushed)
			s.pending = c.pending
			end, retry := s.applyResult(c.res, c.eager)
			if end != c.wantEnd || retry != c.wantRetry {
				t.Errorf("applyResult(%+v) = end %v, retry %v; want end %v, retry %v", c.res, end, retry, c.wantEnd, c.wantRetry)
			}
			if c.wantEnd {
				return
			}
			if s.queue != c.want.queue || s.attempt != c.want.attempt || s.pending != c.want.pending ||
				s.eagerOK != c.want.eagerOK || !slices.Equal(s.pushed, c.want.pushed) {
				t.Errorf("applyResult(%+v): queue %q, attempt %d, pending %v, eager %v, pushed %v; want %q, %d, %v, %v, %v",
					c.res, s.queue, s.attempt, s.pending, s.eagerOK, s.pushed,
					c.want.queue, c.want.attempt, c.want.pending, c.want.eagerOK, c.want.pushed)
			}
		})
	}
}

func TestApplyLocality(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		check       CheckLocalityResult
		wantEnd     bool
		wantQueue   string
		wantPending bool
		wantAttempt int
	}{
		{CheckLocalityResult{Outcome: LocalityDeleted}, true, "old", false, 2},
		{CheckLocalityResult{Outcome: LocalityMoved, TaskQueue: "new"}, false, "new", true, 2},
		{CheckLocalityResult{Outcome: LocalityAlive}, false, "old", true, 2},
		{CheckLocalityResult{Outcome: LocalityGone}, false, "old", false, 0},
	} {
		t.Run(c.check.Outcome, func(t *testing.T) {
			t.Parallel()
			s := &sessionState{queue: "old", attempt: 2}
			end := s.applyLocality(c.check)
			if end != c.wantEnd || s.queue != c.wantQueue || s.pending != c.wantPending || s.attempt != c.wantAttempt {
				t.Errorf("applyLocality(%+v) = end %v, queue %q, pending %v, attempt %d; want %v, %q, %v, %d",
					c.check, end, s.queue, s.pending, s.attempt, c.wantEnd, c.wantQueue, c.wantPending, c.wantAttempt)
			}
		})
	}
}

// TestReceiveSignals receives wake-ups during a turn: a wake-up makes work
// pending, a delete ends the session and cancels the turn, an interrupt
// cancels it unless a push already stopped the interrupt's turn.
func TestReceiveSignals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		signals     []*sessionv1.WakeupSignal
		wantPending bool
		wantDeleted bool
		wantCancels int
	}{
		{"nothing", nil, false, false, 0},
		{"a wake-up", []*sessionv1.WakeupSignal{{Kind: sessionv1.WakeupKind_WAKEUP_KIND_WAKEUP}}, true, false, 0},
		{"a new interrupt", []*sessionv1.WakeupSignal{{Kind: sessionv1.WakeupKind_WAKEUP_KIND_INTERRUPT, OutboxId: 43}}, true, false, 1},
		{"a pushed interrupt's late signal", []*sessionv1.WakeupSignal{{Kind: sessionv1.WakeupKind_WAKEUP_KIND_INTERRUPT, OutboxId: 42}}, true, false, 0},
		{"a delete", []*sessionv1.WakeupSignal{{Kind: sessionv1.WakeupKind_WAKEUP_KIND_DELETE}}, false, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			type drained struct {
				Pending, Deleted bool
				Cancels          int
			}
			env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (drained, error) {
				s := newSessionState(ctx, &Workflow{}, &sessionv1.SessionWorkflowInput{PushedInterruptOutboxIds: []int64{42}})
				s.pending = false
				// The signals come while the workflow waits.
				if err := workflow.Sleep(ctx, time.Minute); err != nil {
					return drained{}, err
				}
				cancels := 0
				for {
					var sig sessionv1.WakeupSignal
					if !s.signals.ReceiveAsync(&sig) {
						break
					}
					s.receive(ctx, &sig, func() { cancels++ })
				}
				return drained{s.pending, s.deleted, cancels}, nil
			}, workflow.RegisterOptions{Name: "drain"})
			env.RegisterDelayedCallback(func() {
				for _, sig := range c.signals {
					env.SignalWorkflow(sessionwf.SignalWakeup, sig)
				}
			}, 0)
			env.ExecuteWorkflow("drain")
			if err := env.GetWorkflowError(); err != nil {
				t.Fatalf("workflow = %v, want it to complete", err)
			}
			var got drained
			if err := env.GetWorkflowResult(&got); err != nil {
				t.Fatal(err)
			}
			if got.Pending != c.wantPending || got.Deleted != c.wantDeleted || got.Cancels != c.wantCancels {
				t.Errorf("after %v: pending %v, deleted %v, %d cancels; want %v, %v, %d",
					c.signals, got.Pending, got.Deleted, got.Cancels, c.wantPending, c.wantDeleted, c.wantCancels)
			}
		})
	}
}
