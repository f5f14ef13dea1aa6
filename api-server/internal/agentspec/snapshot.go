package agentspec

import (
	"encoding/json"
	"fmt"

	"github.com/mangohq/mango/api-server/internal/jsonx"
)

// Snapshot is a session's immutable copy of an agent version: the agent's
// definition without its metadata, as sessions return it. Tools and MCP
// servers may still change while the session is idle.
type Snapshot struct {
	Type              string            `json:"type"`
	ID                string            `json:"id"`
	Version           int64             `json:"version"`
	Name              string            `json:"name"`
	Description       string            `json:"description"`
	System            string            `json:"system"`
	Model             Model             `json:"model"`
	Tools             []Tool            `json:"tools"`
	MCPServers        []MCPServer       `json:"mcp_servers"`
	Skills            []Skill           `json:"skills"`
	ExecutionIdentity ExecutionIdentity `json:"execution_identity"`
	Multiagent        json.RawMessage   `json:"multiagent"`
}

// SnapshotOf returns the snapshot of one agent version.
func SnapshotOf(id string, version int64, s *Spec) *Snapshot {
	return &Snapshot{Type: "agent", ID: id, Version: version, Name: s.Name, Description: s.Description, System: s.System,
		Model: s.Model, Tools: s.Tools, MCPServers: s.MCPServers, Skills: s.Skills, ExecutionIdentity: s.ExecutionIdentity,
		Multiagent: s.Multiagent}
}

func (sn *Snapshot) spec() *Spec {
	return &Spec{Name: sn.Name, Description: sn.Description, System: sn.System, Model: sn.Model, Tools: sn.Tools,
		MCPServers: sn.MCPServers, Metadata: map[string]string{}, Skills: sn.Skills, ExecutionIdentity: sn.ExecutionIdentity,
		Multiagent: sn.Multiagent}
}

// AgentRef is a session's agent member: an id string, {"type":"agent"} or
// {"type":"agent_with_overrides"}.
type AgentRef struct {
	ID      string
	Version int64 // 0: the current version
	// Overrides holds the agent_with_overrides members (system, model,
	// tools, mcp_servers, skills), nil without overrides.
	Overrides *Input
}

// ParseAgentRef decodes a session's agent member.
func ParseAgentRef(raw json.RawMessage) (*AgentRef, error) {
	var id string
	if err := json.Unmarshal(raw, &id); err == nil {
		if id == "" {
			return nil, jsonx.Errorf("agent", "must not be empty")
		}
		return &AgentRef{ID: id}, nil
	}
	if err := jsonx.Object(raw, "agent"); err != nil {
		return nil, jsonx.Errorf("agent", "expected an agent id string or an object")
	}
	typ, err := jsonx.TypeOf(raw)
	if err != nil {
		return nil, jsonx.Errorf("agent", "%v", err)
	}
	switch typ {
	case "agent":
		var in struct {
			Type    string `json:"type"`
			ID      string `json:"id"`
			Version *int64 `json:"version"`
		}
		if err := jsonx.Decode(raw, &in, "agent"); err != nil {
			return nil, err
		}
		return refOf(in.ID, in.Version, nil)
	case "agent_with_overrides":
		var in struct {
			Type       string                       `json:"type"`
			ID         string                       `json:"id"`
			Version    *int64                       `json:"version"`
			System     jsonx.Opt[string]            `json:"system"`
			Model      jsonx.Opt[json.RawMessage]   `json:"model"`
			Tools      jsonx.Opt[[]json.RawMessage] `json:"tools"`
			MCPServers jsonx.Opt[[]json.RawMessage] `json:"mcp_servers"`
			Skills     jsonx.Opt[[]json.RawMessage] `json:"skills"`
		}
		if err := jsonx.Decode(raw, &in, "agent"); err != nil {
			return nil, err
		}
		return refOf(in.ID, in.Version, &Input{System: in.System, Model: in.Model, Tools: in.Tools, MCPServers: in.MCPServers, Skills: in.Skills})
	case "":
		return nil, jsonx.Errorf("agent.type", "is required (agent or agent_with_overrides)")
	}
	return nil, jsonx.Errorf("agent.type", "must be \"agent\" or \"agent_with_overrides\", got %q", typ)
}

func refOf(id string, version *int64, overrides *Input) (*AgentRef, error) {
	if id == "" {
		return nil, jsonx.Errorf("agent.id", "is required")
	}
	r := &AgentRef{ID: id, Overrides: overrides}
	if version != nil {
		if *version < 1 {
			return nil, jsonx.Errorf("agent.version", "must be at least 1")
		}
		r.Version = *version
	}
	return r, nil
}

// Resolve builds the session snapshot of agent version spec, applying the
// reference's overrides.
func (r *AgentRef) Resolve(id string, version int64, spec *Spec) (*Snapshot, error) {
	if r.Overrides == nil {
		return SnapshotOf(id, version, spec), nil
	}
	s, err := Update(spec, r.Overrides)
	if err != nil {
		return nil, prefixAgent(err)
	}
	return SnapshotOf(id, version, s), nil
}

// UpdateTools applies a session update's agent member (tools and
// mcp_servers, full replacements) to a snapshot.
func (sn *Snapshot) UpdateTools(raw json.RawMessage) (*Snapshot, error) {
	var in struct {
		Tools      jsonx.Opt[[]json.RawMessage] `json:"tools"`
		MCPServers jsonx.Opt[[]json.RawMessage] `json:"mcp_servers"`
	}
	if err := jsonx.Decode(raw, &in, "agent"); err != nil {
		return nil, err
	}
	next, err := Update(sn.spec(), &Input{Tools: in.Tools, MCPServers: in.MCPServers})
	if err != nil {
		return nil, prefixAgent(err)
	}
	out := SnapshotOf(sn.ID, sn.Version, next)
	return out, nil
}

func prefixAgent(err error) error {
	if je, ok := err.(*jsonx.Error); ok {
		return &jsonx.Error{Message: "agent." + je.Message}
	}
	return fmt.Errorf("agent: %w", err)
}
