package session_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/workflows/session"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// commitCP is a ControlPlane with one pending user.message that records
// the commits of a turn; announce is GetRunResponse.complete_turn_transcript.
type commitCP struct {
	pb.ControlPlaneClient
	announce bool

	mu        sync.Mutex
	appends   []*pb.AppendEventsRequest
	completes []*pb.CompleteTurnRequest
}

func (f *commitCP) GetRun(_ context.Context, req *pb.GetRunRequest, _ ...grpc.CallOption) (*pb.GetRunResponse, error) {
	return &pb.GetRunResponse{SessionId: req.GetSessionId(), Agent: `{"name":"a","model":{"id":"claude-sonnet-4-5"}}`, Tools: "[]", McpServers: "[]",
		Status:                 pb.SessionStatus_SESSION_STATUS_RUNNING,
		PendingTriggers:        []*pb.Event{{Id: "sevt_1", Type: "user.message", Body: `{"content":[{"type":"text","text":"hello"}]}`}},
		CompleteTurnTranscript: f.announce}, nil
}

func (f *commitCP) GetBinding(context.Context, *pb.GetBindingRequest, ...grpc.CallOption) (*pb.GetBindingResponse, error) {
	return &pb.GetBindingResponse{}, nil
}

func (f *commitCP) AppendEvents(_ context.Context, req *pb.AppendEventsRequest, _ ...grpc.CallOption) (*pb.AppendEventsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.appends = append(f.appends, req)
	resp := &pb.AppendEventsResponse{}
	for _, e := range req.GetEvents() {
		resp.Events = append(resp.Events, &pb.Event{Id: sessionwf.EventID(req.GetSessionId(), e.GetKey()), Type: e.GetType(), Key: e.GetKey()})
	}
	return resp, nil
}

func (f *commitCP) CompleteTurn(_ context.Context, req *pb.CompleteTurnRequest, _ ...grpc.CallOption) (*pb.CompleteTurnResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.completes = append(f.completes, req)
	return &pb.CompleteTurnResponse{Status: pb.SessionStatus_SESSION_STATUS_IDLE}, nil
}

func eventTypes(evs []*pb.NewEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.GetType())
	}
	return out
}

// TestRunTurnCommitsTheLastResponseWithItsEnd: against a server that
// stores CompleteTurn's transcript, a turn's final response (its message,
// span end and transcript entry) goes with the turn's end, one call;
// against one that predates the field, it is appended first and the end
// carries no transcript (which that server would drop).
func TestRunTurnCommitsTheLastResponseWithItsEnd(t *testing.T) {
	t.Parallel()
	for _, announce := range []bool{true, false} {
		cp := &commitCP{announce: announce}
		res := runTurn(t, &session.TurnActivities{ControlPlane: cp, Model: modelfake.New()}, session.RunTurnInput{SessionID: "sesn_1"})
		if res.Outcome != session.TurnIdle {
			t.Fatalf("announce %v: outcome %s, want idle", announce, res.Outcome)
		}
		if len(cp.completes) != 1 {
			t.Fatalf("announce %v: %d CompleteTurn calls, want 1", announce, len(cp.completes))
		}
		end := cp.completes[0]
		if end.GetOutcome() != pb.TurnOutcome_TURN_OUTCOME_END_TURN || !slices.Equal(end.GetProcessedEventIds(), []string{"sevt_1"}) {
			t.Errorf("announce %v: CompleteTurn %v, want end_turn consuming sevt_1", announce, end)
		}
		final := []string{"agent.message", "span.model_request_end"}
		if announce {
			if len(cp.appends) != 1 || !slices.Equal(eventTypes(cp.appends[0].GetEvents()), []string{"span.model_request_start"}) {
				t.Errorf("appends %v, want only the span start", cp.appends)
			}
			if !slices.Equal(eventTypes(end.GetEvents()), final) || len(end.GetTranscript()) != 1 || end.GetTranscript()[0].GetKey() != "sevt_1/1" {
				t.Errorf("CompleteTurn events %v transcript %v; want the final message, its span end and its transcript entry sevt_1/1",
					eventTypes(end.GetEvents()), end.GetTranscript())
			}
			continue
		}
		if len(cp.appends) != 2 || !slices.Equal(eventTypes(cp.appends[1].GetEvents()), final) || len(cp.appends[1].GetTranscript()) != 1 {
			t.Errorf("old server: appends %v, want the span start, then the final message with its transcript entry", cp.appends)
		}
		if len(end.GetEvents()) != 0 || len(end.GetTranscript()) != 0 {
			t.Errorf("old server: CompleteTurn carries %v and %v; want neither", end.GetEvents(), end.GetTranscript())
		}
	}
}
