// Package agentspec validates Agent requests and resolves them into the
// complete, immutable definition stored as an agent version.
//
// The rules follow the public Managed Agents API: field limits, model as a
// string or object, the agent_toolset_20260401 built-in toolset with
// per-tool configs and permission policies, custom tools, and mcp_toolset
// entries that must each match exactly one mcp_servers entry. Responses
// always carry fully resolved tool configurations.
package agentspec

import (
	"encoding/json"
)

// Limits of the public API.
const (
	MaxNameLen        = 256
	MaxDescriptionLen = 2048
	MaxSystemLen      = 100_000
	MaxMetadataPairs  = 16
	MaxMetadataKeyLen = 64
	MaxMetadataValLen = 512
	MaxMCPServers     = 20
	MaxTools          = 256
	MaxSkills         = 64
	MaxModelIDLen     = 256
)

// ToolsetType is the type of the built-in toolset.
const ToolsetType = "agent_toolset_20260401"

// Built-in tool names of agent_toolset_20260401, in the order responses
// list them.
var BuiltinTools = []string{"bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search"}

// Permission policy types.
const (
	AlwaysAllow = "always_allow"
	AlwaysAsk   = "always_ask"
)

// Spec is the resolved definition of one agent version: everything a
// client reads back except identity and timestamps.
type Spec struct {
	Name              string            `json:"name"`
	Description       string            `json:"description"`
	System            string            `json:"system"`
	Model             Model             `json:"model"`
	Tools             []Tool            `json:"tools"`
	MCPServers        []MCPServer       `json:"mcp_servers"`
	Metadata          map[string]string `json:"metadata"`
	Skills            []Skill           `json:"skills"`
	ExecutionIdentity ExecutionIdentity `json:"execution_identity"`
	Multiagent        json.RawMessage   `json:"multiagent"`
}

// Model is the resolved model configuration.
type Model struct {
	ID           string  `json:"id"`
	Speed        string  `json:"speed"`
	Effort       *Effort `json:"effort,omitempty"`
	InferenceGeo string  `json:"inference_geo,omitempty"`
}

// Effort is a model effort level.
type Effort struct {
	Type string `json:"type"`
}

// Policy is a tool permission policy.
type Policy struct {
	Type string `json:"type"`
}

// ToolDefault is a toolset's default configuration.
type ToolDefault struct {
	Enabled          bool   `json:"enabled"`
	PermissionPolicy Policy `json:"permission_policy"`
}

// BuiltinConfig is the resolved configuration of one built-in tool.
type BuiltinConfig struct {
	Name             string          `json:"name"`
	Type             string          `json:"type"`
	Enabled          bool            `json:"enabled"`
	PermissionPolicy Policy          `json:"permission_policy"`
	AllowedDomains   []string        `json:"allowed_domains,omitempty"`
	BlockedDomains   []string        `json:"blocked_domains,omitempty"`
	MaxContentTokens *int64          `json:"max_content_tokens,omitempty"`
	URLSources       json.RawMessage `json:"url_sources,omitempty"`
	UserLocation     json.RawMessage `json:"user_location,omitempty"`
}

// MCPToolConfig is the resolved configuration of one MCP tool.
type MCPToolConfig struct {
	Name             string `json:"name"`
	Enabled          bool   `json:"enabled"`
	PermissionPolicy Policy `json:"permission_policy"`
}

// Tool is one entry of an agent's tools: exactly one field is set.
type Tool struct {
	Toolset *AgentToolset
	MCP     *MCPToolset
	Custom  *CustomTool
}

// AgentToolset is the resolved agent_toolset_20260401.
type AgentToolset struct {
	Type          string          `json:"type"`
	DefaultConfig ToolDefault     `json:"default_config"`
	Configs       []BuiltinConfig `json:"configs"`
}

// MCPToolset is a resolved mcp_toolset.
type MCPToolset struct {
	Type          string          `json:"type"`
	MCPServerName string          `json:"mcp_server_name"`
	DefaultConfig ToolDefault     `json:"default_config"`
	Configs       []MCPToolConfig `json:"configs"`
}

// CustomTool is a client-executed tool.
type CustomTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// MarshalJSON writes the set variant.
func (t Tool) MarshalJSON() ([]byte, error) {
	switch {
	case t.Toolset != nil:
		return json.Marshal(t.Toolset)
	case t.MCP != nil:
		return json.Marshal(t.MCP)
	default:
		return json.Marshal(t.Custom)
	}
}

// UnmarshalJSON reads a stored, already validated tool.
func (t *Tool) UnmarshalJSON(data []byte) error {
	var probe struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return err
	}
	switch probe.Type {
	case ToolsetType:
		t.Toolset = new(AgentToolset)
		return json.Unmarshal(data, t.Toolset)
	case "mcp_toolset":
		t.MCP = new(MCPToolset)
		return json.Unmarshal(data, t.MCP)
	default:
		t.Custom = new(CustomTool)
		return json.Unmarshal(data, t.Custom)
	}
}

// MCPServer is an MCP server the agent may connect to.
type MCPServer struct {
	Type string `json:"type"`
	Name string `json:"name"`
	URL  string `json:"url"`
}

// Skill is a skill reference.
type Skill struct {
	Type    string `json:"type"`
	SkillID string `json:"skill_id"`
	Version string `json:"version"`
}

// ExecutionIdentity is the principal runs execute as.
type ExecutionIdentity struct {
	Type    string `json:"type"`
	RoleARN string `json:"role_arn,omitempty"`
}
