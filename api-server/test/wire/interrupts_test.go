package wire

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"google.golang.org/grpc"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/mcptest"
	"github.com/mangohq/mango/internal/poll"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// watchInterrupts opens a WatchInterrupts stream on srv the way a worker
// does and returns it once the server has subscribed it (headers read).
func watchInterrupts(t *testing.T, srv *testserver.Server) grpc.ServerStreamingClient[pb.WatchInterruptsResponse] {
	t.Helper()
	conn, ctx := workerConn(t, srv)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	st, err := pb.NewControlPlaneClient(conn).WatchInterrupts(ctx, &pb.WatchInterruptsRequest{WorkerId: "wire-test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Header(); err != nil {
		t.Fatalf("watch interrupts: %v", err)
	}
	return st
}

// sendEvent posts one client event and returns the stored event's id.
func sendEvent(t *testing.T, srv *testserver.Server, sessionID string, ev map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"events": []any{ev}})
	r := do(t, srv, "POST", "/v1/sessions/"+sessionID+"/events", "application/json", b, nil)
	if r.status != 200 {
		t.Fatalf("send %v: %d %s", ev, r.status, r.body)
	}
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.body), &out); err != nil || len(out.Data) != 1 {
		t.Fatalf("send %v: answer %s (%v), want one event", ev, r.body, err)
	}
	return out.Data[0].ID
}

// TestInterruptsAcrossReplicas commits interrupts on replica B and reads
// them from a worker stream held by replica A (two api-servers on one
// database): only interrupts that wake a running session are pushed, with
// the stored event's id and position.
func TestInterruptsAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := testserver.Start(t)
	b := testserver.Start(t, testserver.WithDatabase(a.DatabaseURL), testserver.WithEnv("MANGO_TASK_QUEUE_PREFIX", a.TaskQueuePrefix))
	st := watchInterrupts(t, a)
	got := make(chan *pb.WatchInterruptsResponse, 16)
	go func() {
		for {
			msg, err := st.Recv()
			if err != nil {
				close(got)
				return
			}
			got <- msg
		}
	}()
	eb := &turnEnv{srv: b, client: newClient(t, b)}
	idle := eb.session(t, nil)
	// On an idle session an interrupt has nothing to stop: not pushed.
	sendEvent(t, b, idle, map[string]any{"type": "user.interrupt"})
	// No worker serves these replicas: a message leaves the session
	// running, and an interrupt then wakes it.
	running := eb.session(t, nil)
	eb.say(t, running, "hello")
	want := sendEvent(t, b, running, map[string]any{"type": "user.interrupt"})
	select {
	case msg, ok := <-got:
		if !ok {
			t.Fatal("interrupt stream ended before the interrupt arrived")
		}
		if msg.GetSessionId() != running || msg.GetEventId() != want {
			t.Fatalf("pushed interrupt = %v, want session %s event %s (the idle session's interrupt must not be pushed)", msg, running, want)
		}
		// The pushed seq is the stored event's position in the log.
		evs, err := eb.client.Beta.Sessions.Events.List(context.Background(), running, anthropic.BetaSessionEventListParams{})
		if err != nil {
			t.Fatal(err)
		}
		var seq int64
		for i, ev := range evs.Data {
			if ev.ID == want {
				seq = int64(i + 1)
			}
		}
		if msg.GetSeq() != seq {
			t.Fatalf("pushed seq = %d, want %d (the interrupt's position in the log)", msg.GetSeq(), seq)
		}
		if msg.GetOutboxId() <= 0 {
			t.Fatalf("pushed outbox_id = %d, want the id of the interrupt's outbox row", msg.GetOutboxId())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no interrupt on replica A's stream within 10s of its commit on replica B")
	}
	select {
	case msg := <-got:
		t.Fatalf("unexpected second interrupt %v", msg)
	case <-time.After(200 * time.Millisecond):
	}
}

// interruptEnv is a server with one worker whose metrics are scraped.
type interruptEnv struct {
	*turnEnv
	metrics string // the worker's metrics URL
}

// newInterruptEnv starts a server and a worker with its metrics on a free
// port and extra environment; MCP servers on 127.0.0.1 are allowed.
func newInterruptEnv(t *testing.T, extra map[string]string) *interruptEnv {
	t.Helper()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_MCP_ALLOW_PRIVATE", "1"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	env := map[string]string{"MANGO_METRICS_ADDR": addr, "MANGO_MCP_ALLOW_PRIVATE": "1", "MANGO_LOG_LEVEL": "info"}
	for k, v := range extra {
		env[k] = v
	}
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	e.worker = startWorkerWith(t, srv, "wire-interrupts", e.root, env)
	e.worker.polling(t)
	return &interruptEnv{turnEnv: e, metrics: "http://" + addr + "/metrics"}
}

// metric reads one unlabelled counter or gauge of the worker (0 when
// absent).
func (e *interruptEnv) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(e.metrics)
	if err != nil {
		t.Fatalf("scrape worker metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s = %q: %v", name, v, err)
			}
			return f
		}
	}
	return 0
}

// waitMetric waits until the worker's metric reaches want.
func (e *interruptEnv) waitMetric(t *testing.T, name string, want float64) {
	t.Helper()
	poll.Until(t, 30*time.Second, fmt.Sprintf("worker metric %s to reach %v", name, want), func() (bool, string) {
		v := e.metric(t, name)
		return v >= want, fmt.Sprintf("%s = %v", name, v)
	})
}

// interruptAt sends user.interrupt and returns how long until the session
// is idle again, failing unless the idle has stop reason end_turn.
func (e *interruptEnv) interruptAt(t *testing.T, id string, events <-chan streamed) time.Duration {
	t.Helper()
	start := time.Now()
	e.sendRaw(t, id, map[string]any{"type": "user.interrupt"})
	evs := until(t, events, "session.status_idle", 10*time.Second)
	took := time.Since(start)
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" {
		t.Errorf("interrupted stop reason = %q, want end_turn", typ)
	}
	return took
}

// checkUsable runs one more turn and checks the session's log has exactly
// one session.status_idle per turn so far.
func (e *interruptEnv) checkUsable(t *testing.T, id string, events <-chan streamed, turns int) {
	t.Helper()
	e.say(t, id, "#reply still here")
	evs := until(t, events, "session.status_idle", 30*time.Second)
	if got := resultText(last(evs, "agent.message")); got != "still here" {
		t.Fatalf("turn after the interrupt: agent.message %q, want %q (events %v)", got, "still here", typesOf(evs))
	}
	if n := e.typeCounts(t, id)["session.status_idle"]; n != turns+1 {
		t.Fatalf("session.status_idle events = %d, want %d (one per turn)", n, turns+1)
	}
}

// interruptBound is the generous bound on interrupt → idle with the push:
// well under the heartbeat path's, yet safe on 2 noisy cores under -race.
const interruptBound = 2 * time.Second

// TestInterruptPushedInEachTurnState interrupts a turn streaming the
// model, one running a tool in the sandbox and one waiting on an MCP
// server: each ends idle (end_turn) within the bound, through the pushed
// path (the worker counts a pushed interrupt applied per turn), and the
// session stays usable with one idle per turn.
func TestInterruptPushedInEachTurnState(t *testing.T) {
	t.Parallel()
	mcpSrv := mcptest.NewBlocking(t)
	e := newInterruptEnv(t, nil)
	e.waitMetric(t, "mango_worker_interrupt_stream_connected", 1)
	ctx := context.Background()
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "interrupts", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"},
		MCPServers: []anthropic.BetaManagedAgentsURLMCPServerParams{{Name: "slow", URL: mcpSrv.URL}},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{toolset[0], {OfMCPToolset: &anthropic.BetaManagedAgentsMCPToolsetParams{MCPServerName: "slow",
			DefaultConfig: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParams{PermissionPolicy: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParamsPermissionPolicyUnion{
				OfAlwaysAllow: &anthropic.BetaManagedAgentsAlwaysAllowPolicyParam{}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("interrupts-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)},
		EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	id := sess.ID
	events := e.watch(t, id)

	states := []struct {
		name   string
		say    string
		inTurn func()
	}{
		{"streaming the model", "#slow 500ms\n#reply one two three four five six seven eight nine ten", func() {
			until(t, events, "span.model_request_start", 30*time.Second)
		}},
		{"running a tool in the sandbox", `#tool bash {"command":"sleep 29.5"}`, func() {
			until(t, events, "agent.tool_use", 30*time.Second)
		}},
		{"waiting on an MCP server", `#tool mcp__slow__block {}`, func() {
			until(t, events, "agent.mcp_tool_use", 30*time.Second)
			select {
			case <-mcpSrv.Blocking():
			case <-time.After(30 * time.Second):
				t.Fatal("the MCP call did not reach the server within 30s")
			}
		}},
	}
	for i, s := range states {
		applied := e.metric(t, "mango_worker_interrupts_applied_total")
		e.say(t, id, s.say)
		s.inTurn()
		took := e.interruptAt(t, id, events)
		t.Logf("%s: interrupt → idle %v", s.name, took)
		if took > interruptBound {
			t.Errorf("%s: interrupt → idle took %v, want < %v", s.name, took, interruptBound)
		}
		if got := e.metric(t, "mango_worker_interrupts_applied_total"); got != applied+1 {
			t.Errorf("%s: pushed interrupts applied = %v, want %v (the push, not the heartbeat, stopped the turn)", s.name, got, applied+1)
		}
		if i == 1 {
			// The sandbox's process is gone with the turn.
			e.say(t, id, `#tool bash {"command":"ps -eo args | grep -c '^sleep 29[.]5' || true"}`)
			evs := until(t, events, "session.status_idle", 30*time.Second)
			if got := commandOutput(last(evs, "agent.tool_result")); got != "0" {
				t.Errorf("sleep processes after the interrupt: %q, want 0", got)
			}
		}
	}
	// The interrupted MCP call was cancelled, not left running.
	poll.Until(t, 10*time.Second, "one MCP call ended by the client's cancellation", func() (bool, string) {
		n := mcpSrv.Cancelled()
		return n == 1, fmt.Sprintf("%d cancelled", n)
	})
	e.checkUsable(t, id, events, len(states)+1)
}

// TestInterruptFallbackWithoutPush interrupts a sandbox tool on a worker
// without the interrupt stream (MANGO_INTERRUPT_PUSH=false): Temporal's
// cancellation, delivered with a heartbeat response, still ends the turn
// idle and leaves the session usable.
func TestInterruptFallbackWithoutPush(t *testing.T) {
	t.Parallel()
	e := newInterruptEnv(t, map[string]string{"MANGO_INTERRUPT_PUSH": "false"})
	id := e.session(t, toolset)
	events := e.watch(t, id)
	e.say(t, id, `#tool bash {"command":"sleep 29.5"}`)
	until(t, events, "agent.tool_use", 30*time.Second)
	took := e.interruptAt(t, id, events)
	t.Logf("interrupt → idle without the push: %v", took)
	if took > 5*time.Second {
		t.Errorf("interrupt → idle through the heartbeat path took %v, want < 5s", took)
	}
	if got := e.metric(t, "mango_worker_interrupts_received_total"); got != 0 {
		t.Errorf("pushed interrupts received = %v with the push disabled, want 0", got)
	}
	e.checkUsable(t, id, events, 1)
}

// TestInterruptSignalAfterPushSparesNextTurn: the push stops a turn before
// the Session Workflow receives the interrupt's signal; that late signal
// must not cancel the session's next turn, here a message sent right after
// the interrupt.
func TestInterruptSignalAfterPushSparesNextTurn(t *testing.T) {
	t.Parallel()
	e := newInterruptEnv(t, nil)
	e.waitMetric(t, "mango_worker_interrupt_stream_connected", 1)
	id := e.session(t, toolset)
	events := e.watch(t, id)
	for i := range 3 {
		e.say(t, id, `#tool bash {"command":"sleep 29.5"}`)
		until(t, events, "agent.tool_use", 30*time.Second)
		// "Stop, and do this instead": the interrupt and at once a turn
		// that outlives a few heartbeats, queued behind the interrupted one.
		e.sendRaw(t, id, map[string]any{"type": "user.interrupt"})
		e.say(t, id, `#tool bash {"command":"sleep 1.5; echo survived"}`)
		if typ, _ := stopReason(last(until(t, events, "session.status_idle", 10*time.Second), "session.status_idle")); typ != "end_turn" {
			t.Fatalf("round %d: interrupted stop reason %q, want end_turn", i, typ)
		}
		evs := until(t, events, "session.status_idle", 30*time.Second)
		if got := commandOutput(last(evs, "agent.tool_result")); got != "survived" {
			t.Fatalf("round %d: the turn after the interrupt ended with tool result %q, want %q: the interrupt's late signal cancelled it (events %v)",
				i, got, "survived", typesOf(evs))
		}
	}
}
