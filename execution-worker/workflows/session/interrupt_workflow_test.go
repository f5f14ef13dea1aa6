package session_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/mangohq/mango/execution-worker/workflows/session"
	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// TestPushedInterruptSignalSparesNextTurn: a turn stopped by a pushed
// interrupt reports the interrupt's outbox id; when the interrupt's own
// signal reaches the workflow only after that turn ended, it must not
// cancel the next turn. An interrupt signal of another outbox row still
// does.
func TestPushedInterruptSignalSparesNextTurn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		signal     int64 // outbox id of the interrupt signal sent during the second turn
		wantCancel bool
	}{
		{"the pushed interrupt's late signal", 42, false},
		{"a new interrupt", 43, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			var calls atomic.Int32
			var second atomic.Value // activity id of the second turn
			var cancelled atomic.Bool
			env.SetOnActivityCanceledListener(func(info *activity.Info) {
				if id, _ := second.Load().(string); info.ActivityID == id {
					cancelled.Store(true)
				}
			})
			signal := func(kind sessionv1.WakeupKind, outbox int64) {
				env.SignalWorkflow(sessionwf.SignalWakeup, &sessionv1.WakeupSignal{Kind: kind, SessionId: "sesn_1", OutboxId: outbox})
			}
			env.RegisterActivityWithOptions(func(ctx context.Context, in session.RunTurnInput) (*session.RunTurnResult, error) {
				switch calls.Add(1) {
				case 1: // stopped by the push of the interrupt of outbox row 42
					return &session.RunTurnResult{Outcome: session.TurnInterrupted, More: true, InterruptOutboxID: 42}, nil
				case 2: // the next turn; an interrupt signal arrives meanwhile
					second.Store(activity.GetInfo(ctx).ActivityID)
					signal(sessionv1.WakeupKind_WAKEUP_KIND_INTERRUPT, c.signal)
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(300 * time.Millisecond): // under the heartbeat timeout
						return &session.RunTurnResult{Outcome: session.TurnIdle}, nil
					}
				default:
					signal(sessionv1.WakeupKind_WAKEUP_KIND_DELETE, 0)
					return &session.RunTurnResult{Outcome: session.TurnNothing}, nil
				}
			}, activity.RegisterOptions{Name: session.RunTurnActivity})
			env.RegisterWorkflowWithOptions(session.SessionWorkflow, workflow.RegisterOptions{Name: sessionwf.WorkflowType})
			env.ExecuteWorkflow(sessionwf.WorkflowType, &sessionv1.SessionWorkflowInput{SessionId: "sesn_1", Provider: "local"})
			if !env.IsWorkflowCompleted() {
				t.Fatal("workflow did not complete")
			}
			if got := cancelled.Load(); got != c.wantCancel {
				t.Fatalf("second turn cancelled = %v, want %v", got, c.wantCancel)
			}
		})
	}
}
