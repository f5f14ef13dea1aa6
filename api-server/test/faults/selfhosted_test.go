package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/lib/environments"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// TestSelfHostedFaults crashes the api-server, the execution worker and
// PostgreSQL while sessions of a self-hosted environment wait for the
// official SDK's EnvironmentWorker to run their tool calls. Every turn must
// end, every tool use must get exactly one answer, the client's (no
// timeout stands in for a result that was lost), and every command must
// run exactly once on the client's machine.
func TestSelfHostedFaults(t *testing.T) {
	if os.Getenv("MANGO_FAULTS") != "1" {
		t.Skip("the fault-injection suite runs with MANGO_FAULTS=1 (make test-faults)")
	}
	const groups = 3
	sys := startSystem(t, false)
	envID, key := selfHostedEnvironment(t, sys)
	workdir := t.TempDir()
	// An EnvironmentWorker serves one session at a time: one per session
	// that may run at once.
	stop := runEnvironmentWorkers(t, sys, envID, key, workdir, groups*groupSize)
	defer stop()
	ctx := context.Background()
	agent, err := sys.cli.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "self-hosted faults",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}}})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]*sess, 0, groups*groupSize)
	for range groups * groupSize {
		s, err := sys.cli.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: envID})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, &sess{id: s.ID, done: make(chan struct{})})
	}
	d := &driver{t: t, cli: sys.cli}
	inject := func(name string, group []*sess, do func()) {
		d.start(group)
		d.waitToolsRunning(group, 2)
		do()
		t.Logf("fault %-34s injected", name)
	}
	inject("SIGKILL api-server, restart", all[0:groupSize], func() {
		sys.api.kill(t)
		sys.startAPI()
	})
	inject("SIGKILL worker, restart after 2s", all[groupSize:2*groupSize], func() {
		sys.local.kill(t)
		time.Sleep(2 * time.Second)
		sys.startWorker(sys.local)
	})
	inject("PostgreSQL immediate stop for 3s", all[2*groupSize:], func() {
		sys.pg.crash(t)
		time.Sleep(3 * time.Second)
		sys.pg.start(t)
	})
	for _, s := range all {
		select {
		case <-s.done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("session %s not done within 3 minutes of its start", s.id)
		}
	}
	if d.failed() {
		t.FailNow()
	}
	markers := workdirMarkers(t, workdir)
	for _, s := range all {
		checkSelfHostedSession(t, s, d.list(s.id), markers)
	}
}

// checkSelfHostedSession: each accepted message once, each tool use
// answered exactly once by the client's worker with success, each marker
// written exactly once.
func checkSelfHostedSession(t *testing.T, s *sess, evs []event, markers map[string]int) {
	t.Helper()
	var uses []string
	answers := map[string][]event{}
	msgs := map[string]int{}
	for _, e := range evs {
		switch e.Type {
		case "user.message":
			msgs[e.text()]++
		case "agent.tool_use":
			uses = append(uses, e.ID)
		case "user.tool_result", "agent.tool_result":
			answers[e.ToolUseID] = append(answers[e.ToolUseID], e)
		}
	}
	for _, text := range s.sent {
		if msgs[text] != 1 {
			t.Errorf("session %s: accepted message %q appears %d times, want once", s.id, text, msgs[text])
		}
	}
	if len(uses) != turnsPerSess {
		t.Errorf("session %s: %d tool uses, want %d", s.id, len(uses), turnsPerSess)
	}
	for i, id := range uses {
		as := answers[id]
		if len(as) != 1 || as[0].Type != "user.tool_result" || as[0].IsError {
			t.Errorf("session %s: tool use %s answered by %d events (%v), want one successful user.tool_result", s.id, id, len(as), as)
		}
		if m := markers[marker(s.id, i+1)]; m != 1 {
			t.Errorf("session %s turn %d: marker written %d times on the worker, want exactly once", s.id, i+1, m)
		}
	}
}

// selfHostedEnvironment creates a self_hosted environment and a key of it.
func selfHostedEnvironment(t *testing.T, sys *system) (envID, key string) {
	t.Helper()
	env, err := sys.cli.Beta.Environments.New(context.Background(), anthropic.BetaEnvironmentNewParams{Name: "self-hosted-faults",
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfSelfHosted: &anthropic.BetaSelfHostedConfigParams{}}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, sys.apiURL+"/admin/environments/"+env.ID+"/keys", strings.NewReader(`{"name":"faults"}`))
	req.Header.Set("x-api-key", sys.apiKey)
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Key == "" {
		t.Fatalf("create environment key: %d %s", resp.StatusCode, body)
	}
	return env.ID, out.Key
}

// runEnvironmentWorkers runs n of the SDK's EnvironmentWorker, unchanged,
// in this process; their logs are shown when the test fails.
func runEnvironmentWorkers(t *testing.T, sys *system, envID, key, workdir string, n int) (stop func()) {
	t.Helper()
	logs := &lockedWriter{w: &bytes.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, n)
	idle := 2 * time.Second
	for i := range n {
		w := environments.NewEnvironmentWorker(anthropic.NewClient(option.WithBaseURL(sys.apiURL), option.WithAPIKey("")),
			environments.EnvironmentWorkerOptions{EnvironmentID: envID, EnvironmentKey: key, Workdir: workdir, MaxIdle: &idle,
				WorkerID: fmt.Sprintf("faults-%d", i), Logger: slog.New(slog.NewTextHandler(logs, nil))})
		go func() { done <- w.Run(ctx) }()
	}
	return func() {
		cancel()
		for range n {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("SDK worker: %v", err)
				}
			case <-time.After(90 * time.Second):
				t.Errorf("an SDK worker did not stop within 90s")
			}
		}
		if t.Failed() {
			t.Logf("SDK workers' log:\n%s", tail(logs.bytes(), 8000))
		}
	}
}

// workdirMarkers counts the marker lines the worker's commands wrote.
func workdirMarkers(t *testing.T, workdir string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(workdir, "markers.log"))
	if err != nil {
		t.Fatalf("read the worker's markers: %v", err)
	}
	out := map[string]int{}
	for _, line := range strings.Fields(string(b)) {
		out[line]++
	}
	return out
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.w.Bytes())
}
