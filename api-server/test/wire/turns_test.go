package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/testenv"
)

// streamed is one event from the SDK stream, with its raw JSON.
type streamed struct {
	Type string
	ID   string
	Raw  string
}

// turnEnv is a server, a worker process and an SDK client.
type turnEnv struct {
	srv    *testserver.Server
	client anthropic.Client
	root   string
	worker *worker
}

func newTurnEnv(t *testing.T) *turnEnv {
	t.Helper()
	srv := testserver.Start(t)
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	e.worker = startWorker(t, srv, "wire-w1", e.root)
	return e
}

// session creates a session for an agent with the given tools.
func (e *turnEnv) session(t *testing.T, tools []anthropic.BetaAgentNewParamsToolUnion) string {
	t.Helper()
	ctx := context.Background()
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "turns",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("turns-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

var toolset = []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}}

// watch opens the SDK stream (before anything is sent) and delivers its
// events on a channel.
func (e *turnEnv) watch(t *testing.T, sessionID string) <-chan streamed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream := e.client.Beta.Sessions.Events.StreamEvents(ctx, sessionID, anthropic.BetaSessionEventStreamParams{})
	out := make(chan streamed, 1024)
	go func() {
		defer close(out)
		defer func() { _ = stream.Close() }()
		for stream.Next() {
			ev := stream.Current()
			out <- streamed{Type: ev.Type, ID: ev.ID, Raw: ev.RawJSON()}
		}
	}()
	return out
}

// until collects streamed events until one of type stop arrives.
func until(t *testing.T, events <-chan streamed, stop string, timeout time.Duration) []streamed {
	t.Helper()
	var got []streamed
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("stream ended; got %v", typesOf(got))
			}
			got = append(got, ev)
			sdkDecodes(t, ev)
			if ev.Type == stop {
				return got
			}
		case <-deadline:
			t.Fatalf("no %s within %v; got %v", stop, timeout, typesOf(got))
		}
	}
}

// sdkDecodes fails the test unless ev decodes through the official SDK's
// typed unions into a concrete variant (AsAny never nil), including the
// error and retry status of a session.error.
func sdkDecodes(t *testing.T, ev streamed) {
	t.Helper()
	var u anthropic.BetaManagedAgentsStreamSessionEventsUnion
	if err := json.Unmarshal([]byte(ev.Raw), &u); err != nil || u.AsAny() == nil {
		t.Errorf("event %s does not decode through the SDK's union (err %v): %s", ev.Type, err, ev.Raw)
		return
	}
	if ev.Type == "session.error" {
		sdkSessionError(t, ev.Raw)
	}
}

// sdkSessionError decodes a session.error through the SDK and returns its
// error type and retry status type, failing the test if either is not one
// the SDK knows.
func sdkSessionError(t *testing.T, raw string) (errType, retryStatus string) {
	t.Helper()
	var e anthropic.BetaManagedAgentsSessionErrorEvent
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		t.Errorf("session.error does not decode: %v: %s", err, raw)
		return "", ""
	}
	if e.Error.AsAny() == nil {
		t.Errorf("session.error type %q is not one the SDK knows: %s", e.Error.Type, raw)
	}
	switch st := e.Error.RetryStatus.Type; st {
	case "retrying", "exhausted", "terminal":
	default:
		t.Errorf("session.error retry_status type %q, want retrying, exhausted or terminal: %s", st, raw)
	}
	return e.Error.Type, e.Error.RetryStatus.Type
}

func typesOf(evs []streamed) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// inOrder asserts that want appears in evs as a subsequence.
func inOrder(t *testing.T, evs []streamed, want ...string) {
	t.Helper()
	i := 0
	for _, e := range evs {
		if i < len(want) && e.Type == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Fatalf("events %v lack %v in order (matched %d)", typesOf(evs), want, i)
	}
}

func last(evs []streamed, typ string) map[string]any {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == typ {
			var m map[string]any
			_ = json.Unmarshal([]byte(evs[i].Raw), &m)
			return m
		}
	}
	return nil
}

func count(evs []streamed, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func (e *turnEnv) say(t *testing.T, sessionID, text string) {
	t.Helper()
	_, err := e.client.Beta.Sessions.Events.Send(context.Background(), sessionID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{userMessage(text)}})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
}

func (e *turnEnv) sendRaw(t *testing.T, sessionID string, ev map[string]any) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"events": []any{ev}})
	r := do(t, e.srv, "POST", "/v1/sessions/"+sessionID+"/events", "application/json", b, nil)
	if r.status != 200 {
		t.Fatalf("send %v: %d %s", ev, r.status, r.body)
	}
}

func resultText(m map[string]any) string {
	content, _ := m["content"].([]any)
	if len(content) == 0 {
		return ""
	}
	first, _ := content[0].(map[string]any)
	s, _ := first["text"].(string)
	return s
}

// commandOutput is a bash result's text, trimmed, without the note that the
// command ran in a new shell (the one before it was killed, by an
// interrupt say).
func commandOutput(m map[string]any) string {
	text, _, _ := strings.Cut(resultText(m), "\n[the previous shell had ended")
	return strings.TrimSpace(text)
}

func stopReason(m map[string]any) (string, []any) {
	sr, _ := m["stop_reason"].(map[string]any)
	typ, _ := sr["type"].(string)
	ids, _ := sr["event_ids"].([]any)
	return typ, ids
}

func TestTurnThroughSDK(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	id := e.session(t, toolset)
	events := e.watch(t, id)
	e.say(t, id, `#tool bash {"command":"echo from-bash-$((6*7))"}`)
	evs := until(t, events, "session.status_idle", 30*time.Second)
	inOrder(t, evs, "user.message", "session.status_running", "span.model_request_start", "agent.tool_use", "agent.tool_result",
		"agent.message", "span.model_request_end", "session.usage", "session.status_idle")
	if r := last(evs, "agent.tool_result"); !strings.Contains(resultText(r), "from-bash-42") || r["is_error"] == true {
		t.Errorf("tool result = %v, want the command's real output", r)
	}
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" {
		t.Errorf("stop reason = %q, want end_turn", typ)
	}

	// Turn 2 reads what turn 1... the same sandbox across turns.
	e.say(t, id, `#tool write {"file_path":"notes/a.txt","content":"kept across turns"}`)
	until(t, events, "session.status_idle", 30*time.Second)
	e.say(t, id, `#tool read {"file_path":"notes/a.txt"}`)
	evs = until(t, events, "session.status_idle", 30*time.Second)
	if r := last(evs, "agent.tool_result"); !strings.Contains(resultText(r), "kept across turns") {
		t.Errorf("read in turn 3 = %v, want a result containing %q", r, "kept across turns")
	}
	shellPersistsAcrossTurns(t, e, events, id)
}

// shellPersistsAcrossTurns checks what a model relies on across turns: a cd
// and an exported variable of one turn's bash call are there in the next
// turn's, and the session directories answer to their absolute paths.
func shellPersistsAcrossTurns(t *testing.T, e *turnEnv, events <-chan streamed, id string) {
	t.Helper()
	e.say(t, id, `#tool bash {"command":"mkdir -p proj && cd proj && export MANGO_T=persisted"}`)
	until(t, events, "session.status_idle", 60*time.Second)
	e.say(t, id, `#tool bash {"command":"echo \"$MANGO_T in $(pwd)\"; echo data > /mnt/session/outputs/made.txt && cat /mnt/session/outputs/made.txt"}`)
	evs := until(t, events, "session.status_idle", 60*time.Second)
	r := last(evs, "agent.tool_result")
	if text := resultText(r); !strings.Contains(text, "persisted in /") || !strings.Contains(text, "/proj\ndata") || r["is_error"] == true {
		t.Errorf("next turn's bash = %q; want the variable and directory of the turn before, and /mnt/session written", text)
	}
}

func TestClientActionsThroughSDK(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	custom := func(name string) anthropic.BetaAgentNewParamsToolUnion {
		return anthropic.BetaAgentNewParamsToolUnion{OfCustom: &anthropic.BetaManagedAgentsCustomToolParams{Name: name, Description: name,
			InputSchema: anthropic.BetaManagedAgentsCustomToolInputSchemaParam{Properties: map[string]any{}}}}
	}
	ask := anthropic.BetaAgentNewParamsToolUnion{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{
		DefaultConfig: anthropic.BetaManagedAgentsAgentToolsetDefaultConfigParams{PermissionPolicy: anthropic.BetaManagedAgentsAgentToolsetDefaultConfigParamsPermissionPolicyUnion{
			OfAlwaysAsk: &anthropic.BetaManagedAgentsAlwaysAskPolicyParam{}}}}}
	id := e.session(t, []anthropic.BetaAgentNewParamsToolUnion{custom("get_weather"), custom("get_time"), ask})
	events := e.watch(t, id)

	// Two custom tools in one round: both must be answered.
	e.say(t, id, "#parallel\n#tool get_weather {\"city\":\"Paris\"}\n#tool get_time {}")
	evs := until(t, events, "session.status_idle", 30*time.Second)
	typ, ids := stopReason(last(evs, "session.status_idle"))
	if typ != "requires_action" || len(ids) != 2 || count(evs, "agent.custom_tool_use") != 2 {
		t.Fatalf("parked = %q %v (%v), want requires_action on 2 ids with 2 agent.custom_tool_use", typ, ids, typesOf(evs))
	}
	e.sendRaw(t, id, map[string]any{"type": "user.custom_tool_result", "custom_tool_use_id": ids[0],
		"content": []any{map[string]any{"type": "text", "text": "sunny"}}})
	evs = until(t, events, "session.status_idle", 30*time.Second)
	if typ, rest := stopReason(last(evs, "session.status_idle")); typ != "requires_action" || len(rest) != 1 || rest[0] != ids[1] {
		t.Fatalf("after a partial answer: %q %v, want requires_action listing %v", typ, rest, ids[1])
	}
	e.sendRaw(t, id, map[string]any{"type": "user.custom_tool_result", "custom_tool_use_id": ids[1],
		"content": []any{map[string]any{"type": "text", "text": "noon"}}})
	evs = until(t, events, "session.status_idle", 30*time.Second)
	msg := resultText(last(evs, "agent.message"))
	if !strings.Contains(msg, "sunny") || !strings.Contains(msg, "noon") {
		t.Errorf("final message %q, want it to contain the answers \"sunny\" and \"noon\"", msg)
	}

	// always_ask: deny, then allow.
	e.say(t, id, `#tool bash {"command":"echo allowed-run"}`)
	evs = until(t, events, "session.status_idle", 30*time.Second)
	use := last(evs, "agent.tool_use")
	if use["evaluated_permission"] != "ask" {
		t.Fatalf("tool_use = %v, want evaluated_permission ask", use)
	}
	e.sendRaw(t, id, map[string]any{"type": "user.tool_confirmation", "tool_use_id": use["id"], "result": "deny", "deny_message": "not today"})
	evs = until(t, events, "session.status_idle", 30*time.Second)
	if r := last(evs, "agent.tool_result"); r["is_error"] != true || !strings.Contains(resultText(r), "not today") {
		t.Errorf("denied result = %v, want an error containing %q", r, "not today")
	}
	e.say(t, id, `#tool bash {"command":"echo allowed-run"}`)
	evs = until(t, events, "session.status_idle", 30*time.Second)
	use = last(evs, "agent.tool_use")
	e.sendRaw(t, id, map[string]any{"type": "user.tool_confirmation", "tool_use_id": use["id"], "result": "allow"})
	evs = until(t, events, "session.status_idle", 30*time.Second)
	if r := last(evs, "agent.tool_result"); r["is_error"] == true || !strings.Contains(resultText(r), "allowed-run") {
		t.Errorf("allowed result = %v, want a success containing %q", r, "allowed-run")
	}
}

func TestInterruptAndLimitsThroughSDK(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	id := e.session(t, toolset)
	events := e.watch(t, id)

	// Interrupt during `sleep` in bash: idle within 2 s, the process gone.
	e.say(t, id, `#tool bash {"command":"sleep 29.5"}`)
	until(t, events, "agent.tool_use", 30*time.Second)
	start := time.Now()
	e.sendRaw(t, id, map[string]any{"type": "user.interrupt"})
	evs := until(t, events, "session.status_idle", 10*time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("interrupt took %v, want at most 2s", d)
	}
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" {
		t.Errorf("interrupted stop reason = %q, want end_turn", typ)
	}
	e.say(t, id, `#tool bash {"command":"ps -eo args | grep -c '^sleep 29[.]5' || true"}`)
	evs = until(t, events, "session.status_idle", 30*time.Second)
	if got := commandOutput(last(evs, "agent.tool_result")); got != "0" {
		t.Errorf("sleep processes after the interrupt: %q, want 0", got)
	}

	// Interrupt during a slow stream: once its first word is previewed.
	previews := watchPreviews(t, e.client, id, anthropic.BetaManagedAgentsDeltaTypeAgentMessage)
	e.say(t, id, "#slow 500ms\n#reply one two three four five six seven eight nine ten")
	until(t, events, "span.model_request_start", 30*time.Second)
	collect(t, previews, "event_delta", 30*time.Second)
	start = time.Now()
	e.sendRaw(t, id, map[string]any{"type": "user.interrupt"})
	until(t, events, "session.status_idle", 10*time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("interrupting a slow stream took %v, want at most 2s", d)
	}

	// The never-ending tool loop stops after exactly 20 rounds.
	e.say(t, id, "#loop")
	evs = until(t, events, "session.status_idle", 60*time.Second)
	if n := count(evs, "span.model_request_start"); n != 20 {
		t.Errorf("model requests = %d, want 20", n)
	}
	if errEv := last(evs, "session.error"); errEv == nil || errEv["error"].(map[string]any)["type"] != "tool_use_limit_reached_error" {
		t.Errorf("round cap error = %v, want a session.error of type tool_use_limit_reached_error", errEv)
	}

	// Two overloaded errors then success; then four → retries exhausted.
	e.say(t, id, "#error overloaded 2\n#reply made it")
	evs = until(t, events, "session.status_idle", 60*time.Second)
	if count(evs, "session.error") != 2 || count(evs, "session.status_rescheduled") != 2 {
		t.Errorf("retry events = %v, want 2 session.error and 2 session.status_rescheduled", typesOf(evs))
	}
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" || resultText(last(evs, "agent.message")) != "made it" {
		t.Errorf("after retries: %v, want end_turn with the agent.message \"made it\"", typesOf(evs))
	}
	e.say(t, id, "#error overloaded 4\n#reply never")
	evs = until(t, events, "session.status_idle", 60*time.Second)
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "retries_exhausted" {
		t.Errorf("four errors: stop reason %q (%v), want retries_exhausted", typ, typesOf(evs))
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == "session.error" {
			if typ, st := sdkSessionError(t, evs[i].Raw); typ != "model_overloaded_error" || st != "exhausted" {
				t.Errorf("last session.error = %s with retry status %s, want model_overloaded_error, exhausted", typ, st)
			}
			break
		}
	}
}

// TestWorkerCrashMidTurn kills the worker (SIGKILL) while the second of two
// tools runs: a new worker finishes the turn, no event is duplicated, the
// completed tool is not run again and the interrupted one is reported
// ambiguous instead of re-run.
func TestWorkerCrashMidTurn(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	id := e.session(t, toolset)
	events := e.watch(t, id)
	e.say(t, id, "#tool bash {\"command\":\"echo one >> runs.log\"}\n#tool bash {\"command\":\"echo two >> runs.log; sleep 20\"}")
	until(t, events, "agent.tool_use", 30*time.Second)
	until(t, events, "agent.tool_use", 30*time.Second) // the second tool is starting
	waitFile(t, func() bool {                          // ... and has written its line
		b, _ := os.ReadFile(filepath.Join(e.root, sandboxDir(t, e.root), "runs.log"))
		return string(b) == "one\ntwo\n"
	})
	e.worker.stop(syscall.SIGKILL)
	startWorker(t, e.srv, "wire-w1", e.root) // the same host comes back
	evs := until(t, events, "session.status_idle", 60*time.Second)
	if r := last(evs, "agent.tool_result"); r["is_error"] != true || !strings.Contains(resultText(r), "may or may not have completed") {
		t.Errorf("in-flight tool result = %v, want ambiguous", r)
	}
	if seen := e.typeCounts(t, id); seen["agent.tool_use"] != 2 || seen["agent.tool_result"] != 2 || seen["session.status_idle"] != 1 || seen["agent.message"] != 1 {
		t.Errorf("event counts after the crash: %v, want 2 agent.tool_use, 2 agent.tool_result, 1 session.status_idle, 1 agent.message", seen)
	}
	data, err := os.ReadFile(filepath.Join(e.root, sandboxDir(t, e.root), "runs.log"))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "one\ntwo\n" {
		t.Errorf("runs.log = %q, want each tool run exactly once", data)
	}
}

// typeCounts lists the session's events and counts them by type.
func (e *turnEnv) typeCounts(t *testing.T, id string) map[string]int {
	t.Helper()
	page, err := e.client.Beta.Sessions.Events.List(context.Background(), id, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(100)})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, ev := range page.Data {
		seen[ev.Type]++
	}
	return seen
}

// waitFile polls cond (a file's content) for up to 30 s.
func waitFile(t *testing.T, cond func() bool) {
	t.Helper()
	poll.Until(t, 30*time.Second, "the condition on the sandbox's files", func() (bool, string) { return cond(), "not met" })
}

func sandboxDir(t *testing.T, root string) string {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if en.IsDir() {
			return en.Name()
		}
	}
	t.Fatalf("no workspace under %s", root)
	return ""
}

// TestTurnOnDockerThroughSDK runs the bash turn with a docker worker: the
// command runs in the session's container.
func TestTurnOnDockerThroughSDK(t *testing.T) {
	t.Parallel()
	if err := exec.Command("docker", "image", "inspect", "mango-sandbox:latest").Run(); err != nil {
		testenv.Unavailable(t, "no Docker daemon or image mango-sandbox:latest (scripts/build-sandbox-image.sh): %v", err)
	}
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SANDBOX_PROVIDERS", "local,docker"))
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	// Labelled apart, so that its reconciler never touches the containers
	// of tests running beside it on the same daemon.
	startWorkerWith(t, srv, "wire-docker-1", e.root, map[string]string{"MANGO_SANDBOX": "docker", "MANGO_DOCKER_LABELS": "mango.test=" + srv.TaskQueuePrefix})
	ctx := context.Background()
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "docker-turns",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: toolset})
	if err != nil {
		t.Fatal(err)
	}
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("docker-%d", time.Now().UnixNano()),
		Metadata: map[string]string{"mango.sandbox": "docker"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Deleting tears the container down through the worker.
		_, _ = e.client.Beta.Sessions.Delete(context.Background(), s.ID, anthropic.BetaSessionDeleteParams{})
		// The row goes once the container is torn down and unbound.
		waitSessionGone(t, srv, s.ID, "container teardown")
	})
	events := e.watch(t, s.ID)
	e.say(t, s.ID, `#tool bash {"command":"echo in-$(pwd); cat /proc/1/cgroup >/dev/null && echo container"}`)
	evs := until(t, events, "session.status_idle", 60*time.Second)
	inOrder(t, evs, "session.status_running", "span.model_request_start", "agent.tool_use", "agent.tool_result",
		"agent.message", "span.model_request_end", "session.usage", "session.status_idle")
	if r := resultText(last(evs, "agent.tool_result")); !strings.Contains(r, "in-/workspace") {
		t.Errorf("tool result = %q, want it to run in /workspace of the container", r)
	}
	shellPersistsAcrossTurns(t, e, events, s.ID)
}

// TestWorkerCrashMidStream kills the worker while the model's reply is
// streaming: the new worker re-asks the model and commits exactly one
// agent.message for the turn.
func TestWorkerCrashMidStream(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	id := e.session(t, toolset)
	events := e.watch(t, id)
	previews := watchPreviews(t, e.client, id, anthropic.BetaManagedAgentsDeltaTypeAgentMessage)
	e.say(t, id, "#slow 200ms\n#reply alpha beta gamma delta epsilon zeta eta theta")
	until(t, events, "span.model_request_start", 30*time.Second)
	collect(t, previews, "event_delta", 30*time.Second) // the reply is streaming
	e.worker.stop(syscall.SIGKILL)
	startWorker(t, e.srv, "wire-w1", e.root)
	evs := until(t, events, "session.status_idle", 60*time.Second)
	if n := count(evs, "agent.message"); n != 1 {
		t.Errorf("agent.message events = %d, want 1 (%v)", n, typesOf(evs))
	}
	if got := resultText(last(evs, "agent.message")); got != "alpha beta gamma delta epsilon zeta eta theta" {
		t.Errorf("message = %q, want %q", got, "alpha beta gamma delta epsilon zeta eta theta")
	}
	if n := count(evs, "session.status_idle"); n != 1 {
		t.Errorf("idle events = %d, want 1", n)
	}
}

// TestWorkerDrainsOnSIGTERM: a worker told to stop (SIGTERM, as Kubernetes
// does on a rollout) stops polling and lets the running turn finish within
// its grace, then exits cleanly; a turn longer than the grace is cancelled
// and retried at once by the worker that replaces it. Nothing is lost or
// duplicated either way. Defaults throughout, except the grace.
func TestWorkerDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	t.Run("the turn finishes within the grace", func(t *testing.T) {
		t.Parallel()
		e := newTurnEnv(t)
		id := e.session(t, toolset)
		events := e.watch(t, id)
		e.say(t, id, `#tool bash {"command":"sleep 2; echo finished"}`)
		until(t, events, "agent.tool_use", 30*time.Second)
		_ = e.worker.cmd.Process.Signal(syscall.SIGTERM)
		evs := until(t, events, "session.status_idle", 30*time.Second)
		if r := last(evs, "agent.tool_result"); strings.TrimSpace(resultText(r)) != "finished" {
			t.Errorf("tool result = %v, want the command's own output: the draining worker finishes it", r)
		}
		select {
		case <-e.worker.done:
		case <-time.After(20 * time.Second):
			t.Fatal("the worker did not exit within 20s of SIGTERM and the turn's end")
		}
		if code := e.worker.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("worker exit status after SIGTERM = %d, want 0 (a clean drain)", code)
		}
	})
	t.Run("a turn longer than the grace resumes on the next worker", func(t *testing.T) {
		t.Parallel()
		srv := testserver.Start(t)
		e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
		e.worker = startWorkerWith(t, srv, "drain-1", e.root, map[string]string{"MANGO_SHUTDOWN_GRACE": "1s"})
		id := e.session(t, toolset)
		events := e.watch(t, id)
		e.say(t, id, `#tool bash {"command":"sleep 25"}`)
		until(t, events, "agent.tool_use", 30*time.Second)
		start := time.Now()
		_ = e.worker.cmd.Process.Signal(syscall.SIGTERM)
		startWorker(t, srv, "drain-2", e.root) // the replacement pod: same host, same root
		evs := until(t, events, "session.status_idle", 30*time.Second)
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("turn ended %v after SIGTERM, want within 30s", d)
		}
		if seen := e.typeCounts(t, id); seen["user.message"] != 1 || seen["agent.tool_use"] != 1 || seen["agent.tool_result"] != 1 || seen["session.status_idle"] != 1 {
			t.Errorf("event counts after the drain = %v, want one message, one tool use with one result, one idle (%v)", seen, typesOf(evs))
		}
	})
}

// TestLocalityGoneThroughSDK: every worker of the locality holding a
// session's sandbox is gone (SIGKILL, nothing restarted on that host and
// root). After MANGO_HOST_GONE_AFTER the turn fails explicitly with a
// session.error the SDK decodes (unknown_error, retry status exhausted,
// naming the sandbox and its locality), the session goes idle
// retries_exhausted and stays usable: a worker of that locality coming
// back serves the next turn in the same sandbox.
func TestLocalityGoneThroughSDK(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_HOST_GONE_AFTER", "2s"))
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	e.worker = startWorker(t, srv, "gone-1", e.root)
	id := e.session(t, toolset)
	events := e.watch(t, id)
	e.say(t, id, `#tool bash {"command":"echo kept > kept.txt"}`)
	until(t, events, "session.status_idle", 30*time.Second)
	e.worker.stop(syscall.SIGKILL)
	startWorker(t, srv, "elsewhere", t.TempDir()) // another locality: serves the provider's queue only

	e.say(t, id, `#tool bash {"command":"cat kept.txt"}`)
	evs := until(t, events, "session.status_idle", 60*time.Second)
	var errRaw string
	for _, ev := range evs {
		if ev.Type == "session.error" {
			errRaw = ev.Raw
		}
	}
	if errRaw == "" {
		t.Fatalf("no session.error before idle: %v", typesOf(evs))
	}
	typ, st := sdkSessionError(t, errRaw)
	var decoded anthropic.BetaManagedAgentsSessionErrorEvent
	_ = json.Unmarshal([]byte(errRaw), &decoded)
	if _, ok := decoded.Error.AsAny().(anthropic.BetaManagedAgentsUnknownErrorObject); !ok || typ != "unknown_error" || st != "exhausted" ||
		!strings.Contains(decoded.Error.Message, "local sandbox") || !strings.Contains(decoded.Error.Message, srv.TaskQueuePrefix+".local.") {
		t.Errorf("session.error = %s, want an unknown_error variant, exhausted, naming the sandbox and its locality queue", errRaw)
	}
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "retries_exhausted" {
		t.Errorf("stop reason after the failed turn = %q, want retries_exhausted", typ)
	}
	if n := count(evs, "agent.tool_use"); n != 0 {
		t.Errorf("the failed turn ran %d tools; it must not run anywhere", n)
	}

	// The locality is back. It counts as alive once it polls (and
	// heartbeats): with the 2 s window of this test a message sent while
	// it starts could still find the locality gone.
	startWorkerWith(t, srv, "gone-1-back", e.root, map[string]string{"MANGO_LOG_LEVEL": "info"}).polling(t)
	e.say(t, id, `#tool bash {"command":"cat kept.txt"}`)
	evs = until(t, events, "session.status_idle", 60*time.Second)
	if got := commandOutput(last(evs, "agent.tool_result")); got != "kept" {
		t.Errorf("tool result once the locality is back = %q, want the first turn's file (%v)", got, typesOf(evs))
	}
}
