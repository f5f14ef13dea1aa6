package controlplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/mangohq/mango/api-server/internal/controlplane"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// TestSessionThreads: a coordinator's run carries its roster; a message
// to a roster agent starts a thread (not an agent outside the roster),
// whose run is the agent's, shares the session's budget and names its
// session; the coordinator's wait is not done while the thread owes its
// reply, then takes the reply, the same on a retry.
func TestSessionThreads(t *testing.T) {
	e := &env{store: start(t, token).store, clock: newClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))}
	conn := dial(t, controlplane.Deps{Store: e.store, Token: token}) // real time: the wait holds for it
	cp, threads := pb.NewControlPlaneClient(conn), pb.NewSessionThreadsClient(conn)
	ctx := authed(context.Background())
	// The session's agent snapshot carries its roster expanded, as the
	// session's create writes it.
	writer := ids.New(ids.Agent)
	sid, budget := ids.New(ids.Session), int64(1)
	lead := `{"type":"agent","id":"agent_lead","version":1,"name":"lead","model":{"id":"m"},"tools":[],` +
		`"multiagent":{"type":"coordinator","agents":[{"type":"agent","id":"` + writer + `","version":1,"name":"writer","description":"",` +
		`"system":"You write.","model":{"id":"m","speed":"standard"},"tools":[],"mcp_servers":[],"skills":[],"execution_identity":{"type":"service_account"}}]}}`
	if _, _, err := e.store.SessionCreate(context.Background(), db.SessionCreateParams{ID: sid, AgentID: "agent_lead", AgentVersion: 1,
		Agent: json.RawMessage(lead), Provider: "local", Now: e.clock.now(), BudgetMaxCents: &budget}, nil); err != nil {
		t.Fatal(err)
	}
	// The session spent its budget.
	if _, _, err := e.store.Append(context.Background(), sid, &db.AppendRequest{Now: e.clock.now(), Events: []db.NewEvent{{ID: ids.New(ids.Event),
		Type: "span.model_request_end", Body: json.RawMessage(`{}`), Usage: &db.Usage{ListCostNanos: 2 * db.NanosPerCent}}}}); err != nil {
		t.Fatal(err)
	}
	run, err := cp.GetRun(ctx, &pb.GetRunRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	if tc := run.GetThread(); tc.GetThreadId() != db.PrimaryThreadID(sid) || len(tc.GetRoster()) != 1 || tc.GetRoster()[0].GetName() != "writer" {
		t.Fatalf("the coordinator's thread context %v, want its primary thread and the writer in its roster", tc)
	}
	content := `[{"type":"text","text":"write"}]`
	_, err = threads.SendToThread(ctx, &pb.SendToThreadRequest{SessionId: sid, Key: "toolu_x", AgentId: "agent_nobody", Content: content})
	wantCode(t, "a message to an agent outside the roster", err, codes.InvalidArgument)
	sent, err := threads.SendToThread(ctx, &pb.SendToThreadRequest{SessionId: sid, Key: "toolu_1", AgentId: writer, Content: content})
	if err != nil {
		t.Fatal(err)
	}
	again, err := threads.SendToThread(ctx, &pb.SendToThreadRequest{SessionId: sid, Key: "toolu_1", AgentId: writer, Content: content})
	if err != nil || again.GetThreadId() != sent.GetThreadId() {
		t.Fatalf("a retried start named thread %q (%v), want %q", again.GetThreadId(), err, sent.GetThreadId())
	}
	trun, err := cp.GetRun(ctx, &pb.GetRunRequest{SessionId: sent.GetThreadId()})
	if err != nil {
		t.Fatal(err)
	}
	if tc := trun.GetThread(); tc.GetParentSessionId() != sid || len(tc.GetRoster()) != 0 || trun.GetAgentId() != writer || !trun.GetBudgetExhausted() {
		t.Fatalf("the thread's run: context %v, agent %s, budget exhausted %v; want its session, no roster, the writer, the session's budget",
			tc, trun.GetAgentId(), trun.GetBudgetExhausted())
	}
	wait := &pb.AwaitThreadRepliesRequest{SessionId: sid, Key: "toolu_2", MaxWaitMs: 50}
	if got, err := threads.AwaitThreadReplies(ctx, wait); err != nil || got.GetDone() {
		t.Fatalf("a wait while the thread owes its reply: %v, %v; want not done", got, err)
	}
	reply, _ := json.Marshal(map[string]any{"to_session_thread_id": db.PrimaryThreadID(sid), "to_agent_name": nil,
		"content": json.RawMessage(`[{"type":"text","text":"written"}]`)})
	if _, err := cp.CompleteTurn(ctx, &pb.CompleteTurnRequest{SessionId: sent.GetThreadId(), Outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN,
		TurnKey: "turn1", Events: []*pb.NewEvent{{Key: "turn1/thread_reply", Type: db.ThreadMessageSentType, Body: string(reply)}}}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second is a retry of the first
		got, err := threads.AwaitThreadReplies(ctx, wait)
		if err != nil || !got.GetDone() || len(got.GetReplies()) != 1 || got.GetReplies()[0].GetThreadId() != sent.GetThreadId() ||
			got.GetReplies()[0].GetContent() != `[{"type":"text","text":"written"}]` {
			t.Fatalf("the wait after the reply: %v, %v; want the thread's reply", got, err)
		}
	}
	// At most MaxRunningThreads run at once.
	for i := range controlplane.MaxRunningThreads {
		if _, err := threads.SendToThread(ctx, &pb.SendToThreadRequest{SessionId: sid, Key: fmt.Sprintf("cap/%d", i), AgentId: writer,
			Content: content}); err != nil {
			t.Fatalf("thread %d: %v", i, err)
		}
	}
	_, err = threads.SendToThread(ctx, &pb.SendToThreadRequest{SessionId: sid, Key: "cap/over", AgentId: writer, Content: content})
	wantCode(t, "a thread beyond the running limit", err, codes.FailedPrecondition)
}
