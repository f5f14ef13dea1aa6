package session_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mangohq/mango/execution-worker/workflows/session"
	"github.com/mangohq/mango/internal/temporaltest"
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

// TestPushedInterruptSignalAfterContinueAsNew, on a Temporal server: the
// run whose turn a pushed interrupt stopped continues as new before the
// interrupt's signal arrives; the new run knows the signal is spent and
// lets its turn run, while another interrupt still cancels it.
func TestPushedInterruptSignalAfterContinueAsNew(t *testing.T) {
	t.Parallel()
	c := temporaltest.Dial(t, temporaltest.HostPort(t))
	for _, tc := range []struct {
		name       string
		signal     int64
		wantCancel bool
	}{
		{"the pushed interrupt's late signal", 42, false},
		{"a new interrupt", 43, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			id := fmt.Sprintf("sesn_can%d_%d", tc.signal, time.Now().UnixNano())
			signal := func(kind sessionv1.WakeupKind, outbox int64) error {
				return c.SignalWorkflow(ctx, id, "", sessionwf.SignalWakeup, &sessionv1.WakeupSignal{Kind: kind, SessionId: id, OutboxId: outbox})
			}
			var calls atomic.Int32
			var cancelled atomic.Bool
			w := worker.New(c, id, worker.Options{})
			w.RegisterWorkflowWithOptions(session.SessionWorkflow, workflow.RegisterOptions{Name: sessionwf.WorkflowType})
			w.RegisterActivityWithOptions(func(ctx context.Context, in session.RunTurnInput) (*session.RunTurnResult, error) {
				switch calls.Add(1) {
				case 1: // stopped by the push of outbox row 42; idle past the history limit next
					return &session.RunTurnResult{Outcome: session.TurnInterrupted, InterruptOutboxID: 42}, nil
				case 2: // the new run's first turn; the interrupt's signal arrives meanwhile
					if err := signal(sessionv1.WakeupKind_WAKEUP_KIND_INTERRUPT, tc.signal); err != nil {
						return nil, err
					}
					// Temporal delivers a cancellation with a heartbeat's answer.
					for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
						activity.RecordHeartbeat(ctx)
						select {
						case <-ctx.Done():
							cancelled.Store(true)
							return nil, ctx.Err()
						case <-time.After(50 * time.Millisecond):
						}
					}
					return &session.RunTurnResult{Outcome: session.TurnIdle}, nil
				default:
					return &session.RunTurnResult{Outcome: session.TurnNothing}, signal(sessionv1.WakeupKind_WAKEUP_KIND_DELETE, 0)
				}
			}, activity.RegisterOptions{Name: session.RunTurnActivity})
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: id}, sessionwf.WorkflowType,
				&sessionv1.SessionWorkflowInput{SessionId: id, Provider: "local", HistoryLimit: 1})
			if err != nil {
				t.Fatal(err)
			}
			waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			if err := c.GetWorkflow(waitCtx, id, "").Get(waitCtx, nil); err != nil {
				t.Fatalf("session workflow: %v", err)
			}
			desc, err := c.DescribeWorkflow(ctx, id, run.GetRunID())
			if err != nil {
				t.Fatal(err)
			}
			if st := desc.Status; st != enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				t.Fatalf("first run ended %v, want continued as new", st)
			}
			if got := cancelled.Load(); got != tc.wantCancel {
				t.Fatalf("the new run's turn cancelled = %v, want %v", got, tc.wantCancel)
			}
		})
	}
}
