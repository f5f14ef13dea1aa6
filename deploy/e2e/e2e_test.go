// Package e2e runs Mango's container images end to end: the images `make
// images` builds (deploy/images), started with testcontainers-go against the
// test stack's PostgreSQL and Temporal, driven through the official
// Anthropic SDK.
//
// The containers share the host's network namespace, so every server still
// binds 127.0.0.1 and the test stack is reachable as it is for the other
// tests. Ryuk cannot be pulled here (DESIGN.md §9): run with
// TESTCONTAINERS_RYUK_DISABLED=true; the test terminates what it starts.
package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/mangohq/mango/internal/poll"
)

// stack is what the test needs from the test stack.
type stack struct {
	databaseURL  string // a fresh database of its own
	temporal     string
	repoRoot     string
	imageTag     string
	dockerSocket string
}

func setup(t *testing.T) stack {
	t.Helper()
	dbURL, temporal := os.Getenv("MANGO_TEST_DATABASE_URL"), os.Getenv("MANGO_TEST_TEMPORAL_HOSTPORT")
	if dbURL == "" || temporal == "" {
		if os.Getenv("MANGO_REQUIRE_SERVICES") == "1" {
			t.Fatal("MANGO_TEST_DATABASE_URL and MANGO_TEST_TEMPORAL_HOSTPORT are not set; run the tests with `make test`")
		}
		t.Skip("MANGO_TEST_DATABASE_URL or MANGO_TEST_TEMPORAL_HOSTPORT not set (make test sets them)")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		if os.Getenv("MANGO_REQUIRE_SERVICES") == "1" {
			t.Fatalf("Docker daemon unreachable: %v", err)
		}
		t.Skip("no Docker daemon")
	}
	_, file, _, _ := runtime.Caller(0)
	s := stack{temporal: temporal, repoRoot: filepath.Join(filepath.Dir(file), "..", ".."),
		imageTag: "e2e", dockerSocket: "/var/run/docker.sock"}
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		s.dockerSocket = strings.TrimPrefix(h, "unix://")
	}
	s.databaseURL = freshDatabase(t, dbURL)
	buildImages(t, s)
	return s
}

// freshDatabase creates an empty database beside the test database and
// returns its URL; it is dropped when the test ends.
func freshDatabase(t *testing.T, base string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	name := "mango_e2e_" + randomHex(t, 6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer func() { _ = c.Close(context.Background()) }()
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// buildImages builds the three images with the script `make images` runs.
func buildImages(t *testing.T, s stack) {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(filepath.Join(s.repoRoot, "scripts", "build-images.sh"), "--tag", s.imageTag)
	cmd.Env = append(os.Environ(), "MANGO_VERSION=v0.0.0-e2e", "MANGO_COMMIT=e2ecommit")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-images.sh: %v\n%s", err, out)
	}
	if err := exec.Command("docker", "image", "inspect", "mango-sandbox:latest").Run(); err != nil {
		if out, err := exec.Command(filepath.Join(s.repoRoot, "scripts", "build-sandbox-image.sh")).CombinedOutput(); err != nil {
			t.Fatalf("scripts/build-sandbox-image.sh: %v\n%s", err, out)
		}
	}
	for _, name := range []string{"mango-api-server", "mango-execution-worker", "mango-execution-worker-local"} {
		out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Size}} {{.Config.User}}", image(s, name)).Output()
		if err != nil {
			t.Fatalf("inspect %s: %v", image(s, name), err)
		}
		var size int64
		var user string
		_, _ = fmt.Sscan(string(out), &size, &user)
		if user != "65532:65532" {
			t.Errorf("%s runs as %q, want 65532:65532", name, user)
		}
		t.Logf("image %s: %.1f MiB", name, float64(size)/(1<<20))
	}
	t.Logf("images built in %v", time.Since(start).Round(time.Millisecond))
}

func image(s stack, name string) string { return "mangohq/" + name + ":" + s.imageTag }

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// run starts a container on the host's network and terminates it when the
// test ends, printing its logs if the test failed.
func run(t *testing.T, req testcontainers.ContainerRequest) testcontainers.Container {
	t.Helper()
	hostConfig := req.HostConfigModifier
	req.HostConfigModifier = func(hc *container.HostConfig) {
		hc.NetworkMode = "host"
		if hostConfig != nil {
			hostConfig(hc)
		}
	}
	c, err := testcontainers.GenericContainer(context.Background(), testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	if c != nil {
		t.Cleanup(func() {
			if t.Failed() {
				dumpLogs(t, req.Name, c)
			}
			if err := c.Terminate(context.Background()); err != nil {
				t.Logf("terminate %s: %v", req.Name, err)
			}
		})
	}
	if err != nil {
		t.Fatalf("start %s (%s): %v", req.Name, req.Image, err)
	}
	return c
}

func dumpLogs(t *testing.T, name string, c testcontainers.Container) {
	t.Helper()
	r, err := c.Logs(context.Background())
	if err != nil {
		return
	}
	defer func() { _ = r.Close() }()
	b, _ := io.ReadAll(r)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("--- last logs of %s:\n%s", name, strings.Join(lines, "\n"))
}

// waitReady polls url until it answers 200 and returns how long that took.
func waitReady(t *testing.T, url string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	poll.Until(t, timeout, url+" to answer 200", func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return time.Since(start)
}

// mango is one deployment in containers: the api-server and two worker
// pools, local and docker.
type mango struct {
	s          stack
	prefix     string
	apiKey     string
	token      string
	httpPort   int
	grpcPort   int
	api        testcontainers.Container
	local      testcontainers.Container
	docker     testcontainers.Container
	client     anthropic.Client
	baseURL    string
	coldStart  time.Duration
	apiRequest testcontainers.ContainerRequest
}

func deploy(t *testing.T, s stack) *mango {
	t.Helper()
	m := &mango{s: s, prefix: "e2e" + randomHex(t, 4), apiKey: "sk-mango-e2e-" + randomHex(t, 16),
		token: "wt-" + randomHex(t, 16), httpPort: freePort(t), grpcPort: freePort(t)}
	m.baseURL = fmt.Sprintf("http://127.0.0.1:%d", m.httpPort)

	// The migration the Helm hook runs, then the server.
	migrate := run(t, testcontainers.ContainerRequest{Name: m.prefix + "-migrate", Image: image(s, "mango-api-server"),
		Cmd: []string{"migrate"}, Env: map[string]string{"MANGO_DATABASE_URL": s.databaseURL},
		WaitingFor: wait.ForExit().WithExitTimeout(60 * time.Second)})
	if st, err := migrate.State(context.Background()); err != nil || st.ExitCode != 0 {
		t.Fatalf("api-server migrate exited %v (%v)", st, err)
	}
	m.apiRequest = testcontainers.ContainerRequest{Name: m.prefix + "-api-server", Image: image(s, "mango-api-server"),
		Env: map[string]string{
			"MANGO_DATABASE_URL":      s.databaseURL,
			"MANGO_TEMPORAL_HOSTPORT": s.temporal,
			"MANGO_HTTP_ADDR":         fmt.Sprintf("127.0.0.1:%d", m.httpPort),
			"MANGO_GRPC_ADDR":         fmt.Sprintf("127.0.0.1:%d", m.grpcPort),
			"MANGO_API_KEY":           m.apiKey,
			"MANGO_WORKER_TOKEN":      m.token,
			"MANGO_TASK_QUEUE_PREFIX": m.prefix,
			"MANGO_SANDBOX":           "local",
			"MANGO_SANDBOX_PROVIDERS": "local,docker",
		}}
	start := time.Now()
	m.api = run(t, m.apiRequest)
	m.coldStart = time.Since(start) // container create + start
	m.coldStart += waitReady(t, m.baseURL+"/readyz", 60*time.Second)
	t.Logf("api-server container: start to /readyz in %v", m.coldStart.Round(time.Millisecond))

	workerEnv := func(provider string) map[string]string {
		return map[string]string{
			"MANGO_SANDBOX":           provider,
			"MANGO_TEMPORAL_HOSTPORT": s.temporal,
			"MANGO_CONTROLPLANE_ADDR": fmt.Sprintf("127.0.0.1:%d", m.grpcPort),
			"MANGO_WORKER_TOKEN":      m.token,
			"MANGO_TASK_QUEUE_PREFIX": m.prefix,
			"MANGO_METRICS_ADDR":      fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			// Labelled apart so that its reconciler never touches the
			// containers of other tests on the same daemon.
			"MANGO_DOCKER_LABELS": "mango.test=" + m.prefix,
		}
	}
	polling := wait.ForLog(`"msg":"polling"`).WithStartupTimeout(60 * time.Second)
	m.local = run(t, testcontainers.ContainerRequest{Name: m.prefix + "-worker-local", Image: image(s, "mango-execution-worker-local"),
		Env: workerEnv("local"), WaitingFor: polling})
	gid := socketGroup(t, s.dockerSocket)
	m.docker = run(t, testcontainers.ContainerRequest{Name: m.prefix + "-worker-docker", Image: image(s, "mango-execution-worker"),
		Env: workerEnv("docker"), WaitingFor: polling,
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.Binds = []string{s.dockerSocket + ":/var/run/docker.sock"}
			hc.GroupAdd = []string{gid}
		}})
	t.Cleanup(func() { removeSandboxes(m.prefix) })
	m.client = anthropic.NewClient(option.WithBaseURL(m.baseURL), option.WithAPIKey(m.apiKey), option.WithMaxRetries(0))
	return m
}

// socketGroup is the group owning the Docker socket, which the non-root
// worker joins to reach the daemon.
func socketGroup(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("docker socket: %v", err)
	}
	return fmt.Sprint(fi.Sys().(*syscall.Stat_t).Gid)
}

// removeSandboxes removes the sandbox containers the docker pool created.
func removeSandboxes(prefix string) {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=mango.test="+prefix).Output()
	if err != nil || len(strings.TrimSpace(string(out))) == 0 {
		return
	}
	_ = exec.Command("docker", append([]string{"rm", "-f"}, strings.Fields(string(out))...)...).Run()
}

// session creates an agent with the toolset and a session whose
// environment routes it to provider.
func (m *mango) session(t *testing.T, provider string) string {
	t.Helper()
	ctx := context.Background()
	agent, err := m.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "e2e-" + provider,
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}}})
	if err != nil {
		t.Fatalf("create agent: %v", err)
	}
	env, err := m.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "e2e-" + provider + "-" + randomHex(t, 3),
		Metadata: map[string]string{"mango.sandbox": provider}})
	if err != nil {
		t.Fatalf("create environment: %v", err)
	}
	s, err := m.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	t.Cleanup(func() {
		_, _ = m.client.Beta.Sessions.Delete(context.Background(), s.ID, anthropic.BetaSessionDeleteParams{})
	})
	return s.ID
}

func (m *mango) say(t *testing.T, sessionID, text string) {
	t.Helper()
	_, err := m.client.Beta.Sessions.Events.Send(context.Background(), sessionID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: text}}},
		}}}})
	if err != nil {
		t.Fatalf("send to %s: %v", sessionID, err)
	}
}

// event is one listed or streamed event, as the SDK decoded it.
type event struct {
	ID, Type string
	Raw      string
}

// events lists the session's events through the SDK, every page.
func (m *mango) events(t *testing.T, sessionID string) []event {
	t.Helper()
	var out []event
	pager := m.client.Beta.Sessions.Events.ListAutoPaging(context.Background(), sessionID, anthropic.BetaSessionEventListParams{})
	for pager.Next() {
		e := pager.Current()
		out = append(out, event{ID: e.ID, Type: e.Type, Raw: e.RawJSON()})
	}
	if err := pager.Err(); err != nil {
		t.Fatalf("list events of %s: %v", sessionID, err)
	}
	return out
}

// idleTurns counts session.status_idle events and fails on any
// session.error.
func idleTurns(t *testing.T, evs []event) int {
	t.Helper()
	n := 0
	for _, e := range evs {
		switch e.Type {
		case "session.status_idle":
			n++
		case "session.error", "session.status_terminated":
			t.Fatalf("unexpected %s: %s", e.Type, e.Raw)
		}
	}
	return n
}

// waitIdle waits until the session has n idle events and returns its events.
func (m *mango) waitIdle(t *testing.T, sessionID string, n int, timeout time.Duration) []event {
	t.Helper()
	var evs []event
	poll.Until(t, timeout, fmt.Sprintf("%d idle events of session %s", n, sessionID), func() (bool, string) {
		evs = m.events(t, sessionID)
		idle := idleTurns(t, evs)
		return idle >= n, fmt.Sprintf("%d idle events; events %v", idle, types(evs))
	})
	return evs
}

func types(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// lastToolResult is the text of the last agent.tool_result.
func lastToolResult(t *testing.T, evs []event) string {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type != "agent.tool_result" {
			continue
		}
		var r anthropic.BetaManagedAgentsAgentToolResultEvent
		if err := json.Unmarshal([]byte(evs[i].Raw), &r); err != nil {
			t.Fatalf("agent.tool_result does not decode through the SDK: %v", err)
		}
		var b strings.Builder
		for _, c := range r.Content {
			b.WriteString(c.Text)
		}
		return b.String()
	}
	t.Fatalf("no agent.tool_result in %v", types(evs))
	return ""
}

// TestContainersEndToEnd runs the images as an operator would: migrate,
// api-server, a local and a docker worker pool; sessions routed to each
// pool by environment metadata run a bash turn; a stopped docker pool makes
// its session's next turn wait, not fail; an api-server restart loses no
// event for a client that resumes with Last-Event-ID.
func TestContainersEndToEnd(t *testing.T) {
	s := setup(t)
	m := deploy(t, s)

	// The build is stamped and shown on /healthz.
	resp, err := http.Get(m.baseURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(body), `"version":"v0.0.0-e2e"`) || !strings.Contains(string(body), `"commit":"e2ecommit"`) {
		t.Errorf("/healthz = %s, want the stamped version v0.0.0-e2e and commit e2ecommit", body)
	}

	local, docker := m.session(t, "local"), m.session(t, "docker")
	m.say(t, local, `#tool bash {"command":"echo ran-in-$(pwd)"}`)
	m.say(t, docker, `#tool bash {"command":"echo ran-in-$(pwd)"}`)
	if r := lastToolResult(t, m.waitIdle(t, local, 1, 60*time.Second)); !strings.Contains(r, "ran-in-/tmp/mango-sandboxes/") {
		t.Errorf("local pool tool result = %q, want it to run under the worker container's /tmp/mango-sandboxes", r)
	}
	if r := lastToolResult(t, m.waitIdle(t, docker, 1, 90*time.Second)); !strings.Contains(r, "ran-in-/workspace") {
		t.Errorf("docker pool tool result = %q, want it to run in the sandbox container's /workspace", r)
	}

	t.Run("stopped docker pool: the turn waits, then completes", func(t *testing.T) {
		grace := 10 * time.Second
		if err := m.docker.Stop(context.Background(), &grace); err != nil {
			t.Fatalf("stop docker worker: %v", err)
		}
		m.say(t, docker, `#tool bash {"command":"echo second-turn"}`)
		// While no docker worker runs, the turn waits: no error, no idle.
		// Nothing tells that it has nowhere to go: watch it for a while.
		poll.Never(t, 3*time.Second, "idle event beside the first while the docker pool is stopped (the turn must wait)", func() (bool, string) {
			n := idleTurns(t, m.events(t, docker))
			return n != 1, fmt.Sprintf("%d idle events, want 1", n)
		})
		got, err := m.client.Beta.Sessions.Get(context.Background(), docker, anthropic.BetaSessionGetParams{})
		if err != nil || got.Status != "running" {
			t.Fatalf("session status with the pool stopped = %q (%v), want running", got.Status, err)
		}
		if err := m.docker.Start(context.Background()); err != nil {
			t.Fatalf("start docker worker again: %v", err)
		}
		if r := lastToolResult(t, m.waitIdle(t, docker, 2, 90*time.Second)); !strings.Contains(r, "second-turn") {
			t.Errorf("tool result after the pool came back = %q, want second-turn", r)
		}
	})

	t.Run("api-server restart: the stream resumes with Last-Event-ID", func(t *testing.T) {
		before := len(m.events(t, local))
		live := m.watch(t, local, "")
		m.say(t, local, `#tool bash {"command":"echo before-restart"}`)
		seen := live.until(t, "session.status_idle")
		grace := 10 * time.Second
		stopStart := time.Now()
		if err := m.api.Stop(context.Background(), &grace); err != nil {
			t.Fatalf("stop api-server: %v", err)
		}
		// SIGTERM drains: the process exits well before docker's SIGKILL.
		if took := time.Since(stopStart); took >= grace {
			t.Errorf("api-server took %v to stop on SIGTERM (killed after the %v grace), want a prompt drain", took, grace)
		}
		live.ended(t)
		start := time.Now()
		if err := m.api.Start(context.Background()); err != nil {
			t.Fatalf("start api-server again: %v", err)
		}
		t.Logf("api-server container restart: start to /readyz in %v", (time.Since(start) + waitReady(t, m.baseURL+"/readyz", 60*time.Second)).Round(time.Millisecond))
		// A turn runs while the client is away; it then resumes.
		m.say(t, local, `#tool bash {"command":"echo after-restart"}`)
		all := m.waitIdle(t, local, 3, 60*time.Second)[before:]
		resumed := m.watch(t, local, seen[len(seen)-1].ID).until(t, "session.status_idle")
		got := append(append([]event{}, seen...), resumed...)
		if len(got) != len(all) {
			t.Fatalf("before + after the restart the stream gave %d events, the list has %d:\nstream %v\nlist   %v", len(got), len(all), types(got), types(all))
		}
		for i := range all {
			if got[i].ID != all[i].ID {
				t.Fatalf("event %d: stream gave %s (%s), the list has %s (%s)", i, got[i].ID, got[i].Type, all[i].ID, all[i].Type)
			}
		}
		if r := lastToolResult(t, got); !strings.Contains(r, "after-restart") {
			t.Errorf("resumed stream's last tool result = %q, want after-restart", r)
		}
	})
}

// sse is one SSE stream read through the SDK in the background.
type sse struct {
	events <-chan event
	done   <-chan error
}

// watch opens the session's stream (resuming after lastEventID when set).
func (m *mango) watch(t *testing.T, sessionID, lastEventID string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var opts []option.RequestOption
	if lastEventID != "" {
		opts = append(opts, option.WithHeader("Last-Event-ID", lastEventID))
	}
	stream := m.client.Beta.Sessions.Events.StreamEvents(ctx, sessionID, anthropic.BetaSessionEventStreamParams{}, opts...)
	events, done := make(chan event, 1024), make(chan error, 1)
	go func() {
		defer func() { _ = stream.Close() }()
		for stream.Next() {
			e := stream.Current()
			if e.AsAny() == nil {
				t.Errorf("streamed %s does not decode through the SDK's union: %s", e.Type, e.RawJSON())
			}
			events <- event{ID: e.ID, Type: e.Type, Raw: e.RawJSON()}
		}
		done <- stream.Err()
	}()
	return &sse{events: events, done: done}
}

// until reads events up to and including the first of type stop.
func (s *sse) until(t *testing.T, stop string) []event {
	t.Helper()
	var got []event
	timeout := time.After(60 * time.Second)
	for {
		select {
		case e := <-s.events:
			got = append(got, e)
			if e.Type == stop {
				return got
			}
		case err := <-s.done:
			t.Fatalf("stream ended (%v) before %s; got %v", err, stop, types(got))
		case <-timeout:
			t.Fatalf("no %s on the stream within 60s; got %v", stop, types(got))
		}
	}
}

// ended waits for the stream to end (its server went away).
func (s *sse) ended(t *testing.T) {
	t.Helper()
	select {
	case err := <-s.done:
		t.Logf("stream ended as its server stopped: %v", err)
	case e := <-s.events:
		t.Fatalf("stream sent %s after its server stopped", e.Type)
	case <-time.After(30 * time.Second):
		t.Fatal("stream still open 30s after the api-server stopped")
	}
}
