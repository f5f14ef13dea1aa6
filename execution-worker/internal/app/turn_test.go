package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"

	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/temporaltest"
	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

type listedEvent struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Raw     json.RawMessage `json:"-"`
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
	Name       string `json:"name"`
	StopReason *struct {
		Type     string   `json:"type"`
		EventIDs []string `json:"event_ids"`
	} `json:"stop_reason"`
	Error *struct {
		Type        string `json:"type"`
		Message     string `json:"message"`
		RetryStatus struct {
			Type string `json:"type"`
		} `json:"retry_status"`
	} `json:"error"`
	IsError bool `json:"is_error"`
}

func listEvents(t *testing.T, srv *cptest.Server, session string) []listedEvent {
	t.Helper()
	var page struct {
		Data []json.RawMessage `json:"data"`
	}
	srv.Do(t, http.MethodGet, "/v1/sessions/"+session+"/events?limit=100", nil, &page)
	out := make([]listedEvent, 0, len(page.Data))
	for _, raw := range page.Data {
		var e listedEvent
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		e.Raw = raw
		out = append(out, e)
	}
	return out
}

// waitIdle waits until the session's last event is session.status_idle
// (or terminated) after at least n such events.
func waitFor(t *testing.T, srv *cptest.Server, session string, done func([]listedEvent) bool) []listedEvent {
	t.Helper()
	var evs []listedEvent
	poll.Until(t, 30*time.Second, "the awaited events of session "+session, func() (bool, string) {
		evs = listEvents(t, srv, session)
		var types []string
		for _, e := range evs {
			types = append(types, e.Type)
		}
		return done(evs), fmt.Sprintf("events so far: %v", types)
	})
	return evs
}

func countType(evs []listedEvent, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func types(evs []listedEvent) string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return strings.Join(out, ",")
}

// serverInstallation returns the installation id srv answers workers.
func serverInstallation(t *testing.T, srv *cptest.Server) string {
	t.Helper()
	cp, err := controlplane.Dial(srv.GRPCAddr, srv.WorkerToken)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Close() }()
	id, err := controlplane.Installation(t.Context(), cp)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func startStack(t *testing.T) (*cptest.Server, map[string]string) {
	t.Helper()
	hostPort := temporaltest.HostPort(t)
	srv := cptest.Start(t)
	env := map[string]string{
		"MANGO_TEMPORAL_HOSTPORT":  hostPort,
		"MANGO_CONTROLPLANE_ADDR":  srv.GRPCAddr,
		"MANGO_WORKER_TOKEN":       srv.WorkerToken,
		"MANGO_TASK_QUEUE_PREFIX":  srv.TaskQueuePrefix,
		"MANGO_SANDBOX":            "local",
		"MANGO_LOCAL_SANDBOX_ROOT": t.TempDir(),
		"MANGO_SHUTDOWN_GRACE":     "10s",
		"MANGO_RECONCILE_INTERVAL": "1h",
	}
	return srv, env
}

func sendMessage(t *testing.T, srv *cptest.Server, session, text string) {
	t.Helper()
	srv.Do(t, http.MethodPost, "/v1/sessions/"+session+"/events", map[string]any{"events": []any{
		map[string]any{"type": "user.message", "content": []any{map[string]any{"type": "text", "text": text}}},
	}}, nil)
}

func idleCount(evs []listedEvent) int { return countType(evs, "session.status_idle") }

// TestTurnWithBuiltinTool runs a full turn: the fake model calls bash, the
// worker runs it in the session's local sandbox, and the turn ends idle.
func TestTurnWithBuiltinTool(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	session := srv.NewSession(t, "local")
	sendMessage(t, srv, session, `#tool bash {"command":"echo hello > f.txt; cat f.txt"}`)
	evs := waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	want := "user.message,session.status_running,span.model_request_start,span.model_request_end,agent.tool_use,agent.tool_result," +
		"span.model_request_start,agent.message,span.model_request_end,session.usage,session.status_idle"
	if got := types(evs); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	for _, e := range evs {
		switch e.Type {
		case "agent.tool_result":
			if e.IsError || len(e.Content) == 0 || !strings.Contains(e.Content[0].Text, "hello") {
				t.Errorf("tool result = %s, want a success containing \"hello\"", e.Raw)
			}
		case "session.status_idle":
			if e.StopReason == nil || e.StopReason.Type != "end_turn" {
				t.Errorf("idle = %s, want end_turn", e.Raw)
			}
		}
	}
	// The next turn runs in the same sandbox: the file is still there.
	// The idle event is visible before the api-server counts the call
	// that committed it: wait for the count.
	var before map[string]float64
	poll.Until(t, 10*time.Second, "the api-server to count the first CompleteTurn", func() (bool, string) {
		before = controlPlaneCalls(t, srv)
		return before["CompleteTurn"] >= 1, fmt.Sprintf("calls %v", before)
	})
	sendMessage(t, srv, session, `#tool bash {"command":"cat f.txt"}`)
	evs = waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 2 })
	// A one-bash-round turn makes 7 ControlPlane calls: the run, the span
	// start, the model's tool use, the tool's start and result in the
	// journal, the result with the next span start, and the final answer
	// with the turn's end.
	after := controlPlaneCalls(t, srv)
	wantCalls := map[string]float64{"GetRun": 1, "AppendEvents": 3, "RecordToolJournal": 2, "CompleteTurn": 1}
	for method, n := range after {
		if d := n - before[method]; d != wantCalls[method] && method != "RecordWorkerHeartbeat" {
			t.Errorf("the second turn made %v %s calls, want %v (all: before %v, after %v)", d, method, wantCalls[method], before, after)
		}
	}
	last := ""
	for _, e := range evs {
		if e.Type == "agent.tool_result" {
			last = e.Content[0].Text
		}
	}
	if !strings.Contains(last, "hello") {
		t.Errorf("second turn's tool result = %q, want the file written in the first turn", last)
	}
	_ = fmt.Sprint
}

func newAgentSession(t *testing.T, srv *cptest.Server, tools []any) string {
	t.Helper()
	var agent, env, sess struct{ ID string }
	srv.Do(t, http.MethodPost, "/v1/agents", map[string]any{"name": "turns", "model": "fake", "tools": tools}, &agent)
	srv.Do(t, http.MethodPost, "/v1/environments", map[string]any{"name": fmt.Sprintf("turns-%d", time.Now().UnixNano())}, &env)
	srv.Do(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": env.ID}, &sess)
	return sess.ID
}

func sendEvent(t *testing.T, srv *cptest.Server, session string, ev map[string]any) {
	t.Helper()
	srv.Do(t, http.MethodPost, "/v1/sessions/"+session+"/events", map[string]any{"events": []any{ev}}, nil)
}

func lastOf(evs []listedEvent, typ string) *listedEvent {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == typ {
			return &evs[i]
		}
	}
	return nil
}

// TestCustomToolParksAndResumes: a custom tool call parks the session idle
// with requires_action naming the agent.custom_tool_use event; the client's
// user.custom_tool_result resumes the turn, which ends with the model's
// answer using the result.
func TestCustomToolParksAndResumes(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	session := newAgentSession(t, srv, []any{map[string]any{"type": "custom", "name": "lookup_order",
		"description": "Look up an order", "input_schema": map[string]any{"type": "object"}}})
	sendMessage(t, srv, session, `#tool lookup_order {"id":"42"}`)
	evs := waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	use := lastOf(evs, "agent.custom_tool_use")
	idle := lastOf(evs, "session.status_idle")
	if use == nil || use.Name != "lookup_order" || idle.StopReason == nil || idle.StopReason.Type != "requires_action" ||
		len(idle.StopReason.EventIDs) != 1 || idle.StopReason.EventIDs[0] != use.ID {
		t.Fatalf("parked events = %s, want requires_action on the one tool use", types(evs))
	}
	sendEvent(t, srv, session, map[string]any{"type": "user.custom_tool_result", "custom_tool_use_id": use.ID,
		"content": []any{map[string]any{"type": "text", "text": "shipped"}}})
	evs = waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 2 })
	msg := lastOf(evs, "agent.message")
	if msg == nil || !strings.Contains(msg.Content[0].Text, "shipped") {
		t.Fatalf("after the result: %s, want an agent.message containing \"shipped\"", types(evs))
	}
	if idle := lastOf(evs, "session.status_idle"); idle.StopReason.Type != "end_turn" {
		t.Errorf("final stop reason = %s, want end_turn", idle.Raw)
	}
}

// TestAlwaysAskConfirmation: an always_ask built-in parks for
// confirmation; deny feeds the denial to the model, allow runs the tool.
func TestAlwaysAskConfirmation(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	session := newAgentSession(t, srv, []any{map[string]any{"type": "agent_toolset_20260401",
		"default_config": map[string]any{"permission_policy": map[string]any{"type": "always_ask"}}}})
	sendMessage(t, srv, session, `#tool bash {"command":"echo ran > proof.txt; echo ran"}`)
	evs := waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	use := lastOf(evs, "agent.tool_use")
	if use == nil || !strings.Contains(string(use.Raw), `"evaluated_permission":"ask"`) || countType(evs, "agent.tool_result") != 0 {
		t.Fatalf("ask events = %s (%v), want a tool use evaluated \"ask\" and no tool result", types(evs), use)
	}
	sendEvent(t, srv, session, map[string]any{"type": "user.tool_confirmation", "tool_use_id": use.ID, "result": "deny", "deny_message": "not now"})
	evs = waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 2 })
	res := lastOf(evs, "agent.tool_result")
	if res == nil || !res.IsError || !strings.Contains(res.Content[0].Text, "not now") {
		t.Fatalf("denied result = %v (%s), want an error containing \"not now\"", res, types(evs))
	}
	sendMessage(t, srv, session, `#tool bash {"command":"echo ran"}`)
	evs = waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 3 })
	use = lastOf(evs, "agent.tool_use")
	sendEvent(t, srv, session, map[string]any{"type": "user.tool_confirmation", "tool_use_id": use.ID, "result": "allow"})
	evs = waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 4 })
	res = lastOf(evs, "agent.tool_result")
	if res == nil || res.IsError || !strings.Contains(res.Content[0].Text, "ran") {
		t.Fatalf("allowed result = %v, want a success containing \"ran\"", res)
	}
}

// TestTransientModelErrorsRetry: retryable model errors reschedule the
// session and retry; the turn then completes. Persistent errors exhaust
// the retries and end idle with retries_exhausted.
func TestTransientModelErrorsRetry(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	session := srv.NewSession(t, "local")
	sendMessage(t, srv, session, "#error server 1\n#reply recovered")
	evs := waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	if countType(evs, "session.status_rescheduled") != 1 || countType(evs, "session.error") != 1 {
		t.Fatalf("events = %s, want 1 session.status_rescheduled and 1 session.error", types(evs))
	}
	if e := lastOf(evs, "session.error"); e.Error == nil || e.Error.RetryStatus.Type != "retrying" {
		t.Errorf("session.error = %s, want retry status retrying", e.Raw)
	}
	if m := lastOf(evs, "agent.message"); m == nil || m.Content[0].Text != "recovered" {
		t.Errorf("final message = %v, want \"recovered\"", m)
	}
	if idle := lastOf(evs, "session.status_idle"); idle.StopReason.Type != "end_turn" {
		t.Errorf("stop reason = %s, want end_turn", idle.Raw)
	}
}

// TestRoundLimit: a model that never stops calling tools is cut at 20
// model requests with session.error tool_use_limit_reached_error.
func TestRoundLimit(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	session := srv.NewSession(t, "local")
	sendMessage(t, srv, session, "#loop")
	evs := waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	if n := countType(evs, "span.model_request_start"); n != 20 {
		t.Errorf("model requests = %d, want 20", n)
	}
	if e := lastOf(evs, "session.error"); e == nil || e.Error.Type != "tool_use_limit_reached_error" {
		t.Errorf("events = %s, want a session.error of type tool_use_limit_reached_error", types(evs))
	}
}

// TestInterruptEndsTurn: user.interrupt during a slow turn ends it idle
// quickly.
func TestInterruptEndsTurn(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	session := srv.NewSession(t, "local")
	sendMessage(t, srv, session, `#tool bash {"command":"sleep 30"}`)
	waitFor(t, srv, session, func(e []listedEvent) bool { return countType(e, "agent.tool_use") == 1 })
	start := time.Now()
	sendEvent(t, srv, session, map[string]any{"type": "user.interrupt"})
	evs := waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	elapsed := time.Since(start)
	t.Logf("user.interrupt to session.status_idle: %v", elapsed)
	if elapsed > 3*time.Second {
		t.Errorf("interrupt took %v to end the turn, want at most 3s", elapsed)
	}
	if idle := lastOf(evs, "session.status_idle"); idle.StopReason.Type != "end_turn" {
		t.Errorf("stop reason = %s, want end_turn", idle.Raw)
	}
	// The session keeps working afterwards.
	sendMessage(t, srv, session, "#reply still here")
	evs = waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 2 })
	if m := lastOf(evs, "agent.message"); m == nil || m.Content[0].Text != "still here" {
		t.Errorf("after the interrupt: %s, want the agent.message \"still here\"", types(evs))
	}
}

// TestDeleteStopsWorkflow: deleting a session that has run a turn (no
// sandbox) stops its workflow and deletes its row.
func TestDeleteStopsWorkflow(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	session := newAgentSession(t, srv, []any{})
	sendMessage(t, srv, session, "#reply hi")
	waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	srv.Do(t, http.MethodDelete, "/v1/sessions/"+session, nil, nil)
	cp := dialControlPlane(t, srv)
	poll.Until(t, 30*time.Second, "the session row to be deleted (append answers NotFound)", func() (bool, string) {
		st := deletionState(t, cp, session)
		return st.Code() == codes.NotFound, fmt.Sprintf("append %v", st.Err())
	})
	c := temporaltest.Dial(t, env["MANGO_TEMPORAL_HOSTPORT"])
	poll.Until(t, 30*time.Second, "the session workflow to stop after the deletion", func() (bool, string) {
		desc, err := c.DescribeWorkflow(context.Background(), session, "")
		if err != nil {
			t.Fatal(err)
		}
		return desc.Status != enums.WORKFLOW_EXECUTION_STATUS_RUNNING, fmt.Sprintf("status %v", desc.Status)
	})
}

// TestVanishedSandboxFailsSession: the session's workspace removed behind
// Mango's back makes the next turn fail with a session.error naming the
// sandbox; nothing replaces it.
func TestVanishedSandboxFailsSession(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	session := srv.NewSession(t, "local")
	sendMessage(t, srv, session, `#tool bash {"command":"echo x > kept.txt"}`)
	waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	root := env["MANGO_LOCAL_SANDBOX_ROOT"]
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	sendMessage(t, srv, session, `#tool bash {"command":"cat kept.txt"}`)
	evs := waitFor(t, srv, session, func(e []listedEvent) bool { return countType(e, "session.status_terminated") == 1 })
	errEv := lastOf(evs, "session.error")
	if errEv == nil || errEv.Error == nil || errEv.Error.Type != "unknown_error" || errEv.Error.RetryStatus.Type != "terminal" ||
		!strings.Contains(errEv.Error.Message, "no longer exists") {
		t.Fatalf("session.error = %v (%s), want a terminal unknown_error saying the sandbox \"no longer exists\"", errEv, types(evs))
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("a replacement sandbox was created: %v", entries)
	}
}

// TestContinueAsNew: a session workflow whose history passes its limit
// continues as new while idle and keeps serving turns.
func TestContinueAsNew(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	session := srv.NewSession(t, "local")
	firstRun := startSessionWorkflow(t, env, session, 20)
	for i := 1; i <= 3; i++ {
		sendMessage(t, srv, session, fmt.Sprintf("#reply turn %d", i))
		waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == i })
	}
	// The workflow continues as new once it processed the last turn's
	// result, just after the idle event: poll.
	c := temporaltest.Dial(t, env["MANGO_TEMPORAL_HOSTPORT"])
	poll.Until(t, 15*time.Second, "the first run to continue as new", func() (bool, string) {
		desc, err := c.DescribeWorkflow(context.Background(), session, firstRun)
		if err != nil {
			t.Fatal(err)
		}
		return desc.Status == enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, fmt.Sprintf("status %v", desc.Status)
	})
	// And the new run serves the next turn.
	sendMessage(t, srv, session, "#reply after")
	waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 4 })
}

// startSessionWorkflow starts a session's workflow directly with a small
// history limit (the api-server's outbox then signals this run).
func startSessionWorkflow(t *testing.T, env map[string]string, session string, limit int32) string {
	t.Helper()
	c := temporaltest.Dial(t, env["MANGO_TEMPORAL_HOSTPORT"])
	run, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID:        session,
		TaskQueue: sessionwf.Queues{Prefix: env["MANGO_TASK_QUEUE_PREFIX"]}.Provider("local"),
	}, sessionwf.WorkflowType, &sessionv1.SessionWorkflowInput{SessionId: session, Provider: "local", HistoryLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	return run.GetRunID()
}

// TestLocalityGoneFailsTurn: when no worker of the locality holding a
// session's local sandbox is alive, the next turn waits the host-gone
// window, then fails explicitly (a session.error naming the sandbox and
// its locality, idle with retries_exhausted, the session still usable);
// once a worker of that locality is back, the next turn runs in the same
// sandbox.
func TestLocalityGoneFailsTurn(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	stop := runWorker(t, env)
	session := srv.NewSession(t, "local")
	startSessionWorkflowWith(t, env, session, &sessionv1.SessionWorkflowInput{SessionId: session, Provider: "local", HostQueueTimeoutSeconds: 2})
	sendMessage(t, srv, session, `#tool bash {"command":"echo kept > kept.txt"}`)
	waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	stop()
	// A worker of another locality (another sandbox root) serves the
	// provider's queue, and so the check, but cannot reach the sandbox.
	other := maps.Clone(env)
	other["MANGO_LOCAL_SANDBOX_ROOT"] = t.TempDir()
	runWorker(t, other)
	sendMessage(t, srv, session, `#tool bash {"command":"cat kept.txt"}`)
	evs := waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 2 })
	errEv := lastOf(evs, "session.error")
	if errEv == nil || errEv.Error == nil || errEv.Error.Type != "unknown_error" || errEv.Error.RetryStatus.Type != "exhausted" ||
		!strings.Contains(errEv.Error.Message, "local sandbox") || !strings.Contains(errEv.Error.Message, env["MANGO_TASK_QUEUE_PREFIX"]+".local.") {
		t.Fatalf("session.error = %s (events %s), want unknown_error, exhausted, naming the sandbox and its locality queue", errEv.Raw, types(evs))
	}
	if idle := lastOf(evs, "session.status_idle"); idle.StopReason == nil || idle.StopReason.Type != "retries_exhausted" {
		t.Errorf("idle after the failed turn = %s, want stop reason retries_exhausted", idle.Raw)
	}
	if n := countType(evs, "session.status_terminated"); n != 0 {
		t.Errorf("session terminated (%d); it must stay usable", n)
	}
	if n := countType(evs, "agent.tool_use"); n != 1 {
		t.Errorf("tool uses = %d, want 1: the failed turn must not run anywhere", n)
	}

	// The locality comes back: the next turn runs in the same sandbox.
	runWorker(t, env)
	sendMessage(t, srv, session, `#tool bash {"command":"cat kept.txt"}`)
	evs = waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 3 })
	if r := lastOf(evs, "agent.tool_result"); r == nil || len(r.Content) == 0 || strings.TrimSpace(r.Content[0].Text) != "kept" {
		t.Errorf("tool result after the locality came back = %v, want the file written in the first turn", r)
	}
	if idle := lastOf(evs, "session.status_idle"); idle.StopReason.Type != "end_turn" {
		t.Errorf("last idle = %s, want end_turn", idle.Raw)
	}
}

// TestMovedBindingIsFollowed: a session bound to a queue nobody serves
// any more (a per-worker host queue of an earlier version), whose binding
// the reconciler of a worker that reaches the sandbox has re-pointed to
// that worker's locality, runs its next turn there, in the same sandbox.
func TestMovedBindingIsFollowed(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	old := maps.Clone(env)
	old["MANGO_SANDBOX_LOCALITY"] = "oldhost-4242" // the queue an earlier version named
	stopOld := runWorker(t, old)
	session := srv.NewSession(t, "local")
	startSessionWorkflowWith(t, env, session, &sessionv1.SessionWorkflowInput{SessionId: session, Provider: "local", HostQueueTimeoutSeconds: 2})
	sendMessage(t, srv, session, `#tool bash {"command":"echo kept > kept.txt"}`)
	waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	stopOld()

	// What the new worker's reconciler does for a sandbox it reaches whose
	// queue is dead: re-point the binding to its own locality.
	local, err := sandboxlocal.New(sandboxlocal.Config{Root: env["MANGO_LOCAL_SANDBOX_ROOT"], Installation: serverInstallation(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	loc, err := local.Locality(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.Dial(srv.GRPCAddr, srv.WorkerToken)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Close() }()
	bindings := controlplane.NewBindings(cp)
	queues := sessionwf.Queues{Prefix: env["MANGO_TASK_QUEUE_PREFIX"]}
	b, err := bindings.GetBinding(context.Background(), session)
	if err != nil || b.TaskQueue != queues.Locality("local", "oldhost-4242") {
		t.Fatalf("binding = %+v, %v; want it on the old queue", b, err)
	}
	r := &sandbox.Reconciler{Provider: local, Bindings: bindings,
		TaskQueue: queues.Locality("local", loc), Installation: serverInstallation(t, srv),
		QueueLive: func(context.Context, string) (bool, error) { return false, nil }}
	if res, err := r.RunOnce(context.Background()); err != nil || len(res.Moved) != 1 {
		t.Fatalf("reconcile = %+v, %v; want the binding moved", res, err)
	}

	runWorker(t, env) // the default locality for this host and root
	sendMessage(t, srv, session, `#tool bash {"command":"cat kept.txt"}`)
	evs := waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 2 })
	if r := lastOf(evs, "agent.tool_result"); r == nil || len(r.Content) == 0 || strings.TrimSpace(r.Content[0].Text) != "kept" {
		t.Errorf("tool result after the move = %v (events %s), want the file of the first turn", r, types(evs))
	}
	if n := countType(evs, "session.error"); n != 0 {
		t.Errorf("session errors = %d, want none: the moved binding is followed, not failed", n)
	}
}

func startSessionWorkflowWith(t *testing.T, env map[string]string, session string, in *sessionv1.SessionWorkflowInput) {
	t.Helper()
	c := temporaltest.Dial(t, env["MANGO_TEMPORAL_HOSTPORT"])
	if _, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: session, TaskQueue: sessionwf.Queues{Prefix: env["MANGO_TASK_QUEUE_PREFIX"]}.Provider("local"),
	}, sessionwf.WorkflowType, in); err != nil {
		t.Fatal(err)
	}
}
