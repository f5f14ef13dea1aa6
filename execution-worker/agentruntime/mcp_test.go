package agentruntime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/mcp"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
)

// fakeMCP is an MCPClient whose discovery and calls fail as configured.
type fakeMCP struct {
	listErr, callErr error

	mu       sync.Mutex
	sessions []string // the session id of every request
}

func (f *fakeMCP) ListTools(_ context.Context, sessionID, _ string) ([]mcp.Tool, error) {
	f.mu.Lock()
	f.sessions = append(f.sessions, sessionID)
	f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	return []mcp.Tool{{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}}, nil
}

func (f *fakeMCP) CallTool(_ context.Context, sessionID, _, tool string, _ json.RawMessage) (*mcp.CallResult, error) {
	f.mu.Lock()
	f.sessions = append(f.sessions, sessionID)
	f.mu.Unlock()
	if f.callErr != nil {
		return nil, f.callErr
	}
	return &mcp.CallResult{Content: []mcp.Content{{Type: "text", Text: tool + " ran"}}}, nil
}

// runMCPTurn runs one turn of an agent with an always_allow MCP toolset
// on server "docs", the user saying text.
func runMCPTurn(t *testing.T, client *fakeMCP, text string) *memStore {
	t.Helper()
	ctx, sessionID := t.Context(), "sess_1"
	tc, err := agentruntime.ParseToolConfig(json.RawMessage(`[{"type":"mcp_toolset","mcp_server_name":"docs",
		"default_config":{"permission_policy":{"type":"always_allow"}}}]`))
	if err != nil {
		t.Fatal(err)
	}
	store := newMemStore()
	core := &agentruntime.Core{Model: modelfake.New(), Store: store, MCP: client}
	agent := &agentruntime.Agent{ID: "agent_1", MCPServers: []agentruntime.MCPServer{{Type: "url", Name: "docs", URL: "https://docs.example/mcp"}}}
	agent.Model.ID = "claude-sonnet-4-5"
	msg := model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: text}}}
	if _, err := core.Run(ctx, &agentruntime.Run{TurnKey: "sevt_t", SessionID: sessionID, Agent: agent, Tools: tc,
		Conversation: []model.Message{msg}, TurnMessages: 1, Unsaved: []agentruntime.TranscriptMessage{{Key: "sevt_t/0", Msg: msg}}}); err != nil {
		t.Fatal(err)
	}
	return store
}

// sessionErrors returns the session.error events' error objects and keys.
func sessionErrors(t *testing.T, s *memStore) (errs []map[string]any, keys []string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.events {
		if e.Type != "session.error" {
			continue
		}
		body, ok := e.Body.(map[string]any)
		if !ok {
			t.Fatalf("session.error body %T, want a map", e.Body)
		}
		errObj, _ := body["error"].(map[string]any)
		errs, keys = append(errs, errObj), append(keys, e.Key)
	}
	return errs, keys
}

// TestMCPDiscoveryAuthFailure: discovery failing authentication is an
// mcp_authentication_failed_error; any other failure stays
// mcp_connection_failed_error. The session id reaches the client.
func TestMCPDiscoveryAuthFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("MCP server https://docs.example/mcp: %w", mcp.ErrAuthFailed), "mcp_authentication_failed_error"},
		{fmt.Errorf("MCP server https://docs.example/mcp: connection refused"), "mcp_connection_failed_error"},
	} {
		client := &fakeMCP{listErr: tc.err}
		store := runMCPTurn(t, client, "hello")
		errs, _ := sessionErrors(t, store)
		if len(errs) != 1 || errs[0]["type"] != tc.want || errs[0]["mcp_server_name"] != "docs" ||
			!strings.Contains(fmt.Sprint(errs[0]["message"]), "docs.example") {
			t.Errorf("discovery failing with %v: session.errors %v, want one %s naming the server", tc.err, errs, tc.want)
		}
		if rs, _ := errs[0]["retry_status"].(map[string]string); rs["type"] != "exhausted" {
			t.Errorf("retry_status = %v, want exhausted", errs[0]["retry_status"])
		}
		if len(client.sessions) == 0 || client.sessions[0] != "sess_1" {
			t.Errorf("client saw sessions %v, want sess_1", client.sessions)
		}
	}
}

// TestMCPCallAuthFailure: a tool call failing authentication is the
// tool's error result and an mcp_authentication_failed_error keyed by the
// tool use; a call failing otherwise adds no session.error.
func TestMCPCallAuthFailure(t *testing.T) {
	t.Parallel()
	authErr := fmt.Errorf("MCP server https://docs.example/mcp: %w", mcp.ErrAuthFailed)
	store := runMCPTurn(t, &fakeMCP{callErr: authErr}, `#tool mcp__docs__echo {}`)
	errs, keys := sessionErrors(t, store)
	if len(errs) != 1 || errs[0]["type"] != "mcp_authentication_failed_error" || errs[0]["mcp_server_name"] != "docs" ||
		!strings.HasPrefix(keys[0], "sevt_t/mcp_auth_failed/docs/") {
		t.Fatalf("session.errors %v (keys %v), want one mcp_authentication_failed_error keyed sevt_t/mcp_auth_failed/docs/<use>", errs, keys)
	}
	var result map[string]any
	store.mu.Lock()
	for _, e := range store.events {
		if e.Type == "agent.mcp_tool_result" {
			result, _ = e.Body.(map[string]any)
		}
	}
	store.mu.Unlock()
	if result == nil || result["is_error"] != true {
		t.Errorf("mcp_tool_result = %v, want an error result", result)
	}

	other := runMCPTurn(t, &fakeMCP{callErr: fmt.Errorf("MCP server https://docs.example/mcp: tools/call echo: boom")}, `#tool mcp__docs__echo {}`)
	if errs, _ := sessionErrors(t, other); len(errs) != 0 {
		t.Errorf("a non-auth call failure added session.errors %v", errs)
	}
}
