package app_test

import (
	"fmt"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxopensandbox/opensandboxfake"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/temporaltest"
	"github.com/mangohq/mango/internal/testenv"
)

// TestLimitedEgressEndToEnd drives an environment with limited networking
// through the API to an OpenSandbox worker (against the offline fake): the
// sandbox enforces deny-by-default with exactly the allowed hosts plus the
// agent's MCP server; a session update that changes the MCP server changes
// the policy of the next turn; a restarted worker applies it again. The
// same environment on docker or local is refused with 422.
func TestLimitedEgressEndToEnd(t *testing.T) {
	t.Parallel()
	e, stop := startEgressWorkers(t)
	e.createAgent(t)
	e.checkRefusals(t)

	var sess struct{ ID string }
	e.srv.Do(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": e.agentID, "environment_id": e.limited(t, "opensandbox", false)}, &sess)
	e.sessID = sess.ID
	e.turn(t, 1, "echo one")
	e.checkPolicies(t, "echo one", "api.example.com", "mcp-one.example.com")

	// An MCP-affecting session update: the next turn's policy follows.
	e.srv.Do(t, http.MethodPost, "/v1/sessions/"+e.sessID, map[string]any{"agent": egressTools("https://mcp-two.example.com/mcp")}, nil)
	e.turn(t, 2, "echo two")
	pols := e.checkPolicies(t, "echo two", "api.example.com", "mcp-two.example.com")

	// A restarted worker applies the policy again before any command.
	stop()
	e.worker(t, "egress-osb-2", e.osb)
	e.turn(t, 3, "echo three")
	if after := e.checkPolicies(t, "echo three", "api.example.com", "mcp-two.example.com"); len(after) != len(pols)+1 {
		t.Errorf("policies after the restart = %d, want %d (applied once more)", len(after), len(pols)+1)
	}
}

// egressE2E is the state TestLimitedEgressEndToEnd's steps share: the
// control plane, the OpenSandbox fake, the workers' environment, and the
// agent and session once created.
type egressE2E struct {
	srv      *cptest.Server
	fake     *opensandboxfake.Server
	base     map[string]string
	osb      map[string]string
	dockerUp bool
	agentID  string
	sessID   string
}

// startEgressWorkers starts the control plane, the OpenSandbox fake and
// the opensandbox, docker (when up) and local workers, and waits until
// they have reported. stop stops the opensandbox worker.
func startEgressWorkers(t *testing.T) (e *egressE2E, stop func()) {
	t.Helper()
	hostPort := temporaltest.HostPort(t)
	srv := cptest.Start(t, "MANGO_SANDBOX_PROVIDERS=local,docker,opensandbox")
	fake := opensandboxfake.New(t)
	e = &egressE2E{srv: srv, fake: fake, base: map[string]string{
		"MANGO_TEMPORAL_HOSTPORT":  hostPort,
		"MANGO_CONTROLPLANE_ADDR":  srv.GRPCAddr,
		"MANGO_WORKER_TOKEN":       srv.WorkerToken,
		"MANGO_TASK_QUEUE_PREFIX":  srv.TaskQueuePrefix,
		"MANGO_SHUTDOWN_TIMEOUT":   "10s",
		"MANGO_RECONCILE_INTERVAL": "1h",
	}}
	e.osb = map[string]string{"MANGO_SANDBOX": "opensandbox", "OPEN_SANDBOX_DOMAIN": fake.Host()}
	stop = e.worker(t, "egress-osb-1", e.osb)
	e.dockerUp = exec.Command("docker", "info").Run() == nil
	if !e.dockerUp && testenv.Required() {
		t.Fatal("no Docker daemon")
	}
	if e.dockerUp {
		// Labelled apart, so that its reconciler never touches the
		// containers of tests running beside it on the same daemon.
		e.worker(t, "egress-docker-1", map[string]string{"MANGO_SANDBOX": "docker", "MANGO_DOCKER_LABELS": "mango.test=" + srv.TaskQueuePrefix})
	}
	e.worker(t, "egress-local-1", map[string]string{"MANGO_SANDBOX": "local", "MANGO_LOCAL_SANDBOX_ROOT": t.TempDir()})
	waitWorkers(t, srv, e.dockerUp)
	return e, stop
}

// worker runs a worker with the base environment, extra and the id.
func (e *egressE2E) worker(t *testing.T, id string, extra map[string]string) func() {
	t.Helper()
	env := maps.Clone(e.base)
	maps.Copy(env, extra)
	env["MANGO_WORKER_ID"] = id
	return runWorker(t, env)
}

// egressTools are the agent's tools: the built-in toolset and an MCP
// server at mcpURL.
func egressTools(mcpURL string) map[string]any {
	return map[string]any{
		"tools": []any{map[string]any{"type": "agent_toolset_20260401"},
			map[string]any{"type": "mcp_toolset", "mcp_server_name": "docs"}},
		"mcp_servers": []any{map[string]any{"type": "url", "name": "docs", "url": mcpURL}},
	}
}

// createAgent creates the agent, with its MCP server at mcp-one.
func (e *egressE2E) createAgent(t *testing.T) {
	t.Helper()
	agentBody := egressTools("https://mcp-one.example.com/mcp")
	agentBody["name"], agentBody["model"] = "egress", "fake"
	var agent struct{ ID string }
	e.srv.Do(t, http.MethodPost, "/v1/agents", agentBody, &agent)
	e.agentID = agent.ID
}

// limited creates an environment on provider with limited networking (or,
// with packages, one that installs packages) and returns its id.
func (e *egressE2E) limited(t *testing.T, provider string, packages bool) string {
	t.Helper()
	cfg := map[string]any{"type": "cloud", "networking": map[string]any{"type": "limited",
		"allowed_hosts": []string{"api.example.com"}, "allow_mcp_servers": true}}
	if packages {
		cfg = map[string]any{"type": "cloud", "packages": map[string]any{"pip": []string{"requests"}}}
	}
	var env struct{ ID string }
	e.srv.Do(t, http.MethodPost, "/v1/environments", map[string]any{"name": fmt.Sprintf("egress-%s-%v-%d", provider, packages, time.Now().UnixNano()),
		"config": cfg, "metadata": map[string]string{"mango.sandbox": provider}}, &env)
	return env.ID
}

// checkRefusals checks that a session is refused with 422 where the
// environment cannot be enforced: local, and docker when up.
func (e *egressE2E) checkRefusals(t *testing.T) {
	t.Helper()
	refusals := []struct {
		provider string
		packages bool
		want     string
	}{
		{"local", false, "cannot enforce egress rules"},
		{"local", true, "does not install packages"},
	}
	if e.dockerUp {
		refusals = append(refusals, struct {
			provider string
			packages bool
			want     string
		}{"docker", false, "cannot enforce egress rules"})
	}
	for _, r := range refusals {
		status, body := e.srv.Request(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": e.agentID, "environment_id": e.limited(t, r.provider, r.packages)})
		if status != http.StatusUnprocessableEntity || !strings.Contains(string(body), r.want) {
			t.Errorf("session on %s (packages %v) = %d %s, want 422 containing %q", r.provider, r.packages, status, body, r.want)
		}
	}
}

// turn runs command with the bash tool as the session's nth turn and
// waits until it is idle with a successful tool result.
func (e *egressE2E) turn(t *testing.T, n int, command string) {
	t.Helper()
	sendMessage(t, e.srv, e.sessID, `#tool bash {"command":"`+command+`"}`)
	evs := waitFor(t, e.srv, e.sessID, func(got []listedEvent) bool { return idleCount(got) == n })
	if r := lastOf(evs, "agent.tool_result"); r == nil || r.IsError {
		t.Fatalf("turn %d: tool result %v; events %s", n, r, types(evs))
	}
}

// checkPolicies asserts every policy denies by default, the last allows
// exactly want, and command ran under it.
func (e *egressE2E) checkPolicies(t *testing.T, command string, want ...string) []opensandboxfake.Policy {
	t.Helper()
	ids := e.fake.IDs()
	if len(ids) != 1 {
		t.Fatalf("sandboxes = %v, want one", ids)
	}
	pols := e.fake.Policies(ids[0])
	for i, p := range pols {
		if p.DefaultAction != "deny" {
			t.Errorf("policy %d = %+v, want deny by default", i, p)
		}
	}
	if len(pols) == 0 || !slices.Equal(pols[len(pols)-1].Allowed(), want) {
		t.Fatalf("policies = %+v, want the last to allow exactly %v", pols, want)
	}
	ran := false
	for _, c := range e.fake.Commands(ids[0]) {
		if strings.Contains(c.Command, command) {
			ran = true
			if c.Policy == nil || !slices.Equal(c.Policy.Allowed(), want) {
				t.Errorf("%q ran under %+v, want allow exactly %v", command, c.Policy, want)
			}
		}
	}
	if !ran {
		t.Errorf("%q did not run in the sandbox", command)
	}
	return pols
}

// waitWorkers waits until the opensandbox, local and (when up) docker
// workers have reported their capabilities, as GET /admin/providers shows
// them: providers with a worker that sent a heartbeat.
func waitWorkers(t *testing.T, srv *cptest.Server, docker bool) {
	t.Helper()
	want := 2
	if docker {
		want = 3
	}
	poll.Until(t, 30*time.Second, fmt.Sprintf("%d workers to report their capabilities", want), func() (bool, string) {
		var health struct {
			Data []struct {
				Provider string
				Workers  []struct{ ID string }
			}
		}
		srv.Do(t, http.MethodGet, "/admin/providers", nil, &health)
		n := 0
		for _, p := range health.Data {
			if len(p.Workers) > 0 {
				n++
			}
		}
		return n == want, fmt.Sprintf("%d reported: %+v", n, health.Data)
	})
}
