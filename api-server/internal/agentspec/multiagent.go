package agentspec

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/mangohq/mango/api-server/internal/jsonx"
)

// Multiagent configuration types.
const (
	// Coordinator is the coordinator topology: the primary thread spawns
	// session threads running agents of its roster.
	Coordinator = "coordinator"
	// Multiagent20261001 is the configuration with three members
	// (subagents, advisor, workflows), each enabled or disabled.
	Multiagent20261001 = "multiagent_20261001"
)

// MaxRoster is the most agents a coordinator roster or a predefined_agents
// list may name.
const MaxRoster = 20

// maxAgentIDLen bounds an agent id a roster names before it is looked up.
const maxAgentIDLen = 256

// Roster entry types and member states.
const (
	EntryAgent = "agent"
	EntrySelf  = "self"
	Enabled    = "enabled"
	Disabled   = "disabled"
)

// Multiagent is a parsed multiagent configuration, stored normalized in
// Spec.Multiagent:
//
//	{"type":"coordinator","agents":[{"type":"agent","id":"agent_…","version":3},…]}
//	{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[…],
//	 "inline_agents":{"type":"disabled"}},"advisor":{"type":"disabled"},"workflows":{"type":"disabled"}}
//
// Parsing checks the shape only. Agent entries without a version and self
// entries are pinned when a version is written (httpapi resolves them
// against the stored agents: self becomes the owner's id at the version
// being written).
type Multiagent struct {
	Type string `json:"type"`
	// Agents is the coordinator roster.
	Agents    []RosterEntry `json:"agents,omitempty"`
	Subagents *Subagents    `json:"subagents,omitempty"`
	Advisor   *Toggle       `json:"advisor,omitempty"`
	Workflows *Toggle       `json:"workflows,omitempty"`
}

// RosterEntry is an agent a configuration names: {"type":"agent"} with an
// id and a version, or {"type":"self"}, the agent that owns the
// configuration. Version 0 is not pinned yet: the agent's latest version
// when the configuration is saved.
type RosterEntry struct {
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	Version int64  `json:"version,omitempty"`
}

// Subagents is the subagents member of multiagent_20261001. When enabled,
// PredefinedAgents names at least one agent and InlineAgents is disabled
// (this server does not build inline agents).
type Subagents struct {
	Type             string        `json:"type"`
	PredefinedAgents []RosterEntry `json:"predefined_agents,omitempty"`
	InlineAgents     *Toggle       `json:"inline_agents,omitempty"`
}

// Toggle is a member that is only enabled or disabled here: advisor,
// workflows and inline_agents, always disabled on this server.
type Toggle struct {
	Type string `json:"type"`
}

// RosterRef is one roster entry with the member path errors name.
type RosterRef struct {
	Path  string
	Entry *RosterEntry
	// Predefined reports an entry of subagents.predefined_agents.
	Predefined bool
}

// Entries returns the roster entries of m in order, for resolution.
func (m *Multiagent) Entries() []RosterRef {
	var out []RosterRef
	for i := range m.Agents {
		out = append(out, RosterRef{Path: fmt.Sprintf("multiagent.agents[%d]", i), Entry: &m.Agents[i]})
	}
	if m.Subagents != nil {
		for i := range m.Subagents.PredefinedAgents {
			out = append(out, RosterRef{Path: fmt.Sprintf("multiagent.subagents.predefined_agents[%d]", i),
				Entry: &m.Subagents.PredefinedAgents[i], Predefined: true})
		}
	}
	return out
}

// ParseMultiagent decodes a stored configuration; nil for null.
func ParseMultiagent(raw json.RawMessage) (*Multiagent, error) {
	if isNull(raw) {
		return nil, nil
	}
	m := new(Multiagent)
	if err := json.Unmarshal(raw, m); err != nil {
		return nil, fmt.Errorf("agentspec: decode stored multiagent: %w", err)
	}
	return m, nil
}

// Marshal encodes m in its stored form ("null" for nil).
func (m *Multiagent) Marshal() json.RawMessage {
	if m == nil {
		return json.RawMessage("null")
	}
	b, _ := json.Marshal(m) // plain strings and integers always encode
	return b
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// mergeMultiagent applies a sent, non-null multiagent to the stored one:
// a coordinator replaces it; a multiagent_20261001 is merged level by level
// into a stored multiagent_20261001 and otherwise starts from the defaults.
func mergeMultiagent(stored, sent json.RawMessage) (json.RawMessage, error) {
	typ, err := jsonx.ObjectType(sent, "multiagent")
	if err != nil {
		return nil, err
	}
	var m *Multiagent
	switch typ {
	case Coordinator:
		m, err = parseCoordinator(sent)
	case Multiagent20261001:
		base, perr := ParseMultiagent(stored)
		if perr != nil {
			return nil, perr
		}
		m, err = merge20261001(base, sent)
	case "":
		return nil, jsonx.Errorf("multiagent.type", "is required (%q or %q)", Coordinator, Multiagent20261001)
	default:
		return nil, jsonx.Errorf("multiagent.type", "must be %q or %q, got %q", Coordinator, Multiagent20261001, typ)
	}
	if err != nil {
		return nil, err
	}
	return m.Marshal(), nil
}

func parseCoordinator(raw json.RawMessage) (*Multiagent, error) {
	var in struct {
		Type   string             `json:"type"`
		Agents *[]json.RawMessage `json:"agents"`
	}
	if err := jsonx.Decode(raw, &in, "multiagent"); err != nil {
		return nil, err
	}
	if in.Agents == nil {
		return nil, jsonx.Errorf("multiagent.agents", "is required (1 to %d agents)", MaxRoster)
	}
	if n := len(*in.Agents); n < 1 || n > MaxRoster {
		return nil, jsonx.Errorf("multiagent.agents", "must name 1 to %d agents, got %d", MaxRoster, n)
	}
	agents, err := parseRoster(*in.Agents, "multiagent.agents", true)
	if err != nil {
		return nil, err
	}
	return &Multiagent{Type: Coordinator, Agents: agents}, nil
}

// defaults20261001 is multiagent_20261001 with every member at its
// default. Subagents default to enabled as in the public API; inline
// agents, the advisor and workflows default to disabled here (the public
// API enables inline agents and workflows by default), because this
// server builds none of them.
func defaults20261001() *Multiagent {
	return &Multiagent{Type: Multiagent20261001, Subagents: defaultSubagents(),
		Advisor: &Toggle{Type: Disabled}, Workflows: &Toggle{Type: Disabled}}
}

func defaultSubagents() *Subagents {
	return &Subagents{Type: Enabled, PredefinedAgents: []RosterEntry{}, InlineAgents: &Toggle{Type: Disabled}}
}

// merge20261001 applies a sent multiagent_20261001 to base (the stored
// configuration, merged into only when it has the same type): an omitted
// member keeps its stored value, null takes the default, an object of
// another type replaces the stored one. Validation applies to the result.
func merge20261001(base *Multiagent, raw json.RawMessage) (*Multiagent, error) {
	var in struct {
		Type      string                     `json:"type"`
		Subagents jsonx.Opt[json.RawMessage] `json:"subagents"`
		Advisor   jsonx.Opt[json.RawMessage] `json:"advisor"`
		Workflows jsonx.Opt[json.RawMessage] `json:"workflows"`
	}
	if err := jsonx.Decode(raw, &in, "multiagent"); err != nil {
		return nil, err
	}
	m := defaults20261001()
	if base != nil && base.Type == Multiagent20261001 {
		m = base
	}
	if err := applyAdvisor(m, in.Advisor); err != nil {
		return nil, err
	}
	if err := applyWorkflows(m, in.Workflows); err != nil {
		return nil, err
	}
	if err := applySubagents(m, in.Subagents); err != nil {
		return nil, err
	}
	if s := m.Subagents; s.Type == Enabled && len(s.PredefinedAgents) == 0 {
		return nil, jsonx.Errorf("multiagent.subagents.predefined_agents",
			"must name at least one agent when subagents are enabled (inline agents are not supported by this server); or send subagents {\"type\":\"disabled\"}")
	}
	return m, nil
}

func applyAdvisor(m *Multiagent, sent jsonx.Opt[json.RawMessage]) error {
	if !sent.Set {
		return nil
	}
	t, err := parseDisabledOnly(sent, "multiagent.advisor", "the advisor is not supported by this server",
		struct {
			Type  string  `json:"type"`
			Model *string `json:"model"`
		}{})
	if err != nil {
		return err
	}
	m.Advisor = t
	return nil
}

func applyWorkflows(m *Multiagent, sent jsonx.Opt[json.RawMessage]) error {
	if !sent.Set {
		return nil
	}
	t, err := parseDisabledOnly(sent, "multiagent.workflows", "workflow runs are not supported by this server",
		struct {
			Type             string            `json:"type"`
			PredefinedAgents []json.RawMessage `json:"predefined_agents"`
			InlineAgents     json.RawMessage   `json:"inline_agents"`
		}{})
	if err != nil {
		return err
	}
	m.Workflows = t
	return nil
}

// parseDisabledOnly reads a member that is enabled or disabled where this
// server supports only disabled: null and {"type":"disabled"} give
// disabled; an enabled object, checked against the enabled shape first, is
// refused with why.
func parseDisabledOnly[E any](sent jsonx.Opt[json.RawMessage], path, why string, enabled E) (*Toggle, error) {
	if sent.Null {
		return &Toggle{Type: Disabled}, nil
	}
	typ, err := jsonx.ObjectType(sent.Value, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case Disabled:
		var in Toggle
		if err := jsonx.Decode(sent.Value, &in, path); err != nil {
			return nil, err
		}
		return &Toggle{Type: Disabled}, nil
	case Enabled:
		if err := jsonx.Decode(sent.Value, &enabled, path); err != nil {
			return nil, err
		}
		return nil, jsonx.Errorf(path, "%s; omit it or send {\"type\":\"disabled\"}", why)
	case "":
		return nil, jsonx.Errorf(path+".type", "is required (\"enabled\" or \"disabled\")")
	}
	return nil, jsonx.Errorf(path+".type", "must be \"enabled\" or \"disabled\", got %q", typ)
}

func applySubagents(m *Multiagent, sent jsonx.Opt[json.RawMessage]) error {
	const path = "multiagent.subagents"
	if !sent.Set {
		return nil
	}
	if sent.Null {
		m.Subagents = defaultSubagents()
		return nil
	}
	typ, err := jsonx.ObjectType(sent.Value, path)
	if err != nil {
		return err
	}
	switch typ {
	case Disabled:
		var in Toggle
		if err := jsonx.Decode(sent.Value, &in, path); err != nil {
			return err
		}
		m.Subagents = &Subagents{Type: Disabled}
		return nil
	case Enabled:
		return applySubagentsEnabled(m, sent.Value)
	case "":
		return jsonx.Errorf(path+".type", "is required (\"enabled\" or \"disabled\")")
	}
	return jsonx.Errorf(path+".type", "must be \"enabled\" or \"disabled\", got %q", typ)
}

func applySubagentsEnabled(m *Multiagent, raw json.RawMessage) error {
	const path = "multiagent.subagents"
	var in struct {
		Type             string                       `json:"type"`
		PredefinedAgents jsonx.Opt[[]json.RawMessage] `json:"predefined_agents"`
		InlineAgents     jsonx.Opt[json.RawMessage]   `json:"inline_agents"`
	}
	if err := jsonx.Decode(raw, &in, path); err != nil {
		return err
	}
	s := m.Subagents
	if s == nil || s.Type != Enabled {
		s = defaultSubagents()
	}
	if in.PredefinedAgents.Set {
		if n := len(in.PredefinedAgents.Value); n > MaxRoster {
			return jsonx.Errorf(path+".predefined_agents", "at most %d agents are allowed, got %d", MaxRoster, n)
		}
		agents, err := parseRoster(in.PredefinedAgents.Value, path+".predefined_agents", false)
		if err != nil {
			return err
		}
		s.PredefinedAgents = agents
	}
	if in.InlineAgents.Set {
		t, err := parseDisabledOnly(in.InlineAgents, path+".inline_agents", "inline agents are not supported by this server",
			struct {
				Type string `json:"type"`
			}{})
		if err != nil {
			return err
		}
		s.InlineAgents = t
	}
	m.Subagents = s
	return nil
}

// parseRoster reads roster entries: an agent id string,
// {"type":"agent","id","version"?} or {"type":"self"}; a coordinator roster
// may also hold an advisor entry, which this server refuses. Entries must
// name distinct agents and at most one self; whether an entry names the
// owner itself is known only when it is resolved.
func parseRoster(raws []json.RawMessage, path string, coordinator bool) ([]RosterEntry, error) {
	out := make([]RosterEntry, 0, len(raws))
	seen := map[string]int{}
	for i, raw := range raws {
		p := fmt.Sprintf("%s[%d]", path, i)
		e, err := parseRosterEntry(raw, p, coordinator)
		if err != nil {
			return nil, err
		}
		key := e.Type + ":" + e.ID
		if j, dup := seen[key]; dup {
			if e.Type == EntrySelf {
				return nil, jsonx.Errorf(p, "self is also %s[%d]; a roster holds at most one self entry", path, j)
			}
			return nil, jsonx.Errorf(p, "agent %q is also %s[%d]; entries must name distinct agents", e.ID, path, j)
		}
		seen[key] = i
		out = append(out, *e)
	}
	return out, nil
}

func parseRosterEntry(raw json.RawMessage, p string, coordinator bool) (*RosterEntry, error) {
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '"' {
		var id string
		if err := json.Unmarshal(t, &id); err != nil {
			return nil, jsonx.Errorf(p, "expected an agent id string or an object")
		}
		if err := CheckLen(p, id, 1, maxAgentIDLen); err != nil {
			return nil, err
		}
		return &RosterEntry{Type: EntryAgent, ID: id}, nil
	}
	typ, err := jsonx.ObjectType(raw, p)
	if err != nil {
		return nil, jsonx.Errorf(p, "expected an agent id string, {\"type\":\"agent\",\"id\":…} or {\"type\":\"self\"}")
	}
	switch typ {
	case EntryAgent:
		var in struct {
			Type    string  `json:"type"`
			ID      *string `json:"id"`
			Version *int64  `json:"version"`
		}
		if err := jsonx.Decode(raw, &in, p); err != nil {
			return nil, err
		}
		if in.ID == nil {
			return nil, jsonx.Errorf(p+".id", "is required")
		}
		if err := CheckLen(p+".id", *in.ID, 1, maxAgentIDLen); err != nil {
			return nil, err
		}
		e := &RosterEntry{Type: EntryAgent, ID: *in.ID}
		if in.Version != nil {
			if *in.Version < 1 {
				return nil, jsonx.Errorf(p+".version", "must be at least 1")
			}
			e.Version = *in.Version
		}
		return e, nil
	case EntrySelf:
		var in Toggle
		if err := jsonx.Decode(raw, &in, p); err != nil {
			return nil, err
		}
		return &RosterEntry{Type: EntrySelf}, nil
	case "advisor":
		if coordinator {
			return nil, jsonx.Errorf(p, "advisor roster entries are not supported by this server; name agents or self")
		}
	case "":
		return nil, jsonx.Errorf(p+".type", "is required (\"agent\" or \"self\")")
	}
	return nil, jsonx.Errorf(p+".type", "must be \"agent\" or \"self\", got %q", typ)
}
