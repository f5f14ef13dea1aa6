package controlplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mangohq/mango/api-server/internal/broadcast"
	"github.com/mangohq/mango/api-server/internal/controlplane"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/pglisten"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// selfHostedEnv is a ControlPlane on the real clock whose AwaitToolResult
// is woken by the events NOTIFY channel (through pglisten, as in app.go),
// with a session of a self-hosted environment and one of a cloud one.
type selfHostedEnv struct {
	store        *db.Store
	client       pb.ControlPlaneClient
	sid, cloudID string
	// looked receives (without blocking) when the server reads its clock
	// after its first: AwaitToolResult does so after each read that found
	// no answer, before it waits.
	looked chan struct{}
}

func startSelfHosted(t *testing.T) *selfHostedEnv {
	t.Helper()
	ctx := t.Context()
	store := dbtest.Store(t)
	waits := &broadcast.Keyed{}
	l := pglisten.New(store.Pool().Config().ConnConfig, slog.New(slog.DiscardHandler))
	l.Handle(db.NotifyChannel, broadcast.Tee(waits))
	lctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(lctx) }()
	t.Cleanup(func() { stop(); <-done })
	e := &selfHostedEnv{store: store, looked: make(chan struct{}, 1)}
	var calls atomic.Int64
	clock := func() time.Time {
		if calls.Add(1) > 1 {
			select {
			case e.looked <- struct{}{}:
			default:
			}
		}
		return time.Now()
	}
	e.client = serve(t, controlplane.Deps{Store: store, Token: token, EventWaits: waits, Now: clock})
	now := time.Now().UTC()
	for _, typ := range []string{"self_hosted", "cloud"} {
		envID, sid := ids.New(ids.Environment), ids.New(ids.Session)
		if _, err := store.EnvironmentCreate(ctx, &db.Environment{ID: envID, Name: envID, Config: json.RawMessage(`{"type":"` + typ + `"}`),
			Scope: "organization", CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: sid, AgentID: ids.New(ids.Agent), AgentVersion: 1,
			Agent: json.RawMessage(`{"name":"a","model":{"id":"m"}}`), EnvironmentID: &envID, Provider: "local", Now: now,
			SelfHosted: typ == "self_hosted"}, nil); err != nil {
			t.Fatal(err)
		}
		if typ == "self_hosted" {
			e.sid = sid
		} else {
			e.cloudID = sid
		}
	}
	return e
}

// toolUse appends an agent.tool_use of bash to session sid as a worker
// does and returns its id.
func (e *selfHostedEnv) toolUse(t *testing.T, sid, key string) string {
	t.Helper()
	resp, err := e.client.AppendEvents(authed(t.Context()), &pb.AppendEventsRequest{SessionId: sid, Events: []*pb.NewEvent{{Key: key,
		Type: "agent.tool_use", Body: `{"name":"bash","input":{"command":"ls"},"evaluated_permission":"allow"}`}}})
	if err != nil {
		t.Fatalf("append agent.tool_use: %v", err)
	}
	return resp.GetEvents()[0].GetId()
}

// clientResult commits the client's user.tool_result for useID as the
// HTTP API does.
func (e *selfHostedEnv) clientResult(ctx context.Context, useID, text string) error {
	body, _ := json.Marshal(map[string]any{"tool_use_id": useID, "is_error": false, "content": []map[string]string{{"type": "text", "text": text}}})
	_, _, err := e.store.Append(ctx, e.sid, &db.AppendRequest{Events: []db.NewEvent{{ID: ids.New(ids.Event), Type: "user.tool_result", Body: body}},
		ToolResults: []string{useID}, Now: time.Now().UTC()})
	return err
}

func (e *selfHostedEnv) await(ctx context.Context, sid, useID string, timeout, maxWait time.Duration) (*pb.AwaitToolResultResponse, error) {
	return e.client.AwaitToolResult(authed(ctx), &pb.AwaitToolResultRequest{SessionId: sid, ToolUseEventId: useID,
		Timeout: durationpb.New(timeout), MaxWait: durationpb.New(maxWait)})
}

// TestAwaitToolResultWokenByTheClientsResult: a waiting AwaitToolResult
// returns the client's user.tool_result as soon as it commits (woken by
// the events notification, well before max_wait), and a call again (a
// retried activity) returns the same answer. The agent.tool_use append
// ensured the session's work item.
func TestAwaitToolResultWokenByTheClientsResult(t *testing.T) {
	t.Parallel()
	e := startSelfHosted(t)
	useID := e.toolUse(t, e.sid, "sevt_t/1/tool_use/toolu_1")
	sess, err := e.store.SessionGet(t.Context(), e.sid)
	if err != nil {
		t.Fatal(err)
	}
	if items, _, err := e.store.WorkList(t.Context(), *sess.EnvironmentID, 10, nil); err != nil || len(items) != 1 || items[0].SessionID != e.sid {
		t.Errorf("work items after the agent.tool_use: %+v, %v; want one for the session", items, err)
	}

	// Woken, it answers in milliseconds; a server that only looked again
	// every second (or at max_wait) would take 1s or more.
	const maxWait = 4 * time.Second
	type result struct {
		resp *pb.AwaitToolResultResponse
		err  error
		took time.Duration
	}
	got := make(chan result, 1)
	started := time.Now()
	go func() {
		resp, err := e.await(t.Context(), e.sid, useID, time.Minute, maxWait)
		got <- result{resp, err, time.Since(started)}
	}()
	// The server read the log and found no answer: it waits now.
	select {
	case <-e.looked:
	case r := <-got:
		t.Fatalf("AwaitToolResult returned %v, %v before the client's result", r.resp, r.err)
	}
	if err := e.clientResult(t.Context(), useID, "listing"); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.resp.GetResolved() || r.resp.GetTimedOut() || r.resp.GetIsError() || !jsonEqual(r.resp.GetContent(), `[{"type":"text","text":"listing"}]`) {
		t.Errorf("AwaitToolResult = %v, want the client's result", r.resp)
	}
	if r.took > maxWait/8 {
		t.Errorf("AwaitToolResult took %v of its %v max wait: want it woken by the commit", r.took, maxWait)
	}
	again, err := e.await(t.Context(), e.sid, useID, time.Minute, maxWait)
	if err != nil || again.GetAnswerEventId() != r.resp.GetAnswerEventId() || again.GetContent() != r.resp.GetContent() {
		t.Errorf("AwaitToolResult again = %v, %v; want the same answer %s", again, err, r.resp.GetAnswerEventId())
	}
}

// TestAwaitToolResultTimesOut: once the timeout (from the tool_use's
// creation) passes unanswered, AwaitToolResult appends one agent.tool_result
// error naming the tool and the timeout, returns it as timed out, returns
// it again when called again, and the client's late result is refused as
// answered already.
func TestAwaitToolResultTimesOut(t *testing.T) {
	t.Parallel()
	e := startSelfHosted(t)
	useID := e.toolUse(t, e.sid, "sevt_t/1/tool_use/toolu_2")
	const timeout = 300 * time.Millisecond
	resp, err := e.await(t.Context(), e.sid, useID, timeout, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetResolved() || !resp.GetTimedOut() || !resp.GetIsError() || !strings.Contains(resp.GetContent(), "bash") ||
		!strings.Contains(resp.GetContent(), timeout.String()) {
		t.Errorf("AwaitToolResult = %v, want a timed-out error result naming bash and %v", resp, timeout)
	}
	again, err := e.await(t.Context(), e.sid, useID, timeout, 10*time.Second)
	if err != nil || again.GetAnswerEventId() != resp.GetAnswerEventId() || !again.GetTimedOut() {
		t.Errorf("AwaitToolResult again = %v, %v; want the same answer %s", again, err, resp.GetAnswerEventId())
	}
	var n int
	if err := e.store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM events WHERE session_id = $1 AND type = 'agent.tool_result'`, e.sid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d agent.tool_result events, want 1", n)
	}
	var answered *db.ToolUseError
	if err := e.clientResult(t.Context(), useID, "too late"); !errors.As(err, &answered) || !answered.Answered {
		t.Errorf("late client result: %v, want a *db.ToolUseError answered", err)
	}
}

// TestAwaitToolResultEndsOnDrain: a held AwaitToolResult answers
// resolved false at once when the server drains (a graceful stop), so
// that the worker calls another replica instead of holding the stop up.
func TestAwaitToolResultEndsOnDrain(t *testing.T) {
	t.Parallel()
	e := startSelfHosted(t)
	drain := make(chan struct{})
	client := serve(t, controlplane.Deps{Store: e.store, Token: token, Drain: drain})
	useID := e.toolUse(t, e.sid, "sevt_t/1/tool_use/toolu_5")
	got := make(chan error, 1)
	go func() {
		resp, err := client.AwaitToolResult(authed(t.Context()), &pb.AwaitToolResultRequest{SessionId: e.sid, ToolUseEventId: useID,
			Timeout: durationpb.New(time.Hour), MaxWait: durationpb.New(time.Hour)})
		if err == nil && resp.GetResolved() {
			err = errors.New("resolved, want not")
		}
		got <- err
	}()
	close(drain)
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("AwaitToolResult on drain: %v, want resolved false", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AwaitToolResult still held 30s after the drain, with an hour's max wait")
	}
}

// TestAwaitToolResultRefusals: nothing yet within max_wait answers
// resolved false; a session not of a self-hosted environment, an unknown
// tool use and a request without timeout are refused.
func TestAwaitToolResultRefusals(t *testing.T) {
	t.Parallel()
	e := startSelfHosted(t)
	useID := e.toolUse(t, e.sid, "sevt_t/1/tool_use/toolu_3")
	resp, err := e.await(t.Context(), e.sid, useID, time.Minute, 50*time.Millisecond)
	if err != nil || resp.GetResolved() {
		t.Errorf("AwaitToolResult with nothing yet = %v, %v; want resolved false", resp, err)
	}
	cloudUse := e.toolUse(t, e.cloudID, "sevt_t/1/tool_use/toolu_4")
	if sess, err := e.store.SessionGet(t.Context(), e.cloudID); err != nil {
		t.Fatal(err)
	} else if items, _, err := e.store.WorkList(t.Context(), *sess.EnvironmentID, 10, nil); err != nil || len(items) != 0 {
		t.Errorf("work items of the cloud environment after an agent.tool_use: %+v, %v; want none", items, err)
	}
	_, err = e.await(t.Context(), e.cloudID, cloudUse, time.Minute, time.Second)
	wantCode(t, "cloud session", err, codes.FailedPrecondition)
	_, err = e.await(t.Context(), e.sid, ids.New(ids.Event), time.Minute, time.Second)
	wantCode(t, "unknown tool use", err, codes.NotFound)
	_, err = e.client.AwaitToolResult(authed(t.Context()), &pb.AwaitToolResultRequest{SessionId: e.sid, ToolUseEventId: useID})
	wantCode(t, "no timeout", err, codes.InvalidArgument)
	_, err = e.await(t.Context(), ids.New(ids.Session), useID, time.Minute, time.Second)
	wantCode(t, "unknown session", err, codes.NotFound)
}
