package session_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/workflows/session"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// selfHostedCP is a toolCP whose session's environment is self_hosted:
// AwaitToolResult answers "not yet" once, then with the client's result.
// It records the await requests and the types of the events appended.
type selfHostedCP struct {
	*toolCP

	mu       sync.Mutex
	awaits   []*pb.AwaitToolResultRequest
	appended []string
}

func (f *selfHostedCP) GetRun(ctx context.Context, req *pb.GetRunRequest, opts ...grpc.CallOption) (*pb.GetRunResponse, error) {
	run, err := f.toolCP.GetRun(ctx, req, opts...)
	if run != nil {
		run.EnvironmentId, run.EnvironmentConfig = "env_1", `{"type":"self_hosted"}`
	}
	return run, err
}

func (f *selfHostedCP) AppendEvents(ctx context.Context, req *pb.AppendEventsRequest, opts ...grpc.CallOption) (*pb.AppendEventsResponse, error) {
	f.mu.Lock()
	for _, e := range req.GetEvents() {
		f.appended = append(f.appended, e.GetType()+" "+e.GetBody())
	}
	f.mu.Unlock()
	return f.toolCP.AppendEvents(ctx, req, opts...)
}

func (f *selfHostedCP) AwaitToolResult(_ context.Context, req *pb.AwaitToolResultRequest, _ ...grpc.CallOption) (*pb.AwaitToolResultResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.awaits = append(f.awaits, req)
	if len(f.awaits) == 1 {
		return &pb.AwaitToolResultResponse{}, nil
	}
	return &pb.AwaitToolResultResponse{Resolved: true, AnswerEventId: "sevt_answer",
		Content: `[{"type":"text","text":"client says hi"}]`}, nil
}

// TestRunTurnSelfHostedAwaitsTheClientsResult: a turn of a self-hosted
// session (GetRun's environment_config type self_hosted) runs its bash
// call on no sandbox (the activities have no sandbox manager: using one
// would fail the turn): it asks AwaitToolResult, again after a "not yet",
// for the agent.tool_use event's id with the configured timeout, journals
// the client's answer and gives it to the model, and appends no
// agent.tool_result of its own.
func TestRunTurnSelfHostedAwaitsTheClientsResult(t *testing.T) {
	t.Parallel()
	cp := &selfHostedCP{toolCP: &toolCP{text: `#tool bash {"command":"echo hi"}`}}
	a := &session.TurnActivities{ControlPlane: cp, Model: modelfake.New(), SelfHostedToolTimeout: 5 * time.Second}
	res := runTurn(t, a, session.RunTurnInput{SessionID: "sesn_1"})
	if res.Outcome != session.TurnIdle {
		t.Fatalf("outcome %s, want idle", res.Outcome)
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if len(cp.awaits) != 2 {
		t.Fatalf("AwaitToolResult called %d times, want 2 (once more after not yet)", len(cp.awaits))
	}
	for _, req := range cp.awaits {
		if req.GetSessionId() != "sesn_1" || !strings.HasPrefix(req.GetToolUseEventId(), "sevt_") ||
			req.GetTimeout().AsDuration() != 5*time.Second || req.GetMaxWait().AsDuration() <= 0 {
			t.Errorf("AwaitToolResult %v, want session sesn_1, the tool_use event's id, timeout 5s and a max wait", req)
		}
	}
	var message string
	for _, ev := range cp.appended {
		switch typ, body, _ := strings.Cut(ev, " "); typ {
		case "agent.tool_result":
			t.Errorf("the turn appended %s, want no agent.tool_result (the client's answer is in the log)", ev)
		case "agent.message":
			message = body
		}
	}
	if !strings.Contains(message, "client says hi") {
		t.Errorf("agent.message %s, want the model to have seen the client's answer", message)
	}
	if results := cp.toolResults(); len(results) != 1 || !strings.Contains(results[0], "client says hi") {
		t.Errorf("journal %v, want the client's answer", results)
	}
}
