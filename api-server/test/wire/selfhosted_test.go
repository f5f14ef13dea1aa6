package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/lib/environments"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/tools/agenttoolset"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
)

// selfHostedEnv is a server, a Mango execution worker, an SDK client with
// the API key, and a self_hosted environment with an environment key.
type selfHostedEnv struct {
	turnEnv
	envID  string
	envKey string
}

func newSelfHostedEnv(t *testing.T, serverEnv, workerEnv map[string]string) *selfHostedEnv {
	t.Helper()
	var opts []testserver.Option
	for k, v := range serverEnv {
		opts = append(opts, testserver.WithEnv(k, v))
	}
	srv := testserver.Start(t, opts...)
	e := &selfHostedEnv{turnEnv: turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}}
	e.worker = startWorkerWith(t, srv, "sh-w1", e.root, workerEnv)
	env, err := e.client.Beta.Environments.New(context.Background(), anthropic.BetaEnvironmentNewParams{
		Name:   fmt.Sprintf("self-hosted-%d", time.Now().UnixNano()),
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfSelfHosted: &anthropic.BetaSelfHostedConfigParams{}},
	})
	if err != nil {
		t.Fatalf("create self_hosted environment: %v", err)
	}
	e.envID = env.ID
	e.envKey = createEnvironmentKey(t, srv, env.ID)
	return e
}

// sdkWorkerClient is an SDK client for a self-hosted worker: the base URL
// only; the EnvironmentWorker sets the credential of every request itself.
func sdkWorkerClient(srv *testserver.Server, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{option.WithBaseURL(srv.BaseURL), option.WithAPIKey("")}, opts...)...)
}

// runSDKWorker runs the official SDK's EnvironmentWorker, unchanged, until
// the test ends (or stop is called); it returns stop, which waits for Run.
func (e *selfHostedEnv) runSDKWorker(t *testing.T, name string, client anthropic.Client, opts environments.EnvironmentWorkerOptions) (stop func()) {
	t.Helper()
	opts.EnvironmentID, opts.EnvironmentKey = e.envID, e.envKey
	opts.WorkerID = name
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t, name}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- environments.NewEnvironmentWorker(client, opts).Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("SDK worker %s: Run returned %v", name, err)
				}
			case <-time.After(90 * time.Second):
				t.Errorf("SDK worker %s did not stop within 90s of its cancellation", name)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// testWriter sends a worker's log lines to the test log while the test runs.
type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a line logged after the test ended
	w.t.Logf("%s: %s", w.name, bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// session creates a session of the environment for an agent with tools
// (the default toolset when none are given).
func (e *selfHostedEnv) session(t *testing.T, tools ...anthropic.BetaAgentNewParamsToolUnion) string {
	t.Helper()
	ctx := context.Background()
	if len(tools) == 0 {
		tools = toolset
	}
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "self-hosted",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: e.envID})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// TestSelfHostedWorkerThroughSDK runs the SDK's EnvironmentWorker against
// Mango: it polls, claims the session's work, runs bash, write and read in
// its own Workdir, and posts the results, which reach the model; Mango
// provisions no sandbox. After the session idles the worker lets the item
// go; a later message queues new work that the worker claims again.
func TestSelfHostedWorkerThroughSDK(t *testing.T) {
	t.Parallel()
	e := newSelfHostedEnv(t, nil, nil)
	workdir := t.TempDir()
	idle := time.Second
	e.runSDKWorker(t, "sdk-1", sdkWorkerClient(e.srv), environments.EnvironmentWorkerOptions{Workdir: workdir, MaxIdle: &idle})
	id := e.session(t)
	events := e.watch(t, id)

	e.say(t, id, "#tool bash {\"command\":\"pwd; echo made-$((6*7)) > made.txt\"}\n"+
		"#tool write {\"file_path\":\"notes.txt\",\"content\":\"written by the worker\\n\"}\n"+
		"#tool read {\"file_path\":\"notes.txt\"}")
	evs := until(t, events, "session.status_idle", 60*time.Second)
	uses, results := ofType(evs, "agent.tool_use"), ofType(evs, "user.tool_result")
	if len(uses) != 3 || len(results) != 3 {
		t.Fatalf("got %d agent.tool_use and %d user.tool_result events, want 3 and 3: %v", len(uses), len(results), typesOf(evs))
	}
	if n := len(ofType(evs, "agent.tool_result")); n != 0 {
		t.Errorf("%d agent.tool_result events: a self-hosted session's built-ins must not run on Mango", n)
	}
	for i, u := range uses {
		if u["evaluated_permission"] != "allow" {
			t.Errorf("agent.tool_use %d: evaluated_permission = %v, want allow", i, u["evaluated_permission"])
		}
		if results[i]["tool_use_id"] != u["id"] || results[i]["is_error"] == true {
			t.Errorf("user.tool_result %d = %v, want a success answering %v", i, results[i], u["id"])
		}
	}
	if text := resultText(results[0]); !strings.Contains(text, workdir) {
		t.Errorf("bash ran in %q, want the worker's Workdir %q", text, workdir)
	}
	if b, err := os.ReadFile(filepath.Join(workdir, "made.txt")); err != nil || string(b) != "made-42\n" {
		t.Errorf("made.txt in the worker's Workdir = %q (err %v), want made-42", b, err)
	}
	if msg := agentText(last(evs, "agent.message")); !strings.Contains(msg, "written by the worker") {
		t.Errorf("the model's final message = %q: the read result (from the worker's disk) did not reach the model", msg)
	}
	if entries, _ := os.ReadDir(e.root); len(entries) != 0 {
		t.Errorf("Mango's local sandbox root holds %d entries: a self-hosted session must provision no sandbox", len(entries))
	}
	e.workSettles(t, id)

	// Dormant now: a new message queues new work, which the worker claims.
	e.say(t, id, "#tool read {\"file_path\":\"made.txt\"}")
	evs = until(t, events, "session.status_idle", 60*time.Second)
	if text := resultText(last(evs, "user.tool_result")); !strings.Contains(text, "made-42") {
		t.Errorf("second turn's read = %q, want made-42 from the worker's Workdir", text)
	}
	e.healthcheckAnswered(t)
}

// healthcheckAnswered queues a healthcheck item through the admin route and
// waits until the running SDK worker has claimed and stopped it.
func (e *selfHostedEnv) healthcheckAnswered(t *testing.T) {
	t.Helper()
	r := do(t, e.srv, http.MethodPost, "/admin/environments/"+e.envID+"/healthcheck", "application/json", []byte(`{}`), nil)
	var item struct {
		ID   string                `json:"id"`
		Data struct{ Type string } `json:"data"`
	}
	if err := json.Unmarshal(r.body, &item); r.status != http.StatusOK || err != nil || item.Data.Type != "healthcheck" {
		t.Fatalf("queue a healthcheck: %d %s", r.status, r.body)
	}
	poll.Until(t, 30*time.Second, "the SDK worker to claim and stop the healthcheck item", func() (bool, string) {
		w, err := e.client.Beta.Environments.Work.Get(context.Background(), item.ID, anthropic.BetaEnvironmentWorkGetParams{EnvironmentID: e.envID})
		if err != nil {
			return false, err.Error()
		}
		return w.State == "stopped" && w.AcknowledgedAt != "", w.RawJSON()
	})
}

// workSettles waits until the session's work items are all stopped (the
// SDK worker force-stops its item after MaxIdle), and checks what the
// work API reports of them to the environment key and the API key.
func (e *selfHostedEnv) workSettles(t *testing.T, sessionID string) {
	t.Helper()
	ctx := context.Background()
	keyed := anthropic.NewClient(option.WithBaseURL(e.srv.BaseURL), option.WithAuthToken(e.envKey))
	poll.Until(t, 30*time.Second, "the session's work item to be stopped", func() (bool, string) {
		page, err := keyed.Beta.Environments.Work.List(ctx, e.envID, anthropic.BetaEnvironmentWorkListParams{})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for _, w := range page.Data {
			if w.Data.ID == sessionID {
				states = append(states, string(w.State))
			}
		}
		return len(states) > 0 && !slices.ContainsFunc(states, func(s string) bool { return s != "stopped" }), fmt.Sprint(states)
	})
	page, _ := keyed.Beta.Environments.Work.List(ctx, e.envID, anthropic.BetaEnvironmentWorkListParams{})
	w := page.Data[0]
	got, err := e.client.Beta.Environments.Work.Get(ctx, w.ID, anthropic.BetaEnvironmentWorkGetParams{EnvironmentID: e.envID})
	if err != nil {
		t.Fatalf("get work %s with the API key: %v", w.ID, err)
	}
	if got.AcknowledgedAt == "" || got.StartedAt == "" || got.StoppedAt == "" || got.Secret != "" {
		t.Errorf("work item = %s; want acknowledged, started and stopped times, and no secret outside poll", got.RawJSON())
	}
}

// cuttable is an http.RoundTripper that fails every request once cut, as
// a worker cut off from the network does.
type cuttable struct{ cut atomic.Bool }

func (c *cuttable) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("network cut by the test")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestSelfHostedLeaseExpiresToAnotherWorker cuts the lease holder off in
// the middle of a tool call and cancels it, so that it cannot stop the
// item: once the lease expires another SDK worker claims the item, runs the
// call and finishes the turn, and exactly one result is posted for it.
func TestSelfHostedLeaseExpiresToAnotherWorker(t *testing.T) {
	t.Parallel()
	e := newSelfHostedEnv(t, map[string]string{"MANGO_WORK_LEASE_TTL": "2s"}, nil)
	started := make(chan struct{}, 1)
	net := &cuttable{}
	stopA := e.runSDKWorker(t, "sdk-a", sdkWorkerClient(e.srv, option.WithHTTPClient(&http.Client{Transport: net})),
		environments.EnvironmentWorkerOptions{Workdir: t.TempDir(), ToolsFunc: func(env *agenttoolset.AgentToolContext) []anthropic.BetaTool {
			return []anthropic.BetaTool{blockingTool{name: "bash", started: started}}
		}})
	id := e.session(t)
	events := e.watch(t, id)
	e.say(t, id, "#tool bash {\"command\":\"echo finished-by-b\"}")
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("worker A never started the bash call")
	}
	// A is cut off and cancelled: it cannot stop the item it holds.
	net.cut.Store(true)
	go stopA()
	idle := time.Second
	e.runSDKWorker(t, "sdk-b", sdkWorkerClient(e.srv), environments.EnvironmentWorkerOptions{Workdir: t.TempDir(), MaxIdle: &idle})
	evs := until(t, events, "session.status_idle", 90*time.Second)
	results := ofType(evs, "user.tool_result")
	if len(results) != 1 || !strings.Contains(resultText(results[0]), "finished-by-b") {
		t.Fatalf("user.tool_result events = %v; want exactly one, worker B's", results)
	}
	stopA()
}

// blockingTool stands in for a tool whose worker is lost mid-call: it
// signals that it started and blocks until its context ends.
type blockingTool struct {
	name    string
	started chan<- struct{}
}

func (b blockingTool) Name() string        { return b.name }
func (b blockingTool) Description() string { return "blocks until cancelled" }
func (b blockingTool) InputSchema() anthropic.BetaToolInputSchemaParam {
	return anthropic.BetaToolInputSchemaParam{Properties: map[string]any{"command": map[string]any{"type": "string"}}}
}

func (b blockingTool) Execute(ctx context.Context, _ json.RawMessage) ([]anthropic.BetaToolResultBlockParamContentUnion, error) {
	select {
	case b.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSelfHostedToolTimeout: with no worker serving the environment, a
// built-in call gets an error result after MANGO_SELF_HOSTED_TOOL_TIMEOUT
// and the turn goes on; a late result for it is refused and changes
// nothing.
func TestSelfHostedToolTimeout(t *testing.T) {
	t.Parallel()
	e := newSelfHostedEnv(t, nil, map[string]string{"MANGO_SELF_HOSTED_TOOL_TIMEOUT": "2s"})
	id := e.session(t)
	events := e.watch(t, id)
	e.say(t, id, "#tool bash {\"command\":\"echo nobody runs me\"}")
	evs := until(t, events, "session.status_idle", 60*time.Second)
	r := last(evs, "agent.tool_result")
	if r == nil || r["is_error"] != true || !strings.Contains(resultText(r), "2s") {
		t.Fatalf("agent.tool_result = %v; want an error result naming the 2s timeout", r)
	}
	if msg := agentText(last(evs, "agent.message")); !strings.Contains(msg, "Tool bash returned") {
		t.Errorf("final message = %q: the model did not get the timeout result and go on", msg)
	}
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" {
		t.Errorf("stop reason = %q, want end_turn", typ)
	}
	use := last(evs, "agent.tool_use")
	_, err := e.client.Beta.Sessions.Events.Send(context.Background(), id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserToolResult: &anthropic.BetaManagedAgentsUserToolResultEventParams{
			ToolUseID: use["id"].(string), Content: []anthropic.BetaManagedAgentsUserToolResultEventParamsContentUnion{
				{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "too late"}}}}}}})
	wantAPIError(t, err, http.StatusConflict)
	_, err = e.client.Beta.Sessions.Events.Send(context.Background(), id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserToolResult: &anthropic.BetaManagedAgentsUserToolResultEventParams{
			ToolUseID: "sevt_doesnotexist000000000000", Content: []anthropic.BetaManagedAgentsUserToolResultEventParamsContentUnion{
				{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "who?"}}}}}}})
	wantAPIError(t, err, http.StatusNotFound)
}

// ofType returns the decoded bodies of the events of type typ, in order.
func ofType(evs []streamed, typ string) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev.Type == typ {
			var m map[string]any
			_ = json.Unmarshal([]byte(ev.Raw), &m)
			out = append(out, m)
		}
	}
	return out
}

// agentText is the text of an agent.message.
func agentText(m map[string]any) string { return resultText(m) }

// TestSelfHostedLatency measures, through the SDK's EnvironmentWorker, the
// poll-to-claim latency (a work item's creation to its ack) and the tool
// round trip (an agent.tool_use to its user.tool_result, server clocks).
// It only reports figures: set MANGO_SELFHOSTED_LATENCY=<turns> to run it.
func TestSelfHostedLatency(t *testing.T) {
	n := 0
	if _, err := fmt.Sscan(os.Getenv("MANGO_SELFHOSTED_LATENCY"), &n); err != nil || n <= 0 {
		t.Skip("set MANGO_SELFHOSTED_LATENCY=<turns> to measure")
	}
	e := newSelfHostedEnv(t, nil, nil)
	idle := 100 * time.Millisecond
	e.runSDKWorker(t, "sdk-bench", sdkWorkerClient(e.srv), environments.EnvironmentWorkerOptions{Workdir: t.TempDir(), MaxIdle: &idle,
		Logger: slog.New(slog.DiscardHandler)})
	id := e.session(t)
	events := e.watch(t, id)
	var claims, trips []time.Duration
	ctx := context.Background()
	keyed := anthropic.NewClient(option.WithBaseURL(e.srv.BaseURL), option.WithAuthToken(e.envKey))
	for i := range n {
		e.say(t, id, fmt.Sprintf("#tool bash {\"command\":\"echo %d\"}", i))
		evs := until(t, events, "session.status_idle", 60*time.Second)
		use, res := last(evs, "agent.tool_use"), last(evs, "user.tool_result")
		trips = append(trips, createdAt(t, res).Sub(createdAt(t, use)))
		e.workSettles(t, id) // the next message queues a new item
		page, err := keyed.Beta.Environments.Work.List(ctx, e.envID, anthropic.BetaEnvironmentWorkListParams{Limit: anthropic.Int(1)})
		if err != nil || len(page.Data) == 0 {
			t.Fatalf("list work: %v", err)
		}
		w := page.Data[0]
		created, _ := time.Parse(time.RFC3339Nano, w.CreatedAt)
		acked, _ := time.Parse(time.RFC3339Nano, w.AcknowledgedAt)
		claims = append(claims, acked.Sub(created))
	}
	t.Logf("poll-to-claim over %d items: p50 %v p99 %v max %v", n, pct(claims, 50), pct(claims, 99), pct(claims, 100))
	t.Logf("tool round trip over %d calls: p50 %v p99 %v max %v", n, pct(trips, 50), pct(trips, 99), pct(trips, 100))
}

func createdAt(t *testing.T, m map[string]any) time.Time {
	t.Helper()
	s, _ := m["processed_at"].(string)
	if c, ok := m["created_at"].(string); ok {
		s = c
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("event %v has no time: %v", m, err)
	}
	return at
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p+99)/100-1)
	return s[max(i, 0)]
}

// TestSelfHostedAlwaysAskThroughSDK: an always_ask built-in parks the
// session for a confirmation as in a cloud environment; the SDK worker
// holds the call meanwhile, runs it after allow, and never runs a denied
// one (Mango answers the model with the denial).
func TestSelfHostedAlwaysAskThroughSDK(t *testing.T) {
	t.Parallel()
	e := newSelfHostedEnv(t, nil, nil)
	workdir := t.TempDir()
	e.runSDKWorker(t, "sdk-ask", sdkWorkerClient(e.srv), environments.EnvironmentWorkerOptions{Workdir: workdir})
	ask := anthropic.BetaAgentNewParamsToolUnion{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{
		DefaultConfig: anthropic.BetaManagedAgentsAgentToolsetDefaultConfigParams{PermissionPolicy: anthropic.BetaManagedAgentsAgentToolsetDefaultConfigParamsPermissionPolicyUnion{
			OfAlwaysAsk: &anthropic.BetaManagedAgentsAlwaysAskPolicyParam{}}}}}
	id := e.session(t, ask)
	events := e.watch(t, id)

	e.say(t, id, `#tool bash {"command":"echo ran > denied.txt"}`)
	evs := until(t, events, "session.status_idle", 60*time.Second)
	use := last(evs, "agent.tool_use")
	if typ, ids := stopReason(last(evs, "session.status_idle")); typ != "requires_action" || len(ids) != 1 || ids[0] != use["id"] {
		t.Fatalf("idle = %q %v, want requires_action on the bash call %v", typ, ids, use["id"])
	}
	e.sendRaw(t, id, map[string]any{"type": "user.tool_confirmation", "tool_use_id": use["id"], "result": "deny", "deny_message": "not today"})
	evs = until(t, events, "session.status_idle", 60*time.Second)
	if r := last(evs, "agent.tool_result"); r["is_error"] != true || !strings.Contains(resultText(r), "not today") {
		t.Errorf("denied call's result = %v, want an error naming the denial", r)
	}
	if _, err := os.Stat(filepath.Join(workdir, "denied.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the denied command ran on the worker (denied.txt: %v)", err)
	}

	e.say(t, id, `#tool bash {"command":"echo allowed-run"}`)
	evs = until(t, events, "session.status_idle", 60*time.Second)
	use = last(evs, "agent.tool_use")
	e.sendRaw(t, id, map[string]any{"type": "user.tool_confirmation", "tool_use_id": use["id"], "result": "allow"})
	evs = until(t, events, "session.status_idle", 60*time.Second)
	if r := last(evs, "user.tool_result"); r["tool_use_id"] != use["id"] || !strings.Contains(resultText(r), "allowed-run") {
		t.Errorf("allowed call's result = %v, want the worker's output allowed-run", r)
	}
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" {
		t.Errorf("stop reason = %q, want end_turn", typ)
	}
}

// TestSelfHostedResultReachesModel runs the real model client against a
// recording Messages API: the tool_result block of the request after a
// self-hosted call carries what the SDK worker's bash printed, for the
// model's tool_use id.
func TestSelfHostedResultReachesModel(t *testing.T) {
	t.Parallel()
	api := newMessagesAPI(t)
	e := newSelfHostedEnv(t, nil, map[string]string{"MANGO_MODEL": "anthropic", "MANGO_MODEL_BASE_URL": api.srv.URL,
		"MANGO_MODEL_API_KEY": "sk-selfhosted-test", "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "1"})
	e.runSDKWorker(t, "sdk-model", sdkWorkerClient(e.srv), environments.EnvironmentWorkerOptions{Workdir: t.TempDir()})
	id := e.session(t)
	events := e.watch(t, id)
	e.say(t, id, `call bash {"command":"echo from-the-client-$((6*7))"}`)
	until(t, events, "session.status_idle", 60*time.Second)
	msg := api.lastUserMessage(t)
	var found bool
	for _, raw := range msg.Content {
		var b struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(raw, &b)
		if b.Type == "tool_result" && strings.HasPrefix(b.ToolUseID, "toolu_content_") && strings.Contains(string(b.Content), "from-the-client-42") {
			found = true
		}
	}
	if !found {
		t.Errorf("the request after the call carries no tool_result with the worker's output; last user message: %s", msg.Content)
	}
}

// TestSelfHostedInterruptWhileWaiting interrupts a turn whose call waits
// for a worker that never comes: the session idles at once, and the next
// message reaches the model with the interrupted call answered first (an
// error tool_result for its tool_use id), as the Messages API requires.
func TestSelfHostedInterruptWhileWaiting(t *testing.T) {
	t.Parallel()
	api := newMessagesAPI(t)
	e := newSelfHostedEnv(t, nil, map[string]string{"MANGO_MODEL": "anthropic", "MANGO_MODEL_BASE_URL": api.srv.URL,
		"MANGO_MODEL_API_KEY": "sk-selfhosted-test", "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "1"})
	id := e.session(t)
	events := e.watch(t, id)
	e.say(t, id, `call bash {"command":"echo never"}`)
	until(t, events, "agent.tool_use", 60*time.Second)
	e.sendRaw(t, id, map[string]any{"type": "user.interrupt"})
	until(t, events, "session.status_idle", 30*time.Second)

	e.say(t, id, "still there?")
	until(t, events, "session.status_idle", 60*time.Second)
	msg := api.lastUserMessage(t)
	if len(msg.Content) < 2 {
		t.Fatalf("last request's user message = %s, want the interrupted call's result, then the text", msg.Content)
	}
	var first struct {
		Type      string `json:"type"`
		ToolUseID string `json:"tool_use_id"`
		IsError   bool   `json:"is_error"`
	}
	_ = json.Unmarshal(msg.Content[0], &first)
	if first.Type != "tool_result" || first.ToolUseID != "toolu_content_1" || !first.IsError {
		t.Errorf("first block = %s, want an error tool_result for toolu_content_1", msg.Content[0])
	}
	if last := string(msg.Content[len(msg.Content)-1]); !strings.Contains(last, "still there?") {
		t.Errorf("last block = %s, want the user's text", last)
	}
}
