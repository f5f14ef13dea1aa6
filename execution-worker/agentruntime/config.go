// Package agentruntime runs agent turns: AgentRuntime.Run receives one
// trigger, the session's immutable agent snapshot, the conversation
// projected from its transcript, the parsed tool configuration and a way
// to reach the session's sandbox, and drives the model until the turn ends
// or needs the client.
//
// The default AgentCore sends alternating messages to the model client,
// streams assistant text as an optional preview, emits each complete event
// (agent.message, agent.thinking, agent.tool_use, agent.tool_result,
// agent.mcp_tool_use, agent.mcp_tool_result, agent.custom_tool_use,
// span.model_request_start/end), executes allowed built-ins in the sandbox
// and MCP tools on their servers and feeds their results back, and repeats until
// the model ends the turn, a tool needs the client (custom tools and
// always_ask tools park the session), or MaxRounds model calls were made.
//
// Every effect is keyed deterministically by the turn and the position in
// it, and every message is recorded in the provider transcript as it is
// produced, so a retried run resumes where the previous attempt stopped
// instead of repeating it.
package agentruntime

import (
	"encoding/json"
	"fmt"
)

// Agent is the part of the session's agent snapshot a turn needs.
type Agent struct {
	ID      string `json:"id"`
	Version int64  `json:"version"`
	System  string `json:"system"`
	Model   struct {
		ID string `json:"id"`
	} `json:"model"`
	Tools      json.RawMessage `json:"tools"`
	MCPServers []MCPServer     `json:"mcp_servers"`
}

// MCPServer is a remote MCP server of the agent.
type MCPServer struct {
	Type string `json:"type"`
	Name string `json:"name"`
	URL  string `json:"url"`
}

// Permission policies.
const (
	AlwaysAllow = "always_allow"
	AlwaysAsk   = "always_ask"
)

// ToolConfig is the parsed tool configuration of an agent.
type ToolConfig struct {
	// Builtins maps enabled sandbox built-ins (bash, read, ...) to their
	// permission policy.
	Builtins map[string]string
	// Web lists enabled server tools (web_fetch, web_search).
	Web []string
	// Custom are client-executed tools by name.
	Custom map[string]CustomTool
	// Order keeps the declaration order of custom tools.
	Order []string
	// MCP are the MCP toolsets, in declaration order.
	MCP []MCPToolset
}

// MCPToolset enables the tools of one MCP server, discovered per session.
type MCPToolset struct {
	Server string
	// DefaultEnabled and DefaultPolicy apply to tools without a config.
	DefaultEnabled bool
	DefaultPolicy  string
	// Configs override them per tool name.
	Configs map[string]ToolSetting
}

// ToolSetting is one tool's configuration.
type ToolSetting struct {
	Enabled bool
	Policy  string
}

// Setting returns whether tool is enabled and its permission policy.
func (ts *MCPToolset) Setting(tool string) ToolSetting {
	if c, ok := ts.Configs[tool]; ok {
		return c
	}
	return ToolSetting{Enabled: ts.DefaultEnabled, Policy: ts.DefaultPolicy}
}

// CustomTool is a client-executed tool.
type CustomTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

var sandboxBuiltins = map[string]bool{"bash": true, "read": true, "write": true, "edit": true, "glob": true, "grep": true}

// ParseToolConfig parses the resolved tools of an agent snapshot (as the
// api-server stores them: every built-in listed with its resolved config).
func ParseToolConfig(raw json.RawMessage) (*ToolConfig, error) {
	tc := &ToolConfig{Builtins: map[string]string{}, Custom: map[string]CustomTool{}}
	if len(raw) == 0 || string(raw) == "null" {
		return tc, nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("parse agent tools: %w", err)
	}
	for _, e := range entries {
		var probe struct {
			Type    string `json:"type"`
			Configs []struct {
				Name             string `json:"name"`
				Enabled          bool   `json:"enabled"`
				PermissionPolicy struct {
					Type string `json:"type"`
				} `json:"permission_policy"`
			} `json:"configs"`
		}
		if err := json.Unmarshal(e, &probe); err != nil {
			return nil, fmt.Errorf("parse agent tool: %w", err)
		}
		switch probe.Type {
		case "agent_toolset_20260401":
			for _, c := range probe.Configs {
				if !c.Enabled {
					continue
				}
				switch {
				case sandboxBuiltins[c.Name]:
					tc.Builtins[c.Name] = c.PermissionPolicy.Type
				case c.Name == "web_fetch" || c.Name == "web_search":
					tc.Web = append(tc.Web, c.Name)
				}
			}
		case "custom":
			var ct CustomTool
			if err := json.Unmarshal(e, &ct); err != nil {
				return nil, fmt.Errorf("parse custom tool: %w", err)
			}
			tc.Custom[ct.Name] = ct
			tc.Order = append(tc.Order, ct.Name)
		case "mcp_toolset":
			ts, err := parseMCPToolset(e)
			if err != nil {
				return nil, err
			}
			tc.MCP = append(tc.MCP, ts)
		}
	}
	return tc, nil
}

// parseMCPToolset parses an mcp_toolset entry. Without a default_config,
// tools are enabled and always_ask, as the API resolves them.
func parseMCPToolset(raw json.RawMessage) (MCPToolset, error) {
	type setting struct {
		Name             string `json:"name"`
		Enabled          *bool  `json:"enabled"`
		PermissionPolicy *struct {
			Type string `json:"type"`
		} `json:"permission_policy"`
	}
	var in struct {
		Server  string    `json:"mcp_server_name"`
		Default *setting  `json:"default_config"`
		Configs []setting `json:"configs"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return MCPToolset{}, fmt.Errorf("parse mcp_toolset: %w", err)
	}
	ts := MCPToolset{Server: in.Server, DefaultEnabled: true, DefaultPolicy: AlwaysAsk, Configs: map[string]ToolSetting{}}
	if d := in.Default; d != nil {
		if d.Enabled != nil {
			ts.DefaultEnabled = *d.Enabled
		}
		if d.PermissionPolicy != nil && d.PermissionPolicy.Type != "" {
			ts.DefaultPolicy = d.PermissionPolicy.Type
		}
	}
	for _, c := range in.Configs {
		st := ToolSetting{Enabled: ts.DefaultEnabled, Policy: ts.DefaultPolicy}
		if c.Enabled != nil {
			st.Enabled = *c.Enabled
		}
		if c.PermissionPolicy != nil && c.PermissionPolicy.Type != "" {
			st.Policy = c.PermissionPolicy.Type
		}
		ts.Configs[c.Name] = st
	}
	return ts, nil
}

// NeedsSandbox reports whether the configuration has tools that run in the
// sandbox: only then is one provisioned.
func (tc *ToolConfig) NeedsSandbox() bool { return len(tc.Builtins) > 0 }

// BuiltinNames returns the enabled sandbox built-ins in a stable order.
func (tc *ToolConfig) BuiltinNames() []string {
	var out []string
	for _, n := range []string{"bash", "read", "write", "edit", "glob", "grep"} {
		if _, ok := tc.Builtins[n]; ok {
			out = append(out, n)
		}
	}
	return out
}
