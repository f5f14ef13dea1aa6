package session_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mangohq/mango/execution-worker/workflows/session"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// localityCP answers the calls CheckLocality makes; the embedded nil
// client makes any other call panic.
type localityCP struct {
	pb.ControlPlaneClient
	runErr    error
	binding   *pb.SandboxBinding
	lastSeen  *timestamppb.Timestamp
	now       time.Time
	completed []*pb.CompleteTurnRequest
}

func (f *localityCP) GetRun(context.Context, *pb.GetRunRequest, ...grpc.CallOption) (*pb.GetRunResponse, error) {
	if f.runErr != nil {
		return nil, f.runErr
	}
	return &pb.GetRunResponse{PendingTriggers: []*pb.Event{{Id: "sevt_1", Type: "user.message"}}}, nil
}

func (f *localityCP) GetBinding(context.Context, *pb.GetBindingRequest, ...grpc.CallOption) (*pb.GetBindingResponse, error) {
	return &pb.GetBindingResponse{Binding: f.binding}, nil
}

func (f *localityCP) GetTaskQueueHealth(context.Context, *pb.GetTaskQueueHealthRequest, ...grpc.CallOption) (*pb.GetTaskQueueHealthResponse, error) {
	return &pb.GetTaskQueueHealthResponse{LastHeartbeatAt: f.lastSeen, ServerTime: timestamppb.New(f.now)}, nil
}

func (f *localityCP) CompleteTurn(_ context.Context, req *pb.CompleteTurnRequest, _ ...grpc.CallOption) (*pb.CompleteTurnResponse, error) {
	f.completed = append(f.completed, req)
	return &pb.CompleteTurnResponse{}, nil
}

func TestCheckLocality(t *testing.T) {
	t.Parallel()
	const queue = "mango.docker.n36x-gkmm"
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	bound := &pb.SandboxBinding{Provider: "docker", ExternalId: "c0ffee", TaskQueue: queue}
	tests := []struct {
		name      string
		cp        *localityCP
		want      session.CheckLocalityResult
		completes bool
	}{
		{"a worker seen within the window is busy, not gone",
			&localityCP{binding: bound, lastSeen: timestamppb.New(now.Add(-10 * time.Second)), now: now},
			session.CheckLocalityResult{Outcome: session.LocalityAlive}, false},
		{"a binding moved to another queue is followed",
			&localityCP{binding: &pb.SandboxBinding{Provider: "docker", ExternalId: "c0ffee", TaskQueue: "mango.docker.other"}, now: now},
			session.CheckLocalityResult{Outcome: session.LocalityMoved, TaskQueue: "mango.docker.other"}, false},
		{"a deleted session ends the workflow",
			&localityCP{runErr: status.Error(codes.NotFound, "gone")},
			session.CheckLocalityResult{Outcome: session.LocalityDeleted}, false},
		{"last seen before the window: the turn fails",
			&localityCP{binding: bound, lastSeen: timestamppb.New(now.Add(-3 * time.Minute)), now: now},
			session.CheckLocalityResult{Outcome: session.LocalityGone}, true},
		{"never seen: the turn fails",
			&localityCP{binding: bound, now: now},
			session.CheckLocalityResult{Outcome: session.LocalityGone}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &session.TurnActivities{ControlPlane: tt.cp}
			got, err := a.CheckLocality(context.Background(), session.CheckLocalityInput{SessionID: "sesn_1", TaskQueue: queue, Window: 2 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if *got != tt.want {
				t.Errorf("CheckLocality = %+v, want %+v", *got, tt.want)
			}
			if !tt.completes {
				if len(tt.cp.completed) != 0 {
					t.Errorf("the turn was completed (%v); it must be left alone", tt.cp.completed)
				}
				return
			}
			if len(tt.cp.completed) != 1 {
				t.Fatalf("CompleteTurn calls = %d, want 1", len(tt.cp.completed))
			}
			req := tt.cp.completed[0]
			if req.GetOutcome() != pb.TurnOutcome_TURN_OUTCOME_RETRIES_EXHAUSTED || len(req.GetProcessedEventIds()) != 1 ||
				len(req.GetEvents()) != 1 || req.GetEvents()[0].GetType() != "session.error" {
				t.Fatalf("CompleteTurn = %v, want retries_exhausted consuming sevt_1 with one session.error", req)
			}
			body := req.GetEvents()[0].GetBody()
			for _, want := range []string{`"type":"unknown_error"`, `"retry_status":{"type":"exhausted"}`, "docker sandbox c0ffee", queue} {
				if !strings.Contains(body, want) {
					t.Errorf("session.error body %s lacks %s", body, want)
				}
			}
		})
	}
}

// TestRunTurnRunsOnlyWhereTheSandboxIs: a RunTurn taken from a queue
// other than the one the session's binding names (a first turn's activity
// retried after its worker died, the sandbox bound to a locality
// meanwhile) runs nothing and hands the workflow the binding's queue.
func TestRunTurnRunsOnlyWhereTheSandboxIs(t *testing.T) {
	t.Parallel()
	cp := &localityCP{binding: &pb.SandboxBinding{Provider: "local", ExternalId: "/w/1", TaskQueue: "mango.local.elsewhere"}}
	res := runTurn(t, &session.TurnActivities{ControlPlane: cp}, session.RunTurnInput{SessionID: "sesn_1"})
	if res.Outcome != session.TurnNothing || !res.More || res.TaskQueue != "mango.local.elsewhere" {
		t.Errorf("RunTurn = %+v, want nothing run, more pending, the binding's queue", res)
	}
	if len(cp.completed) != 0 {
		t.Errorf("the turn was completed here: %v", cp.completed)
	}
}

// runTurn runs a's RunTurn in a test activity environment.
func runTurn(t *testing.T, a *session.TurnActivities, in session.RunTurnInput) session.RunTurnResult {
	t.Helper()
	env := (&testsuite.WorkflowTestSuite{}).NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(a.RunTurn, activity.RegisterOptions{Name: session.RunTurnActivity})
	val, err := env.ExecuteActivity(session.RunTurnActivity, in)
	if err != nil {
		t.Fatal(err)
	}
	var res session.RunTurnResult
	if err := val.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRunTurnHandsBackATurnOfAnotherLocality: a turn scheduled to run
// eagerly (Locality set) and taken by a worker that does not poll that
// locality queue runs nothing, calls nothing, and hands the turn back to
// the locality queue.
func TestRunTurnHandsBackATurnOfAnotherLocality(t *testing.T) {
	t.Parallel()
	a := &session.TurnActivities{Serves: func(q string) bool { return q == "mango.local.here" }} // no ControlPlane: any call fails
	res := runTurn(t, a, session.RunTurnInput{SessionID: "sesn_1", Locality: "mango.local.elsewhere"})
	if res.Outcome != session.TurnNothing || !res.More || res.TaskQueue != "mango.local.elsewhere" {
		t.Errorf("RunTurn = %+v, want nothing run, more pending, the locality's queue", res)
	}
}

// TestEagerTurns: a turn of a session bound to a locality that the
// workflow's worker polls is scheduled on the workflow's own queue, with
// the locality named in Locality (so Temporal can hand it to that worker
// at once); otherwise on the locality queue. A turn handed back by a
// worker of another locality runs again through the locality queue, and
// so do the later turns of the run. A binding naming the workflow's own
// queue (a remote provider's) needs nothing of this.
func TestEagerTurns(t *testing.T) {
	t.Parallel()
	const own = "default-test-taskqueue" // the test environment's workflow queue
	handBack := &session.RunTurnResult{Outcome: session.TurnNothing, More: true, TaskQueue: "mango.local.h1"}
	idle := &session.RunTurnResult{Outcome: session.TurnIdle, TaskQueue: "mango.local.h1"}
	for _, c := range []struct {
		name     string
		locality string
		serves   bool
		results  []*session.RunTurnResult
		eager    []bool
	}{
		{"this worker polls the locality", "mango.local.h1", true, []*session.RunTurnResult{idle, idle, idle}, []bool{true, true, true}},
		{"it does not", "mango.local.h1", false, []*session.RunTurnResult{idle, idle}, []bool{false, false}},
		{"a turn handed back", "mango.local.h1", true, []*session.RunTurnResult{idle, handBack, idle, idle}, []bool{true, true, false, false}},
		{"the workflow's own queue", own, true, []*session.RunTurnResult{{Outcome: session.TurnIdle, TaskQueue: own}}, []bool{false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			locality := c.locality
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			var calls atomic.Int32
			var mu sync.Mutex
			var eager []bool
			env.RegisterActivityWithOptions(func(ctx context.Context, in session.RunTurnInput) (*session.RunTurnResult, error) {
				n := int(calls.Add(1))
				ran := activity.GetInfo(ctx).TaskQueue
				switch {
				case in.Locality == locality && in.TaskQueue == "" && ran != locality:
					mu.Lock()
					eager = append(eager, true)
					mu.Unlock()
				case in.Locality == "" && in.TaskQueue == locality && ran == locality:
					mu.Lock()
					eager = append(eager, false)
					mu.Unlock()
				default:
					t.Errorf("turn %d: input %+v on queue %s: neither eager nor through the locality queue", n, in, ran)
				}
				res := c.results[n-1]
				switch {
				case n == len(c.results):
					env.SignalWorkflow(sessionwf.SignalWakeup, &sessionv1.WakeupSignal{Kind: sessionv1.WakeupKind_WAKEUP_KIND_DELETE, SessionId: "sesn_1"})
				case !res.More:
					env.SignalWorkflow(sessionwf.SignalWakeup, &sessionv1.WakeupSignal{Kind: sessionv1.WakeupKind_WAKEUP_KIND_WAKEUP, SessionId: "sesn_1"})
				}
				return res, nil
			}, activity.RegisterOptions{Name: session.RunTurnActivity})
			wf := &session.Workflow{Serves: func(q string) bool { return c.serves && q == locality }}
			env.RegisterWorkflowWithOptions(wf.Run, workflow.RegisterOptions{Name: sessionwf.WorkflowType})
			env.ExecuteWorkflow(sessionwf.WorkflowType, &sessionv1.SessionWorkflowInput{SessionId: "sesn_1", Provider: "local", TaskQueue: locality})
			if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
				t.Fatalf("workflow completed %v, error %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
			}
			if !slices.Equal(eager, c.eager) {
				t.Errorf("turns eager = %v, want %v", eager, c.eager)
			}
		})
	}
}
