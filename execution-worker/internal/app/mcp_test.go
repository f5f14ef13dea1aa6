package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/internal/mcptest"
)

// TestMCPTools: an agent's MCP toolset is discovered once per session over
// Streamable HTTP and offered to the model; an always_allow tool runs in
// the turn (agent.mcp_tool_use, agent.mcp_tool_result, the result fed
// back to the model); an always_ask tool parks the session until the
// client confirms; a disabled tool is not offered.
func TestMCPTools(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	env["MANGO_MCP_ALLOW_PRIVATE"] = "1" // the test server listens on 127.0.0.1
	runWorker(t, env)
	mcpSrv := mcptest.New(t)
	mcpSrv.SetSSE(true)

	var agent, environment, sess struct{ ID string }
	srv.Do(t, http.MethodPost, "/v1/agents", map[string]any{"name": "mcp", "model": "fake",
		"tools": []any{
			map[string]any{"type": "agent_toolset_20260401"},
			map[string]any{"type": "mcp_toolset", "mcp_server_name": "docs",
				"default_config": map[string]any{"permission_policy": map[string]any{"type": "always_allow"}},
				"configs": []any{
					map[string]any{"name": "big", "permission_policy": map[string]any{"type": "always_ask"}},
					map[string]any{"name": "fail", "enabled": false},
				}},
		},
		"mcp_servers": []any{map[string]any{"type": "url", "name": "docs", "url": mcpSrv.URL}},
	}, &agent)
	srv.Do(t, http.MethodPost, "/v1/environments", map[string]any{"name": fmt.Sprintf("mcp-%d", time.Now().UnixNano())}, &environment)
	srv.Do(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": environment.ID}, &sess)

	type mcpEvent struct {
		ID                  string `json:"id"`
		Type                string `json:"type"`
		Name                string `json:"name"`
		MCPServerName       string `json:"mcp_server_name"`
		EvaluatedPermission string `json:"evaluated_permission"`
		MCPToolUseID        string `json:"mcp_tool_use_id"`
		IsError             bool   `json:"is_error"`
		Content             []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	all := func(evs []listedEvent, typ string) []mcpEvent {
		var out []mcpEvent
		for _, e := range evs {
			if e.Type == typ {
				var m mcpEvent
				if err := json.Unmarshal(e.Raw, &m); err != nil {
					t.Fatal(err)
				}
				out = append(out, m)
			}
		}
		return out
	}

	sendMessage(t, srv, sess.ID, `#tool mcp__docs__echo {"text":"from mcp"}`)
	evs := waitFor(t, srv, sess.ID, func(e []listedEvent) bool { return idleCount(e) == 1 })
	uses, results := all(evs, "agent.mcp_tool_use"), all(evs, "agent.mcp_tool_result")
	if len(uses) != 1 || uses[0].Name != "echo" || uses[0].MCPServerName != "docs" || uses[0].EvaluatedPermission != "allow" {
		t.Fatalf("mcp_tool_use = %+v; events %s", uses, types(evs))
	}
	if len(results) != 1 || results[0].MCPToolUseID != uses[0].ID || results[0].IsError || results[0].Content[0].Text != "from mcp" {
		t.Fatalf("mcp_tool_result = %+v", results)
	}
	if msg := lastOf(evs, "agent.message"); msg == nil || !strings.Contains(msg.Content[0].Text, "from mcp") {
		t.Errorf("the model did not get the MCP result back: %v", msg)
	}
	if calls := mcpSrv.Calls(); len(calls) != 1 || calls[0].Name != "echo" || calls[0].Arguments["text"] != "from mcp" {
		t.Errorf("MCP calls = %+v", calls)
	}

	// always_ask: the session parks on the mcp_tool_use until confirmed.
	sendMessage(t, srv, sess.ID, `#tool mcp__docs__big {"size":12}`)
	evs = waitFor(t, srv, sess.ID, func(e []listedEvent) bool { return idleCount(e) == 2 })
	uses = all(evs, "agent.mcp_tool_use")
	idle := lastOf(evs, "session.status_idle")
	if len(uses) != 2 || uses[1].EvaluatedPermission != "ask" || idle.StopReason == nil || idle.StopReason.Type != "requires_action" ||
		!slices.Equal(idle.StopReason.EventIDs, []string{uses[1].ID}) {
		t.Fatalf("always_ask: uses %+v, idle %s", uses, idle.Raw)
	}
	if n := len(mcpSrv.Calls()); n != 1 {
		t.Fatalf("the unconfirmed tool ran (%d calls)", n)
	}
	sendEvent(t, srv, sess.ID, map[string]any{"type": "user.tool_confirmation", "tool_use_id": uses[1].ID, "result": "allow"})
	evs = waitFor(t, srv, sess.ID, func(e []listedEvent) bool { return idleCount(e) == 3 })
	results = all(evs, "agent.mcp_tool_result")
	if len(results) != 2 || results[1].MCPToolUseID != uses[1].ID || results[1].Content[0].Text != strings.Repeat("b", 12) {
		t.Fatalf("confirmed mcp_tool_result = %+v", results)
	}

	// A disabled tool is not offered: calling it is an unknown tool.
	sendMessage(t, srv, sess.ID, `#tool mcp__docs__fail {}`)
	evs = waitFor(t, srv, sess.ID, func(e []listedEvent) bool { return idleCount(e) == 4 })
	if n := len(all(evs, "agent.mcp_tool_use")); n != 2 {
		t.Errorf("a disabled MCP tool was used (%d uses)", n)
	}
	if slices.ContainsFunc(mcpSrv.Calls(), func(c mcptest.Call) bool { return c.Name == "fail" }) {
		t.Error("the disabled tool reached the server")
	}
	// Discovered once: the tool list is pinned for the session.
	if n := mcpSrv.Lists(); n != 2 { // two pages, one discovery
		t.Errorf("tools/list requests = %d, want 2 (one discovery of two pages)", n)
	}
}

// TestMCPServerUnreachable: a server that cannot be reached is reported
// with a session.error (mcp_connection_failed_error) and the turn goes on
// without its tools.
func TestMCPServerUnreachable(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	env["MANGO_MCP_ALLOW_PRIVATE"] = "1" // unreachable, not refused
	runWorker(t, env)
	var agent, environment, sess struct{ ID string }
	srv.Do(t, http.MethodPost, "/v1/agents", map[string]any{"name": "mcp-down", "model": "fake",
		"tools":       []any{map[string]any{"type": "mcp_toolset", "mcp_server_name": "gone"}},
		"mcp_servers": []any{map[string]any{"type": "url", "name": "gone", "url": "http://127.0.0.1:1/mcp"}},
	}, &agent)
	srv.Do(t, http.MethodPost, "/v1/environments", map[string]any{"name": fmt.Sprintf("mcp-down-%d", time.Now().UnixNano())}, &environment)
	srv.Do(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": environment.ID}, &sess)
	sendMessage(t, srv, sess.ID, "hello")
	evs := waitFor(t, srv, sess.ID, func(e []listedEvent) bool { return idleCount(e) == 1 })
	e := lastOf(evs, "session.error")
	if e == nil || e.Error == nil || e.Error.Type != "mcp_connection_failed_error" || !strings.Contains(string(e.Raw), "gone") {
		t.Fatalf("session.error = %v; events %s", e, types(evs))
	}
	if msg := lastOf(evs, "agent.message"); msg == nil || msg.Content[0].Text != "You said: hello" {
		t.Errorf("the turn did not go on: %v", msg)
	}
	if idle := lastOf(evs, "session.status_idle"); idle.StopReason == nil || idle.StopReason.Type != "end_turn" {
		t.Errorf("idle = %s, want end_turn", idle.Raw)
	}
}

// TestMCPPrivateAddressRefused: by default a worker refuses MCP servers on
// loopback (and link-local, private) addresses: the server sees no
// request, the session gets an mcp_connection_failed_error saying why, and
// the turn goes on without the tools.
func TestMCPPrivateAddressRefused(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	mcpSrv := mcptest.New(t)
	var agent, environment, sess struct{ ID string }
	srv.Do(t, http.MethodPost, "/v1/agents", map[string]any{"name": "mcp-private", "model": "fake",
		"tools":       []any{map[string]any{"type": "mcp_toolset", "mcp_server_name": "inside"}},
		"mcp_servers": []any{map[string]any{"type": "url", "name": "inside", "url": mcpSrv.URL}},
	}, &agent)
	srv.Do(t, http.MethodPost, "/v1/environments", map[string]any{"name": fmt.Sprintf("mcp-private-%d", time.Now().UnixNano())}, &environment)
	srv.Do(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": environment.ID}, &sess)
	sendMessage(t, srv, sess.ID, "hello")
	evs := waitFor(t, srv, sess.ID, func(e []listedEvent) bool { return idleCount(e) == 1 })
	e := lastOf(evs, "session.error")
	if e == nil || e.Error == nil || e.Error.Type != "mcp_connection_failed_error" || !strings.Contains(e.Error.Message, "private") {
		t.Fatalf("session.error = %+v; want mcp_connection_failed_error saying the address is private (events %s)", e, types(evs))
	}
	if n := mcpSrv.Inits() + mcpSrv.Lists(); n != 0 {
		t.Fatalf("the private server received %d requests, want none", n)
	}
	if msg := lastOf(evs, "agent.message"); msg == nil || msg.Content[0].Text != "You said: hello" {
		t.Errorf("the turn did not go on: %v", msg)
	}
}

// TestMCPAuthenticationFailed: a server that refuses the worker (here:
// it demands a bearer token and the worker has no credentials for it) is
// reported with an mcp_authentication_failed_error, not a connection
// failure, and the turn goes on without its tools.
func TestMCPAuthenticationFailed(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	env["MANGO_MCP_ALLOW_PRIVATE"] = "1" // the test server listens on 127.0.0.1
	runWorker(t, env)
	mcpSrv := mcptest.NewOAuth(t)
	var agent, environment, sess struct{ ID string }
	srv.Do(t, http.MethodPost, "/v1/agents", map[string]any{"name": "mcp-auth", "model": "fake",
		"tools":       []any{map[string]any{"type": "mcp_toolset", "mcp_server_name": "locked"}},
		"mcp_servers": []any{map[string]any{"type": "url", "name": "locked", "url": mcpSrv.URL}},
	}, &agent)
	srv.Do(t, http.MethodPost, "/v1/environments", map[string]any{"name": fmt.Sprintf("mcp-auth-%d", time.Now().UnixNano())}, &environment)
	srv.Do(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": environment.ID}, &sess)
	sendMessage(t, srv, sess.ID, "hello")
	evs := waitFor(t, srv, sess.ID, func(e []listedEvent) bool { return idleCount(e) == 1 })
	e := lastOf(evs, "session.error")
	if e == nil || e.Error == nil || e.Error.Type != "mcp_authentication_failed_error" || !strings.Contains(e.Error.Message, mcpSrv.URL) {
		t.Fatalf("session.error = %+v; want mcp_authentication_failed_error naming the server (events %s)", e, types(evs))
	}
	if mcpSrv.Unauthorized() == 0 {
		t.Error("the server refused no request")
	}
	if msg := lastOf(evs, "agent.message"); msg == nil || msg.Content[0].Text != "You said: hello" {
		t.Errorf("the turn did not go on: %v", msg)
	}
}
