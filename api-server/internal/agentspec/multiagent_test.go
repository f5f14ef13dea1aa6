package agentspec

import (
	"strings"
	"testing"
)

func TestMultiagentCreate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, multiagent, want string
	}{
		{"coordinator string, agent and self entries", `{"type":"coordinator","agents":["agent_a",{"type":"agent","id":"agent_b","version":2},{"type":"self"}]}`,
			`{"type":"coordinator","agents":[{"type":"agent","id":"agent_a"},{"type":"agent","id":"agent_b","version":2},{"type":"self"}]}`},
		{"multiagent_20261001 defaults", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":["agent_a",{"type":"self"}]}}`,
			`{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[{"type":"agent","id":"agent_a"},{"type":"self"}],"inline_agents":{"type":"disabled"}},"advisor":{"type":"disabled"},"workflows":{"type":"disabled"}}`},
		{"explicit disabled members", `{"type":"multiagent_20261001","subagents":{"type":"disabled"},"advisor":{"type":"disabled"},"workflows":null}`,
			`{"type":"multiagent_20261001","subagents":{"type":"disabled"},"advisor":{"type":"disabled"},"workflows":{"type":"disabled"}}`},
		{"inline agents sent disabled", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":["agent_a"],"inline_agents":{"type":"disabled"}}}`,
			`{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[{"type":"agent","id":"agent_a"}],"inline_agents":{"type":"disabled"}},"advisor":{"type":"disabled"},"workflows":{"type":"disabled"}}`},
		{"null", `null`, `null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustCreate(t, `{"name":"a","model":"m","multiagent":`+tc.multiagent+`}`)
			if string(s.Multiagent) != tc.want {
				t.Errorf("multiagent =\n%s\nwant\n%s", s.Multiagent, tc.want)
			}
		})
	}
}

func TestMultiagentCreateRefusals(t *testing.T) {
	t.Parallel()
	twentyOne := `"a0"`
	for i := 1; i <= 20; i++ {
		twentyOne += `,"a` + strings.Repeat("x", i) + `"`
	}
	tests := []struct {
		name, multiagent, want string
	}{
		{"no type", `{"agents":["a"]}`, "multiagent.type: is required"},
		{"unknown type", `{"type":"swarm"}`, "multiagent.type: must be"},
		{"not an object", `"coordinator"`, "multiagent: expected a JSON object"},
		{"coordinator without agents", `{"type":"coordinator"}`, "multiagent.agents: is required"},
		{"coordinator 0 agents", `{"type":"coordinator","agents":[]}`, "multiagent.agents: must name 1 to 20 agents, got 0"},
		{"coordinator 21 agents", `{"type":"coordinator","agents":[` + twentyOne + `]}`, "multiagent.agents: must name 1 to 20 agents, got 21"},
		{"duplicate string and object", `{"type":"coordinator","agents":["a",{"type":"agent","id":"a","version":1}]}`, `multiagent.agents[1]: agent "a" is also multiagent.agents[0]`},
		{"two selves", `{"type":"coordinator","agents":[{"type":"self"},{"type":"self"}]}`, "multiagent.agents[1]: self is also multiagent.agents[0]"},
		{"version 0", `{"type":"coordinator","agents":[{"type":"agent","id":"a","version":0}]}`, "multiagent.agents[0].version: must be at least 1"},
		{"agent without id", `{"type":"coordinator","agents":[{"type":"agent"}]}`, "multiagent.agents[0].id: is required"},
		{"empty id", `{"type":"coordinator","agents":[""]}`, "multiagent.agents[0]: must not be empty"},
		{"unknown entry field", `{"type":"coordinator","agents":[{"type":"self","id":"x"}]}`, `multiagent.agents[0]: unknown field "id"`},
		{"advisor entry", `{"type":"coordinator","agents":[{"type":"advisor","model":"m"}]}`, "multiagent.agents[0]: advisor roster entries are not supported"},
		{"entry number", `{"type":"coordinator","agents":[7]}`, "multiagent.agents[0]: expected an agent id string"},
		{"coordinator unknown member", `{"type":"coordinator","agents":["a"],"subagents":null}`, `multiagent: unknown field "subagents"`},
		{"subagents default needs agents", `{"type":"multiagent_20261001"}`, "multiagent.subagents.predefined_agents: must name at least one agent"},
		{"subagents enabled empty", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[]}}`, "multiagent.subagents.predefined_agents: must name at least one agent"},
		{"predefined 21", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[` + twentyOne + `]}}`, "multiagent.subagents.predefined_agents: at most 20"},
		{"predefined advisor", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[{"type":"advisor","model":"m"}]}}`, `multiagent.subagents.predefined_agents[0].type: must be "agent" or "self", got "advisor"`},
		{"predefined duplicate", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":["a","b","a"]}}`, `multiagent.subagents.predefined_agents[2]: agent "a" is also multiagent.subagents.predefined_agents[0]`},
		{"inline enabled", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":["a"],"inline_agents":{"type":"enabled"}}}`,
			`multiagent.subagents.inline_agents: inline agents are not supported by this server; omit it or send {"type":"disabled"}`},
		{"advisor enabled", `{"type":"multiagent_20261001","subagents":{"type":"disabled"},"advisor":{"type":"enabled","model":"claude-opus-4-7"}}`,
			`multiagent.advisor: the advisor is not supported by this server; omit it or send {"type":"disabled"}`},
		{"advisor enabled bad shape", `{"type":"multiagent_20261001","advisor":{"type":"enabled","colour":"red"}}`, `multiagent.advisor: unknown field "colour"`},
		{"workflows enabled", `{"type":"multiagent_20261001","subagents":{"type":"disabled"},"workflows":{"type":"enabled","predefined_agents":["a"]}}`,
			`multiagent.workflows: workflow runs are not supported by this server; omit it or send {"type":"disabled"}`},
		{"member without type", `{"type":"multiagent_20261001","workflows":{}}`, "multiagent.workflows.type: is required"},
		{"member bad type", `{"type":"multiagent_20261001","subagents":{"type":"on"}}`, `multiagent.subagents.type: must be "enabled" or "disabled", got "on"`},
		{"disabled with members", `{"type":"multiagent_20261001","subagents":{"type":"disabled","predefined_agents":["a"]}}`, `multiagent.subagents: unknown field "predefined_agents"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, err := ParseInput([]byte(`{"name":"a","model":"m","multiagent":` + tc.multiagent + `}`))
			if err == nil {
				_, err = Create(in)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestMultiagentUpdateMerge follows the contract of
// BetaManagedAgentsMultiagent20261001Params: merged level by level into a
// stored multiagent_20261001, an object of another type replaces, a sent
// predefined_agents list replaces; null clears and omitted keeps.
func TestMultiagentUpdateMerge(t *testing.T) {
	t.Parallel()
	const stored = `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[{"type":"agent","id":"a","version":1},{"type":"agent","id":"b","version":4}],"inline_agents":{"type":"disabled"}},"advisor":{"type":"disabled"},"workflows":{"type":"disabled"}}`
	cur := mustCreate(t, `{"name":"a","model":"m","multiagent":`+stored+`}`)
	tests := []struct {
		name, body, want string
	}{
		{"omitted keeps", `{"name":"b"}`, stored},
		{"null clears", `{"multiagent":null}`, `null`},
		{"type only keeps every member", `{"multiagent":{"type":"multiagent_20261001"}}`, stored},
		{"same-type subagents without a list keeps the list", `{"multiagent":{"type":"multiagent_20261001","subagents":{"type":"enabled","inline_agents":null}}}`, stored},
		{"sent list replaces", `{"multiagent":{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":["c"]}}}`,
			`{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[{"type":"agent","id":"c"}],"inline_agents":{"type":"disabled"}},"advisor":{"type":"disabled"},"workflows":{"type":"disabled"}}`},
		{"other type replaces", `{"multiagent":{"type":"multiagent_20261001","subagents":{"type":"disabled"}}}`,
			`{"type":"multiagent_20261001","subagents":{"type":"disabled"},"advisor":{"type":"disabled"},"workflows":{"type":"disabled"}}`},
		{"null member takes its default", `{"multiagent":{"type":"multiagent_20261001","subagents":null}}`, "multiagent.subagents.predefined_agents: must name at least one agent"},
		{"null list empties it", `{"multiagent":{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":null}}}`, "multiagent.subagents.predefined_agents: must name at least one agent"},
		{"coordinator replaces", `{"multiagent":{"type":"coordinator","agents":[{"type":"self"}]}}`, `{"type":"coordinator","agents":[{"type":"self"}]}`},
		{"enabled workflows refused on update", `{"multiagent":{"type":"multiagent_20261001","workflows":{"type":"enabled"}}}`, "multiagent.workflows: workflow runs are not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, err := ParseInput([]byte(tc.body))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			next, err := Update(cur, in)
			if !strings.HasPrefix(tc.want, "{") && tc.want != "null" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error = %v, want one containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("update: %v", err)
			}
			if string(next.Multiagent) != tc.want {
				t.Errorf("multiagent =\n%s\nwant\n%s", next.Multiagent, tc.want)
			}
			if string(cur.Multiagent) != stored {
				t.Errorf("update mutated the current spec: %s", cur.Multiagent)
			}
		})
	}
}

// TestMultiagentCoordinatorUpdateStartsFromDefaults: a multiagent_20261001
// sent over a stored coordinator does not merge into it.
func TestMultiagentCoordinatorUpdateStartsFromDefaults(t *testing.T) {
	t.Parallel()
	cur := mustCreate(t, `{"name":"a","model":"m","multiagent":{"type":"coordinator","agents":["a"]}}`)
	in, err := ParseInput([]byte(`{"multiagent":{"type":"multiagent_20261001","subagents":{"type":"disabled"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	next, err := Update(cur, in)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"type":"multiagent_20261001","subagents":{"type":"disabled"},"advisor":{"type":"disabled"},"workflows":{"type":"disabled"}}`
	if string(next.Multiagent) != want {
		t.Errorf("multiagent = %s, want %s", next.Multiagent, want)
	}
}

func TestMultiagentEntries(t *testing.T) {
	t.Parallel()
	m, err := ParseMultiagent([]byte(`{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[{"type":"agent","id":"a"},{"type":"self"}],"inline_agents":{"type":"disabled"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	refs := m.Entries()
	if len(refs) != 2 || refs[1].Path != "multiagent.subagents.predefined_agents[1]" || !refs[1].Predefined || refs[1].Entry.Type != EntrySelf {
		t.Fatalf("entries = %+v", refs)
	}
	refs[0].Entry.Version = 7
	if got := string(m.Marshal()); !strings.Contains(got, `{"type":"agent","id":"a","version":7}`) {
		t.Errorf("entries do not point into the configuration: %s", got)
	}
	if m, err := ParseMultiagent([]byte("null")); m != nil || err != nil || string(m.Marshal()) != "null" {
		t.Errorf("ParseMultiagent(null) = %v, %v", m, err)
	}
}
