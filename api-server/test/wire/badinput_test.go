package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

type rawResponse struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, srv *testserver.Server, method, path, contentType string, body []byte, headers map[string]string) rawResponse {
	t.Helper()
	req, err := http.NewRequest(method, srv.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("x-api-key", srv.APIKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: b}
}

// checkEnvelope asserts the Anthropic error envelope and its request id.
func checkEnvelope(t *testing.T, r rawResponse, status int, errType, msgContains string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var env struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, r.body)
	}
	if env.Type != "error" || env.Error.Type != errType || env.Error.Message == "" {
		t.Fatalf("envelope = %s, want type error / %s with a message", r.body, errType)
	}
	if msgContains != "" && !strings.Contains(env.Error.Message, msgContains) {
		t.Errorf("message %q does not mention %q", env.Error.Message, msgContains)
	}
	if env.RequestID == "" || env.RequestID != r.header.Get("request-id") {
		t.Errorf("request_id %q does not match request-id header %q", env.RequestID, r.header.Get("request-id"))
	}
	if strings.Contains(string(r.body), "goroutine") || strings.Contains(string(r.body), ".go:") {
		t.Errorf("error body leaks internals: %s", r.body)
	}
}

func agentJSON(overrides map[string]any) []byte {
	body := map[string]any{"name": "a", "model": "claude-sonnet-5"}
	for k, v := range overrides {
		if v == nil {
			delete(body, k)
		} else {
			body[k] = v
		}
	}
	b, _ := json.Marshal(body)
	return b
}

func metadataOf(pairs, keyLen, valLen int) map[string]string {
	md := map[string]string{}
	for i := range pairs {
		k := fmt.Sprintf("%02d", i) + strings.Repeat("k", keyLen-2)
		md[k] = strings.Repeat("v", valLen)
	}
	return md
}

func servers(n int) ([]map[string]any, []map[string]any) {
	var srvs, tools []map[string]any
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		srvs = append(srvs, map[string]any{"type": "url", "name": name, "url": "https://mcp.example.com/" + name})
		tools = append(tools, map[string]any{"type": "mcp_toolset", "mcp_server_name": name})
	}
	return srvs, tools
}

func customTool(name string) map[string]any {
	return map[string]any{"type": "custom", "name": name, "description": "d", "input_schema": map[string]any{"type": "object"}}
}

func TestAgentValidation(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	servers20, tools20 := servers(20)
	servers21, tools21 := servers(21)
	tests := []struct {
		name    string
		body    []byte
		ok      bool
		message string
	}{
		{"malformed JSON", []byte(`{"name": "a",`), false, "malformed JSON"},
		{"trailing JSON", []byte(`{"name":"a","model":"m"} {"x":1}`), false, "after the JSON value"},
		{"not an object", []byte(`["a"]`), false, "JSON object"},
		{"unknown field", agentJSON(map[string]any{"colour": "red"}), false, `unknown field "colour"`},
		{"wrong type name", agentJSON(map[string]any{"name": 5}), false, "name"},
		{"wrong type tools", agentJSON(map[string]any{"tools": "bash"}), false, "tools"},
		{"missing name", agentJSON(map[string]any{"name": nil}), false, "name: is required"},
		{"missing model", agentJSON(map[string]any{"model": nil}), false, "model: is required"},
		{"empty name", agentJSON(map[string]any{"name": ""}), false, "name"},
		{"name 256", agentJSON(map[string]any{"name": strings.Repeat("n", 256)}), true, ""},
		{"name 257", agentJSON(map[string]any{"name": strings.Repeat("n", 257)}), false, "at most 256"},
		{"description 2048", agentJSON(map[string]any{"description": strings.Repeat("d", 2048)}), true, ""},
		{"description 2049", agentJSON(map[string]any{"description": strings.Repeat("d", 2049)}), false, "at most 2048"},
		{"system 100000", agentJSON(map[string]any{"system": strings.Repeat("s", 100000)}), true, ""},
		{"system 100001", agentJSON(map[string]any{"system": strings.Repeat("s", 100001)}), false, "at most 100000"},
		{"metadata 16 pairs", agentJSON(map[string]any{"metadata": metadataOf(16, 8, 8)}), true, ""},
		{"metadata 17 pairs", agentJSON(map[string]any{"metadata": metadataOf(17, 8, 8)}), false, "at most 16"},
		{"metadata key 64", agentJSON(map[string]any{"metadata": metadataOf(1, 64, 1)}), true, ""},
		{"metadata key 65", agentJSON(map[string]any{"metadata": metadataOf(1, 65, 1)}), false, "at most 64"},
		{"metadata value 512", agentJSON(map[string]any{"metadata": metadataOf(1, 4, 512)}), true, ""},
		{"metadata value 513", agentJSON(map[string]any{"metadata": metadataOf(1, 4, 513)}), false, "at most 512"},
		{"model object", agentJSON(map[string]any{"model": map[string]any{"id": "m", "speed": "fast", "effort": map[string]any{"type": "low"}}}), true, ""},
		{"model bad speed", agentJSON(map[string]any{"model": map[string]any{"id": "m", "speed": "warp"}}), false, "model.speed"},
		{"model bad effort", agentJSON(map[string]any{"model": map[string]any{"id": "m", "effort": "extreme"}}), false, "model.effort"},
		{"model number", agentJSON(map[string]any{"model": 7}), false, "model"},
		{"20 mcp servers", agentJSON(map[string]any{"mcp_servers": servers20, "tools": tools20}), true, ""},
		{"21 mcp servers", agentJSON(map[string]any{"mcp_servers": servers21, "tools": tools21}), false, "at most 20"},
		{"duplicate mcp server", agentJSON(map[string]any{"mcp_servers": []any{servers20[0], servers20[0]}, "tools": tools20[:1]}), false, "duplicate"},
		{"mcp server ftp url", agentJSON(map[string]any{"mcp_servers": []any{map[string]any{"type": "url", "name": "s0", "url": "ftp://x"}}, "tools": tools20[:1]}), false, "http(s)"},
		{"unreferenced mcp server", agentJSON(map[string]any{"mcp_servers": servers20[:1]}), false, "not referenced"},
		{"toolset without server", agentJSON(map[string]any{"tools": tools20[:1]}), false, "no mcp_servers entry"},
		{"custom name 128", agentJSON(map[string]any{"tools": []any{customTool(strings.Repeat("t", 128))}}), true, ""},
		{"custom name 129", agentJSON(map[string]any{"tools": []any{customTool(strings.Repeat("t", 129))}}), false, "must match"},
		{"custom name chars", agentJSON(map[string]any{"tools": []any{customTool("bad name")}}), false, "must match"},
		{"custom schema not object", agentJSON(map[string]any{"tools": []any{map[string]any{"type": "custom", "name": "x", "description": "d", "input_schema": map[string]any{"type": "string"}}}}), false, "input_schema.type"},
		{"duplicate custom", agentJSON(map[string]any{"tools": []any{customTool("x"), customTool("x")}}), false, "duplicate"},
		{"unknown tool type", agentJSON(map[string]any{"tools": []any{map[string]any{"type": "laser"}}}), false, "unknown tool type"},
		{"unknown builtin", agentJSON(map[string]any{"tools": []any{map[string]any{"type": "agent_toolset_20260401", "configs": []any{map[string]any{"name": "teleport"}}}}}), false, "unknown built-in tool"},
		{"bad policy", agentJSON(map[string]any{"tools": []any{map[string]any{"type": "agent_toolset_20260401", "default_config": map[string]any{"permission_policy": map[string]any{"type": "sometimes"}}}}}), false, "always_allow or always_ask"},
		{"web_fetch always_ask", agentJSON(map[string]any{"tools": []any{map[string]any{"type": "agent_toolset_20260401", "configs": []any{map[string]any{"name": "web_fetch", "permission_policy": map[string]any{"type": "always_ask"}}}}}}), false, "only always_allow"},
		{"web_search always_allow", agentJSON(map[string]any{"tools": []any{map[string]any{"type": "agent_toolset_20260401", "configs": []any{map[string]any{"name": "web_search", "permission_policy": map[string]any{"type": "always_allow"}}}}}}), true, ""},
		{"toolset twice", agentJSON(map[string]any{"tools": []any{map[string]any{"type": "agent_toolset_20260401"}, map[string]any{"type": "agent_toolset_20260401"}}}), false, "only once"},
		{"version on create", agentJSON(map[string]any{"version": 1}), false, "version"},
		{"multiagent without agents", agentJSON(map[string]any{"multiagent": map[string]any{"type": "coordinator"}}), false, "multiagent.agents"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := do(t, srv, http.MethodPost, "/v1/agents", "application/json", tc.body, nil)
			if tc.ok {
				if r.status != http.StatusOK {
					t.Fatalf("status = %d, want 200: %s", r.status, r.body)
				}
				return
			}
			checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", tc.message)
		})
	}
}

func TestAgentUpdateValidation(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	r := do(t, srv, http.MethodPost, "/v1/agents", "application/json", agentJSON(nil), nil)
	if r.status != http.StatusOK {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created struct{ ID string }
	_ = json.Unmarshal(r.body, &created)
	path := "/v1/agents/" + created.ID
	tests := []struct {
		name    string
		body    string
		message string
	}{
		{"clear name", `{"name": null}`, "cannot be cleared"},
		{"clear model", `{"model": null}`, "cannot be cleared"},
		{"version zero", `{"version": 0}`, "at least 1"},
		{"version string", `{"version": "1"}`, "version"},
		{"unknown field", `{"nmae": "x"}`, `unknown field "nmae"`},
		{"metadata overflow", `{"metadata": ` + string(mustJSON(metadataOf(17, 4, 4))) + `}`, "at most 16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, srv, http.MethodPost, path, "application/json", []byte(tc.body), nil)
			checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", tc.message)
		})
	}
	// Clearing description and system with null works.
	r = do(t, srv, http.MethodPost, path, "application/json", []byte(`{"description":"d","system":"s"}`), nil)
	if r.status != http.StatusOK {
		t.Fatalf("set description: %d %s", r.status, r.body)
	}
	r = do(t, srv, http.MethodPost, path, "application/json", []byte(`{"description":null,"system":""}`), nil)
	var got struct {
		Description string `json:"description"`
		System      string `json:"system"`
		Version     int    `json:"version"`
	}
	_ = json.Unmarshal(r.body, &got)
	if r.status != http.StatusOK || got.Description != "" || got.System != "" || got.Version != 3 {
		t.Fatalf("clear description/system: %d %s", r.status, r.body)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestEnvironmentValidation(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	tests := []struct {
		name    string
		body    string
		ok      bool
		message string
	}{
		{"minimal", `{"name":"e1"}`, true, ""},
		{"missing name", `{}`, false, "name: is required"},
		{"name 256", `{"name":"` + strings.Repeat("n", 256) + `"}`, true, ""},
		{"name 257", `{"name":"` + strings.Repeat("n", 257) + `"}`, false, "at most 256"},
		{"unknown config type", `{"name":"e2","config":{"type":"moon"}}`, false, "config.type"},
		{"bad networking", `{"name":"e3","config":{"type":"cloud","networking":{"type":"some"}}}`, false, "config.networking.type"},
		{"host is URL", `{"name":"e4","config":{"type":"cloud","networking":{"type":"limited","allowed_hosts":["https://x.com/"]}}}`, false, "allowed_hosts[0]"},
		{"packages with registries closed after install", `{"name":"e5","config":{"type":"cloud","networking":{"type":"limited"},"packages":{"pip":["x"]}}}`, true, ""},
		{"package with shell syntax", `{"name":"e5b","config":{"type":"cloud","packages":{"pip":["x; rm -rf /"]}}}`, false, "packages.pip[0]"},
		{"unknown package manager", `{"name":"e6","config":{"type":"cloud","packages":{"brew":["x"]}}}`, false, `unknown field "brew"`},
		{"unrestricted with hosts", `{"name":"e7","config":{"type":"cloud","networking":{"type":"unrestricted","allowed_hosts":["a.com"]}}}`, false, "only to type limited"},
		{"bad scope", `{"name":"e8","scope":"galaxy"}`, false, "scope"},
		{"metadata 17", `{"name":"e9","metadata":` + string(mustJSON(metadataOf(17, 4, 4))) + `}`, false, "at most 16"},
		{"wrong type", `{"name":["e10"]}`, false, "name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, srv, http.MethodPost, "/v1/environments", "application/json", []byte(tc.body), nil)
			if tc.ok {
				if r.status != http.StatusOK {
					t.Fatalf("status = %d, want 200: %s", r.status, r.body)
				}
				return
			}
			checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", tc.message)
		})
	}
}

func TestProtocolErrors(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	body := agentJSON(nil)

	t.Run("missing key", func(t *testing.T) {
		r := do(t, srv, http.MethodGet, "/v1/agents", "", nil, map[string]string{"x-api-key": ""})
		checkEnvelope(t, r, http.StatusUnauthorized, "authentication_error", "missing API key")
	})
	t.Run("wrong key", func(t *testing.T) {
		r := do(t, srv, http.MethodGet, "/v1/agents", "", nil, map[string]string{"x-api-key": "nope-nope-nope-nope"})
		checkEnvelope(t, r, http.StatusUnauthorized, "authentication_error", "invalid API key")
	})
	t.Run("bearer key", func(t *testing.T) {
		r := do(t, srv, http.MethodGet, "/v1/agents", "", nil, map[string]string{"x-api-key": "", "Authorization": "Bearer " + srv.APIKey})
		if r.status != http.StatusOK {
			t.Fatalf("bearer auth: %d %s", r.status, r.body)
		}
	})
	t.Run("wrong bearer", func(t *testing.T) {
		r := do(t, srv, http.MethodGet, "/v1/agents", "", nil, map[string]string{"x-api-key": "", "Authorization": "Bearer wrong"})
		checkEnvelope(t, r, http.StatusUnauthorized, "authentication_error", "")
	})
	t.Run("wrong content type", func(t *testing.T) {
		r := do(t, srv, http.MethodPost, "/v1/agents", "text/plain", body, nil)
		checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "Content-Type")
	})
	t.Run("missing content type", func(t *testing.T) {
		r := do(t, srv, http.MethodPost, "/v1/agents", "", body, nil)
		checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "Content-Type")
	})
	t.Run("empty body", func(t *testing.T) {
		r := do(t, srv, http.MethodPost, "/v1/agents", "application/json", nil, nil)
		checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "empty")
	})
	for _, path := range []string{"/v1/agents/agent_0000000000000000000000AB", "/v1/agents/agent_0000000000000000000000AB/versions", "/v1/environments/env_0000000000000000000000AB"} {
		t.Run("unknown id "+path, func(t *testing.T) {
			r := do(t, srv, http.MethodGet, path, "", nil, nil)
			checkEnvelope(t, r, http.StatusNotFound, "not_found_error", "not found")
		})
	}
	for _, path := range []string{"/v1/agents/nonsense", "/v1/agents/env_0000000000000000000000AB", "/v1/environments/agent_x", "/v1/environments/%27%3B--"} {
		t.Run("malformed id "+path, func(t *testing.T) {
			r := do(t, srv, http.MethodGet, path, "", nil, nil)
			checkEnvelope(t, r, http.StatusNotFound, "not_found_error", "not found")
		})
	}
	t.Run("unknown route", func(t *testing.T) {
		r := do(t, srv, http.MethodGet, "/v1/nothing", "", nil, nil)
		checkEnvelope(t, r, http.StatusNotFound, "not_found_error", "")
	})
	t.Run("bad list params", func(t *testing.T) {
		for _, q := range []string{"limit=0", "limit=101", "limit=x", "page=%%%", "page=bm9wZQ", "include_archived=maybe", "created_at[gte]=yesterday"} {
			r := do(t, srv, http.MethodGet, "/v1/agents?"+q, "", nil, nil)
			checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "")
		}
	})
	t.Run("40 MiB body", func(t *testing.T) {
		big := make([]byte, 40<<20)
		copy(big, `{"name":"`)
		for i := 9; i < len(big)-2; i++ {
			big[i] = 'x'
		}
		copy(big[len(big)-2:], `"}`)
		r := do(t, srv, http.MethodPost, "/v1/agents", "application/json", big, nil)
		checkEnvelope(t, r, http.StatusRequestEntityTooLarge, "request_too_large", "")
		// The server keeps serving.
		r = do(t, srv, http.MethodPost, "/v1/agents", "application/json", body, nil)
		if r.status != http.StatusOK {
			t.Fatalf("after the oversized request: %d %s", r.status, r.body)
		}
	})
	t.Run("anthropic-beta and beta=true accepted", func(t *testing.T) {
		r := do(t, srv, http.MethodGet, "/v1/agents?beta=true", "", nil, map[string]string{"anthropic-beta": "managed-agents-2026-04-01", "anthropic-version": "2099-01-01"})
		if r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	})
}
