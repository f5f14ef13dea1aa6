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
	hostPort := temporaltest.HostPort(t)
	srv := cptest.Start(t, "MANGO_SANDBOX_PROVIDERS=local,docker,opensandbox")
	fake := opensandboxfake.New(t)
	base := map[string]string{
		"MANGO_TEMPORAL_HOSTPORT":  hostPort,
		"MANGO_CONTROLPLANE_ADDR":  srv.GRPCAddr,
		"MANGO_WORKER_TOKEN":       srv.WorkerToken,
		"MANGO_TASK_QUEUE_PREFIX":  srv.TaskQueuePrefix,
		"MANGO_SHUTDOWN_TIMEOUT":   "10s",
		"MANGO_RECONCILE_INTERVAL": "1h",
	}
	worker := func(id string, extra map[string]string) func() {
		env := maps.Clone(base)
		maps.Copy(env, extra)
		env["MANGO_WORKER_ID"] = id
		return runWorker(t, env)
	}
	osb := map[string]string{"MANGO_SANDBOX": "opensandbox", "OPEN_SANDBOX_DOMAIN": fake.Host()}
	stop := worker("egress-osb-1", osb)
	dockerUp := exec.Command("docker", "info").Run() == nil
	if !dockerUp && testenv.Required() {
		t.Fatal("no Docker daemon")
	}
	if dockerUp {
		// Labelled apart, so that its reconciler never touches the
		// containers of tests running beside it on the same daemon.
		worker("egress-docker-1", map[string]string{"MANGO_SANDBOX": "docker", "MANGO_DOCKER_LABELS": "mango.test=" + srv.TaskQueuePrefix})
	}
	worker("egress-local-1", map[string]string{"MANGO_SANDBOX": "local", "MANGO_LOCAL_SANDBOX_ROOT": t.TempDir()})
	waitWorkers(t, srv, dockerUp)

	tools := func(mcpURL string) map[string]any {
		return map[string]any{
			"tools": []any{map[string]any{"type": "agent_toolset_20260401"},
				map[string]any{"type": "mcp_toolset", "mcp_server_name": "docs"}},
			"mcp_servers": []any{map[string]any{"type": "url", "name": "docs", "url": mcpURL}},
		}
	}
	agentBody := tools("https://mcp-one.example.com/mcp")
	agentBody["name"], agentBody["model"] = "egress", "fake"
	var agent, sess struct{ ID string }
	srv.Do(t, http.MethodPost, "/v1/agents", agentBody, &agent)
	limited := func(provider string, packages bool) string {
		cfg := map[string]any{"type": "cloud", "networking": map[string]any{"type": "limited",
			"allowed_hosts": []string{"api.example.com"}, "allow_mcp_servers": true}}
		if packages {
			cfg = map[string]any{"type": "cloud", "packages": map[string]any{"pip": []string{"requests"}}}
		}
		var env struct{ ID string }
		srv.Do(t, http.MethodPost, "/v1/environments", map[string]any{"name": fmt.Sprintf("egress-%s-%v-%d", provider, packages, time.Now().UnixNano()),
			"config": cfg, "metadata": map[string]string{"mango.sandbox": provider}}, &env)
		return env.ID
	}

	// Refused where it cannot be enforced.
	refusals := []struct {
		provider string
		packages bool
		want     string
	}{
		{"local", false, "cannot enforce egress rules"},
		{"local", true, "does not install packages"},
	}
	if dockerUp {
		refusals = append(refusals, struct {
			provider string
			packages bool
			want     string
		}{"docker", false, "cannot enforce egress rules"})
	}
	for _, r := range refusals {
		status, body := srv.Request(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": limited(r.provider, r.packages)})
		if status != http.StatusUnprocessableEntity || !strings.Contains(string(body), r.want) {
			t.Errorf("session on %s (packages %v) = %d %s, want 422 containing %q", r.provider, r.packages, status, body, r.want)
		}
	}

	srv.Do(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": limited("opensandbox", false)}, &sess)
	turn := func(n int, command string) {
		t.Helper()
		sendMessage(t, srv, sess.ID, `#tool bash {"command":"`+command+`"}`)
		evs := waitFor(t, srv, sess.ID, func(e []listedEvent) bool { return idleCount(e) == n })
		if r := lastOf(evs, "agent.tool_result"); r == nil || r.IsError {
			t.Fatalf("turn %d: tool result %v; events %s", n, r, types(evs))
		}
	}
	// check asserts every policy denies by default, the last allows exactly
	// want, and command ran under it.
	check := func(command string, want ...string) []opensandboxfake.Policy {
		t.Helper()
		ids := fake.IDs()
		if len(ids) != 1 {
			t.Fatalf("sandboxes = %v, want one", ids)
		}
		pols := fake.Policies(ids[0])
		for i, p := range pols {
			if p.DefaultAction != "deny" {
				t.Errorf("policy %d = %+v, want deny by default", i, p)
			}
		}
		if len(pols) == 0 || !slices.Equal(pols[len(pols)-1].Allowed(), want) {
			t.Fatalf("policies = %+v, want the last to allow exactly %v", pols, want)
		}
		ran := false
		for _, c := range fake.Commands(ids[0]) {
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

	turn(1, "echo one")
	check("echo one", "api.example.com", "mcp-one.example.com")

	// An MCP-affecting session update: the next turn's policy follows.
	srv.Do(t, http.MethodPost, "/v1/sessions/"+sess.ID, map[string]any{"agent": tools("https://mcp-two.example.com/mcp")}, nil)
	turn(2, "echo two")
	pols := check("echo two", "api.example.com", "mcp-two.example.com")

	// A restarted worker applies the policy again before any command.
	stop()
	worker("egress-osb-2", osb)
	turn(3, "echo three")
	if after := check("echo three", "api.example.com", "mcp-two.example.com"); len(after) != len(pols)+1 {
		t.Errorf("policies after the restart = %d, want %d (applied once more)", len(after), len(pols)+1)
	}
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
