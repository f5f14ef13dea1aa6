package wire

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/lib/environments"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
	"github.com/anthropics/anthropic-sdk-go/v2/shared"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// selfHosted is a test server with a self-hosted environment, an agent
// and a key of the environment.
type selfHosted struct {
	srv    *testserver.Server
	client anthropic.Client // API key
	envID  string
	envKey string
	agent  string
}

func newSelfHosted(t *testing.T) *selfHosted {
	t.Helper()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "on-prem",
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfSelfHosted: &anthropic.BetaSelfHostedConfigParams{}}})
	if err != nil {
		t.Fatalf("create self-hosted environment: %v", err)
	}
	ag, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "worker-agent",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-5"}})
	if err != nil {
		t.Fatalf("create agent: %v", err)
	}
	return &selfHosted{srv: srv, client: client, envID: env.ID, envKey: createEnvironmentKey(t, srv, env.ID), agent: ag.ID}
}

// createEnvironmentKey issues a key of envID through the admin route and
// returns its secret.
func createEnvironmentKey(t *testing.T, srv *testserver.Server, envID string) string {
	t.Helper()
	r := do(t, srv, http.MethodPost, "/admin/environments/"+envID+"/keys", "application/json", []byte(`{"name":"test"}`), nil)
	if r.status != http.StatusOK {
		t.Fatalf("create environment key: %d %s", r.status, r.body)
	}
	var k struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(r.body, &k); err != nil || k.Key == "" {
		t.Fatalf("create environment key: no key in %s (%v)", r.body, err)
	}
	return k.Key
}

// as is a client whose only credential is cred (Bearer), as the SDK's
// worker builds it.
func (h *selfHosted) as(t *testing.T, cred string) anthropic.Client {
	t.Helper()
	return anthropic.NewClient(option.WithBaseURL(h.srv.BaseURL), option.WithAuthToken(cred), option.WithMaxRetries(0))
}

// session creates a session of the environment, with a first message
// when withMessage (which queues its work item).
func (h *selfHosted) session(t *testing.T, withMessage bool) string {
	t.Helper()
	p := anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(h.agent)}, EnvironmentID: h.envID}
	if withMessage {
		p.InitialEvents = []anthropic.BetaSessionNewParamsInitialEventUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "hi"}}}}}}
	}
	s, err := h.client.Beta.Sessions.New(context.Background(), p)
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	return s.ID
}

// sessionsToken decodes the sessions token of a poll's secret as the
// SDK's worker does.
func sessionsToken(t *testing.T, secret string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(secret)
	if err != nil {
		t.Fatalf("secret is not base64url: %v", err)
	}
	var p struct {
		SessionsToken string `json:"sessions_token"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || p.SessionsToken == "" {
		t.Fatalf("secret payload %s: no sessions_token (%v)", raw, err)
	}
	return p.SessionsToken
}

// TestSelfHostedWorkLifecycle walks a session's work item through all 8
// Work methods of the SDK: poll, stats, list, get, update, ack, heartbeat
// (with a refused precondition) and stop.
func TestSelfHostedWorkLifecycle(t *testing.T) {
	h := newSelfHosted(t)
	ctx := context.Background()
	sid := h.session(t, true)
	worker := h.as(t, h.envKey)
	work := &worker.Beta.Environments.Work

	st, err := work.Stats(ctx, h.envID, anthropic.BetaEnvironmentWorkStatsParams{})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if st.Type != "work_queue_stats" || st.Depth != 1 || st.Pending != 0 || st.OldestQueuedAt == "" {
		t.Errorf("stats before poll = %s, want depth 1, pending 0 and an oldest_queued_at", st.RawJSON())
	}
	w, err := work.Poll(ctx, h.envID, anthropic.BetaEnvironmentWorkPollParams{AnthropicWorkerID: anthropic.String("w1")})
	if err != nil || w == nil {
		t.Fatalf("poll = %v, %v; want the session's work", w, err)
	}
	if w.Type != "work" || w.Data.Type != "session" || w.Data.ID != sid || w.State != "queued" || w.EnvironmentID != h.envID || w.Secret == "" {
		t.Errorf("polled work = %s, want queued session work of %s with a secret", w.RawJSON(), sid)
	}
	if raw := w.JSON.AcknowledgedAt.Raw(); raw != "null" {
		t.Errorf("acknowledged_at = %s, want null", raw)
	}
	token := sessionsToken(t, w.Secret)
	st, err = work.Stats(ctx, h.envID, anthropic.BetaEnvironmentWorkStatsParams{})
	if err != nil || st.Depth != 0 || st.Pending != 1 || st.WorkersPolling != 1 {
		t.Errorf("stats after poll = %v, %v; want depth 0, pending 1, 1 worker polling", st.RawJSON(), err)
	}
	page, err := work.List(ctx, h.envID, anthropic.BetaEnvironmentWorkListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != w.ID || page.Data[0].Secret != "" {
		t.Fatalf("list = %v, %v; want the one item, without its secret", page, err)
	}
	workItemAPIKeyCalls(t, h, w.ID)

	acked, err := work.Ack(ctx, w.ID, anthropic.BetaEnvironmentWorkAckParams{EnvironmentID: h.envID})
	if err != nil || acked.State != "starting" || acked.AcknowledgedAt == "" {
		t.Fatalf("ack = %v, %v; want starting with acknowledged_at", acked, err)
	}
	_, err = work.Ack(ctx, w.ID, anthropic.BetaEnvironmentWorkAckParams{EnvironmentID: h.envID})
	wantAPIError(t, err, http.StatusConflict)

	lease := h.as(t, token).Beta.Environments.Work
	last := workHeartbeats(t, &lease, h.envID, w.ID)
	workStops(t, h, &lease, w.ID, last)
}

// workItemAPIKeyCalls: the API key reads and updates the item.
func workItemAPIKeyCalls(t *testing.T, h *selfHosted, workID string) {
	t.Helper()
	ctx := context.Background()
	got, err := h.client.Beta.Environments.Work.Get(ctx, workID, anthropic.BetaEnvironmentWorkGetParams{EnvironmentID: h.envID})
	if err != nil || got.ID != workID || got.JSON.Secret.Raw() != "null" {
		t.Fatalf("get = %v, %v; want the item with a null secret", got, err)
	}
	up, err := h.client.Beta.Environments.Work.Update(ctx, workID, anthropic.BetaEnvironmentWorkUpdateParams{EnvironmentID: h.envID,
		BetaSelfHostedWorkUpdateRequest: anthropic.BetaSelfHostedWorkUpdateRequestParam{Metadata: map[string]string{"host": "rack-7"}}})
	if err != nil || up.Metadata["host"] != "rack-7" {
		t.Fatalf("update = %v, %v; want metadata host=rack-7", up, err)
	}
	_, err = h.client.Beta.Environments.Work.Get(ctx, "work_000000000000000000000000", anthropic.BetaEnvironmentWorkGetParams{EnvironmentID: h.envID})
	wantAPIError(t, err, http.StatusNotFound)
}

// workHeartbeats claims the lease, is refused a stale claim with the
// SDK's 412 details, and renews; it returns the last heartbeat.
func workHeartbeats(t *testing.T, lease *anthropic.BetaEnvironmentWorkService, envID, workID string) string {
	t.Helper()
	ctx := context.Background()
	hb, err := lease.Heartbeat(ctx, workID, anthropic.BetaEnvironmentWorkHeartbeatParams{EnvironmentID: envID,
		ExpectedLastHeartbeat: anthropic.String("NO_HEARTBEAT"), DesiredTTLSeconds: anthropic.Int(30)})
	if err != nil {
		t.Fatalf("first heartbeat: %v", err)
	}
	if hb.Type != "work_heartbeat" || !hb.LeaseExtended || hb.State != "active" || hb.TTLSeconds != 30 || hb.LastHeartbeat == "" {
		t.Errorf("first heartbeat = %s, want an extended active lease of 30s", hb.RawJSON())
	}
	_, err = lease.Heartbeat(ctx, workID, anthropic.BetaEnvironmentWorkHeartbeatParams{EnvironmentID: envID,
		ExpectedLastHeartbeat: anthropic.String("NO_HEARTBEAT")})
	apiErr := apiErrorWithStatus(t, err, http.StatusPreconditionFailed)
	details, ok := apiErr.Details.AsAny().(shared.BetaHeartbeatPreconditionFailedErrorDetails)
	if !ok {
		t.Fatalf("412 details = %s, want BetaHeartbeatPreconditionFailedErrorDetails", apiErr.RawJSON())
	}
	if cs := details.CurrentState; cs.LastHeartbeat != hb.LastHeartbeat || cs.LeaseExtended || cs.State != "active" || cs.TTLSeconds != 30 {
		t.Errorf("current_state = %s, want the lease as the first heartbeat left it", cs.RawJSON())
	}
	again, err := lease.Heartbeat(ctx, workID, anthropic.BetaEnvironmentWorkHeartbeatParams{EnvironmentID: envID,
		ExpectedLastHeartbeat: anthropic.String(hb.LastHeartbeat), DesiredTTLSeconds: anthropic.Int(1 << 40)})
	if err != nil || !again.LeaseExtended || again.TTLSeconds != 3600 || again.LastHeartbeat == hb.LastHeartbeat {
		t.Fatalf("renewal = %v, %v; want an extended lease clamped to 3600s with a new last_heartbeat", again, err)
	}
	return again.LastHeartbeat
}

// workStops stops the item gracefully with its own token, then forcibly
// with the environment key; the token dies with the item.
func workStops(t *testing.T, h *selfHosted, lease *anthropic.BetaEnvironmentWorkService, workID, last string) {
	t.Helper()
	ctx := context.Background()
	stopping, err := lease.Stop(ctx, workID, anthropic.BetaEnvironmentWorkStopParams{EnvironmentID: h.envID})
	if err != nil || stopping.State != "stopping" || stopping.StopRequestedAt == "" {
		t.Fatalf("graceful stop = %v, %v; want stopping", stopping, err)
	}
	hb, err := lease.Heartbeat(ctx, workID, anthropic.BetaEnvironmentWorkHeartbeatParams{EnvironmentID: h.envID,
		ExpectedLastHeartbeat: anthropic.String("anything")})
	if err != nil || hb.LeaseExtended || hb.State != "stopping" {
		t.Fatalf("heartbeat while stopping = %v, %v; want lease_extended false, stopping", hb, err)
	}
	env := h.as(t, h.envKey).Beta.Environments.Work
	stopped, err := env.Stop(ctx, workID, anthropic.BetaEnvironmentWorkStopParams{EnvironmentID: h.envID,
		BetaSelfHostedWorkStopRequest: anthropic.BetaSelfHostedWorkStopRequestParam{Force: anthropic.Bool(true)}})
	if err != nil || stopped.State != "stopped" || stopped.StoppedAt == "" {
		t.Fatalf("forced stop = %v, %v; want stopped", stopped, err)
	}
	_, err = env.Stop(ctx, workID, anthropic.BetaEnvironmentWorkStopParams{EnvironmentID: h.envID})
	wantAPIError(t, err, http.StatusConflict)
	_, err = lease.Heartbeat(ctx, workID, anthropic.BetaEnvironmentWorkHeartbeatParams{EnvironmentID: h.envID,
		ExpectedLastHeartbeat: anthropic.String(last)})
	wantAPIError(t, err, http.StatusUnauthorized)
	w, err := env.Poll(ctx, h.envID, anthropic.BetaEnvironmentWorkPollParams{})
	if err != nil || w != nil {
		t.Fatalf("poll of an empty queue = %v, %v; want nil, nil", w, err)
	}
}

// TestSelfHostedPollWakes: a long poll waiting on an empty queue returns
// the work a new message queues, well before its block_ms.
func TestSelfHostedPollWakes(t *testing.T) {
	h := newSelfHosted(t)
	ctx := context.Background()
	sid := h.session(t, false)
	work := h.as(t, h.envKey).Beta.Environments.Work
	const block = 999 * time.Millisecond
	type result struct {
		w    *anthropic.BetaSelfHostedWork
		err  error
		done time.Time
	}
	res := make(chan result, 1)
	go func() {
		w, err := work.Poll(ctx, h.envID, anthropic.BetaEnvironmentWorkPollParams{BlockMs: anthropic.Int(block.Milliseconds()),
			AnthropicWorkerID: anthropic.String("waiter")})
		res <- result{w, err, time.Now()}
	}()
	// The poll has looked at the queue once it counts as polling.
	poll.Until(t, 5*time.Second, "the long poll to reach the server", func() (bool, string) {
		st, err := work.Stats(ctx, h.envID, anthropic.BetaEnvironmentWorkStatsParams{})
		return err == nil && st.WorkersPolling == 1, fmt.Sprintf("stats %v, %v", st, err)
	})
	_, err := h.client.Beta.Sessions.Events.Send(ctx, sid, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "go"}}}}}}})
	sent := time.Now()
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	r := <-res
	if r.err != nil || r.w == nil {
		t.Fatalf("long poll = %v, %v; want the work the message queued", r.w, r.err)
	}
	if r.w.Data.ID != sid {
		t.Errorf("polled work of session %s, want %s", r.w.Data.ID, sid)
	}
	if latency := r.done.Sub(sent); latency > block/3 {
		t.Errorf("the poll returned %v after the message, more than a third of its block_ms (%v): not woken by the notification", latency, block)
	}
}

// TestSelfHostedPollParams: block_ms is 1..999, reclaim_older_than_ms a
// number, and the work routes need a self-hosted environment.
func TestSelfHostedPollParams(t *testing.T) {
	h := newSelfHosted(t)
	for _, q := range []string{"block_ms=0", "block_ms=1000", "block_ms=x", "reclaim_older_than_ms=-1"} {
		r := do(t, h.srv, http.MethodGet, "/v1/environments/"+h.envID+"/work/poll?"+q, "", nil, map[string]string{"x-api-key": "", "Authorization": "Bearer " + h.envKey})
		name, _, _ := strings.Cut(q, "=")
		checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", name)
	}
	cloud, err := h.client.Beta.Environments.New(context.Background(), anthropic.BetaEnvironmentNewParams{Name: "cloud"})
	if err != nil {
		t.Fatal(err)
	}
	r := do(t, h.srv, http.MethodGet, "/v1/environments/"+cloud.ID+"/work/"+"work_000000000000000000000000", "", nil, nil)
	checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "is not self-hosted")
	r = do(t, h.srv, http.MethodGet, "/v1/environments/env_000000000000000000000000/work/work_000000000000000000000000", "", nil, nil)
	checkEnvelope(t, r, http.StatusNotFound, "not_found_error", "env_000000000000000000000000")
	r = do(t, h.srv, http.MethodPost, "/v1/environments/"+h.envID, "application/json", []byte(`{"config":{"type":"cloud"}}`), nil)
	checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "config.type")
}

// TestSelfHostedToolResult: a worker's user.tool_result answers an
// agent.tool_use once; an unknown id is a 404, a second answer a 409, a
// session that is not self-hosted a 400, and a worker credential sends
// nothing but tool results.
func TestSelfHostedToolResult(t *testing.T) {
	h := newSelfHosted(t)
	ctx := context.Background()
	sid := h.session(t, true)
	worker := h.as(t, h.envKey)
	w, err := worker.Beta.Environments.Work.Poll(ctx, h.envID, anthropic.BetaEnvironmentWorkPollParams{})
	if err != nil || w == nil {
		t.Fatalf("poll = %v, %v", w, err)
	}
	useID := appendToolUse(t, h.srv, sid)
	runner := h.as(t, sessionsToken(t, w.Secret))
	result := func(id string) anthropic.BetaSessionEventSendParams {
		return anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserToolResult: &anthropic.BetaManagedAgentsUserToolResultEventParams{
			ToolUseID: id, Content: []anthropic.BetaManagedAgentsUserToolResultEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "total 0"}}}}}}}
	}
	sent, err := runner.Beta.Sessions.Events.Send(ctx, sid, result(useID))
	if err != nil {
		t.Fatalf("send the tool result: %v", err)
	}
	if len(sent.Data) != 1 || sent.Data[0].Type != "user.tool_result" {
		t.Errorf("sent = %s, want the user.tool_result", sent.RawJSON())
	}
	_, err = runner.Beta.Sessions.Events.Send(ctx, sid, result(useID))
	checkMessage(t, apiErrorWithStatus(t, err, http.StatusConflict), useID)
	_, err = runner.Beta.Sessions.Events.Send(ctx, sid, result("sevt_000000000000000000000000"))
	checkMessage(t, apiErrorWithStatus(t, err, http.StatusNotFound), "sevt_000000000000000000000000")
	_, err = runner.Beta.Sessions.Events.Send(ctx, sid, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{
		{OfUserInterrupt: &anthropic.BetaManagedAgentsUserInterruptEventParams{}}}})
	wantAPIError(t, err, http.StatusForbidden)
	// The runner reads the session and its events with the same token.
	if _, err := runner.Beta.Sessions.Get(ctx, sid, anthropic.BetaSessionGetParams{}); err != nil {
		t.Errorf("get the session with the work token: %v", err)
	}
	evs, err := runner.Beta.Sessions.Events.List(ctx, sid, anthropic.BetaSessionEventListParams{})
	if err != nil || len(evs.Data) == 0 || evs.Data[len(evs.Data)-1].Type != "user.tool_result" {
		t.Errorf("events = %v, %v; want the log ending with the tool result", evs, err)
	}

	cloud, err := h.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "cloud"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(h.agent)}, EnvironmentID: cloud.ID})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.client.Beta.Sessions.Events.Send(ctx, cs.ID, result(appendToolUse(t, h.srv, cs.ID)))
	checkMessage(t, apiErrorWithStatus(t, err, http.StatusBadRequest), "not self-hosted")
}

func checkMessage(t *testing.T, apiErr *anthropic.Error, want string) {
	t.Helper()
	if !strings.Contains(apiErr.Message, want) {
		t.Errorf("message %q does not name %q", apiErr.Message, want)
	}
}

// appendToolUse appends an agent.tool_use (bash) to the session as the
// worker does, and returns its event id.
func appendToolUse(t *testing.T, srv *testserver.Server, sid string) string {
	t.Helper()
	conn, ctx := workerConn(t, srv)
	resp, err := pb.NewControlPlaneClient(conn).AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid, Events: []*pb.NewEvent{{
		Key: "use-" + sid, Type: "agent.tool_use", Body: `{"name":"bash","input":{"command":"ls"},"evaluated_permission":"allow"}`}}})
	if err != nil {
		t.Fatalf("append agent.tool_use: %v", err)
	}
	return resp.Events[0].Id
}

// TestSelfHostedSDKWorkPoller drains the queue with the SDK's own
// WorkPoller: it polls, acks and, once done with an item, force-stops it
// with the item's sessions token.
func TestSelfHostedSDKWorkPoller(t *testing.T) {
	h := newSelfHosted(t)
	ctx := context.Background()
	want := map[string]bool{h.session(t, true): true, h.session(t, true): true}
	client := anthropic.NewClient(option.WithBaseURL(h.srv.BaseURL), option.WithMaxRetries(0))
	p := environments.NewWorkPoller(ctx, client, environments.WorkPollerOptions{EnvironmentID: h.envID, EnvironmentKey: h.envKey,
		WorkerID: "sdk-poller", Drain: true, BlockMs: param.Null[int64]()})
	var claimed []*anthropic.BetaSelfHostedWork
	for p.Next() {
		w := p.Current()
		if w.State != "queued" || !want[w.Data.ID] {
			t.Errorf("claimed %s, want a queued item of one of %v", w.RawJSON(), want)
		}
		claimed = append(claimed, w)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close the poller: %v", err)
	}
	if err := p.Err(); err != nil || len(claimed) != 2 {
		t.Fatalf("the poller claimed %d items (err %v), want 2", len(claimed), err)
	}
	for _, w := range claimed {
		got, err := h.client.Beta.Environments.Work.Get(ctx, w.ID, anthropic.BetaEnvironmentWorkGetParams{EnvironmentID: h.envID})
		if err != nil || got.State != "stopped" || got.AcknowledgedAt == "" {
			t.Errorf("item %s after the poller = %v, %v; want acknowledged and stopped", w.ID, got, err)
		}
	}
}
