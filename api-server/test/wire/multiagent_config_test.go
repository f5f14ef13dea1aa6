package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// multiagentEnv is a server with a client and helpers to write agents
// through the official SDK.
type multiagentEnv struct {
	t      *testing.T
	client anthropic.Client
}

func newMultiagentEnv(t *testing.T) *multiagentEnv {
	t.Helper()
	return &multiagentEnv{t: t, client: newClient(t, testserver.Start(t))}
}

// agent creates an agent, with a multiagent configuration when ma is set.
func (e *multiagentEnv) agent(name string, ma anthropic.BetaManagedAgentsMultiagentParamsUnion) (*anthropic.BetaManagedAgentsAgent, error) {
	return e.client.Beta.Agents.New(context.Background(), anthropic.BetaAgentNewParams{Name: name,
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Multiagent: ma})
}

func (e *multiagentEnv) mustAgent(name string) *anthropic.BetaManagedAgentsAgent {
	e.t.Helper()
	ag, err := e.agent(name, anthropic.BetaManagedAgentsMultiagentParamsUnion{})
	if err != nil {
		e.t.Fatalf("create agent %s: %v", name, err)
	}
	return ag
}

func (e *multiagentEnv) update(id string, p anthropic.BetaAgentUpdateParams, opts ...option.RequestOption) (*anthropic.BetaManagedAgentsAgent, error) {
	return e.client.Beta.Agents.Update(context.Background(), id, p, opts...)
}

func (e *multiagentEnv) mustUpdate(id string, p anthropic.BetaAgentUpdateParams, opts ...option.RequestOption) *anthropic.BetaManagedAgentsAgent {
	e.t.Helper()
	ag, err := e.update(id, p, opts...)
	if err != nil {
		e.t.Fatalf("update agent %s: %v", id, err)
	}
	return ag
}

// coordinator is a coordinator configuration with the given roster.
func coordinator(entries ...anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion) anthropic.BetaManagedAgentsMultiagentParamsUnion {
	return anthropic.BetaManagedAgentsMultiagentParamsUnion{OfCoordinator: &anthropic.BetaManagedAgentsMultiagentCoordinatorParams{Agents: entries}}
}

func idEntry(id string) anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion {
	return anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion{OfString: anthropic.String(id)}
}

func agentEntry(id string, version int64) anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion {
	p := &anthropic.BetaManagedAgentsAgentParams{ID: id}
	if version > 0 {
		p.Version = anthropic.Int(version)
	}
	return anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion{OfBetaManagedAgentsAgent: p}
}

func selfEntry() anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion {
	return anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion{OfBetaManagedAgentsMultiagentSelf: &anthropic.BetaManagedAgentsMultiagentSelfParams{}}
}

// ref is an agent reference as responses carry it.
type ref struct {
	id      string
	version int64
}

// wantCoordinator decodes an agent's multiagent through the SDK and checks
// it is a coordinator with roster want (a self entry is resolved to the
// agent's own id at the version that names it).
func wantCoordinator(t *testing.T, ag *anthropic.BetaManagedAgentsAgent, want ...ref) {
	t.Helper()
	c, ok := ag.Multiagent.AsAny().(anthropic.BetaManagedAgentsMultiagentCoordinator)
	if !ok {
		t.Fatalf("agent %s v%d multiagent = %s, want a coordinator", ag.ID, ag.Version, ag.Multiagent.RawJSON())
	}
	if len(c.Agents) != len(want) {
		t.Fatalf("coordinator roster = %s, want %d entries", c.RawJSON(), len(want))
	}
	for i, w := range want {
		entry := c.Agents[i]
		got, ok := entry.AsAny().(anthropic.BetaManagedAgentsAgentReference)
		if !ok || got.ID != w.id || got.Version != w.version {
			t.Errorf("agents[%d] = %s, want agent %s version %d", i, entry.RawJSON(), w.id, w.version)
		}
	}
}

// TestMultiagentCoordinatorRoster: a coordinator's roster pins string,
// agent and self entries; a pinned version stays when the roster agent
// moves on; an explicit version is kept; the refusals are 400s naming the
// entry.
func TestMultiagentCoordinatorRoster(t *testing.T) {
	t.Parallel()
	e := newMultiagentEnv(t)
	w1, w2 := e.mustAgent("worker-1"), e.mustAgent("worker-2")
	e.mustUpdate(w2.ID, anthropic.BetaAgentUpdateParams{System: anthropic.String("v2")})

	lead, err := e.agent("lead", coordinator(idEntry(w1.ID), agentEntry(w2.ID, 1), selfEntry()))
	if err != nil {
		t.Fatalf("create coordinator: %v", err)
	}
	wantCoordinator(t, lead, ref{w1.ID, 1}, ref{w2.ID, 1}, ref{lead.ID, 1})

	// The roster agent's new version does not move the pin.
	e.mustUpdate(w1.ID, anthropic.BetaAgentUpdateParams{System: anthropic.String("v2")})
	got, err := e.client.Beta.Agents.Get(context.Background(), lead.ID, anthropic.BetaAgentGetParams{})
	if err != nil {
		t.Fatalf("get coordinator: %v", err)
	}
	wantCoordinator(t, got, ref{w1.ID, 1}, ref{w2.ID, 1}, ref{lead.ID, 1})

	// Without a version an entry pins the latest at save time: now 2.
	lead2 := e.mustUpdate(lead.ID, anthropic.BetaAgentUpdateParams{Multiagent: coordinator(agentEntry(w1.ID, 0), selfEntry())})
	if lead2.Version != 2 {
		t.Errorf("update with a new roster wrote version %d, want 2", lead2.Version)
	}
	wantCoordinator(t, lead2, ref{w1.ID, 2}, ref{lead.ID, 2})
	sessionSnapshot(t, e, lead2)
	coordinatorRefusals(t, e, w1, lead2)
}

// sessionSnapshot: a session's agent snapshot carries the roster
// expanded, as the SDK's session types carry it: each entry the agent's
// own snapshot at its pinned version, in order (the session's threads run
// them).
func sessionSnapshot(t *testing.T, e *multiagentEnv, ag *anthropic.BetaManagedAgentsAgent) {
	t.Helper()
	ctx := context.Background()
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "multiagent-" + ag.ID})
	if err != nil {
		t.Fatalf("create environment: %v", err)
	}
	sess, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{EnvironmentID: env.ID,
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(ag.ID)}})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	c, ok := sess.Agent.Multiagent.AsAny().(anthropic.BetaManagedAgentsSessionMultiagentCoordinator)
	want, _ := ag.Multiagent.AsAny().(anthropic.BetaManagedAgentsMultiagentCoordinator)
	if !ok || len(c.Agents) != len(want.Agents) {
		t.Fatalf("session agent multiagent = %s, want a coordinator of %d agents", sess.Agent.Multiagent.RawJSON(), len(want.Agents))
	}
	for i, w := range want.Agents {
		got, ok := c.Agents[i].AsAny().(anthropic.BetaManagedAgentsSessionThreadAgent)
		if !ok || got.ID != w.ID || got.Version != w.Version || got.Name == "" || got.Model.ID == "" {
			t.Errorf("session roster agents[%d] = %s, want the snapshot of %s version %d", i, c.Agents[i].RawJSON(), w.ID, w.Version)
		}
	}
}

func coordinatorRefusals(t *testing.T, e *multiagentEnv, w1, lead *anthropic.BetaManagedAgentsAgent) {
	t.Helper()
	archived := e.mustAgent("archived")
	if _, err := e.client.Beta.Agents.Archive(context.Background(), archived.ID, anthropic.BetaAgentArchiveParams{}); err != nil {
		t.Fatalf("archive: %v", err)
	}
	twentyOne := make([]anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion, 21)
	for i := range twentyOne {
		twentyOne[i] = idEntry(fmt.Sprintf("agent_%026d", i))
	}
	tests := []struct {
		name string
		ma   anthropic.BetaManagedAgentsMultiagentParamsUnion
		want []string
	}{
		{"archived", coordinator(idEntry(w1.ID), idEntry(archived.ID)), []string{"multiagent.agents[1]", archived.ID, "archived"}},
		{"unknown id", coordinator(idEntry("agent_01nope")), []string{"multiagent.agents[0]", "no agent", "agent_01nope"}},
		{"malformed id", coordinator(agentEntry("not-an-id", 0)), []string{"multiagent.agents[0]", "no agent", "not-an-id"}},
		{"missing version", coordinator(agentEntry(w1.ID, 9)), []string{"multiagent.agents[0].version", "no version 9"}},
		{"nested multiagent", coordinator(idEntry(lead.ID)), []string{"multiagent.agents[0]", lead.ID, "depth limit 1"}},
		{"duplicate", coordinator(idEntry(w1.ID), agentEntry(w1.ID, 1)), []string{"multiagent.agents[1]", w1.ID, "distinct"}},
		{"two selves", coordinator(selfEntry(), selfEntry()), []string{"multiagent.agents[1]", "at most one self"}},
		{"no entries", coordinator(), []string{"multiagent.agents"}},
		{"21 entries", coordinator(twentyOne...), []string{"multiagent.agents", "1 to 20", "got 21"}},
	}
	for _, tc := range tests {
		_, err := e.agent("refused-"+tc.name, tc.ma)
		wantInvalid(t, tc.name, err, http.StatusBadRequest, tc.want...)
	}
	// The SDK omits an empty roster (omitzero); sent as [] it is refused too.
	_, err := e.client.Beta.Agents.New(context.Background(), anthropic.BetaAgentNewParams{Name: "zero",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}}, option.WithJSONSet("multiagent", map[string]any{"type": "coordinator", "agents": []any{}}))
	wantInvalid(t, "0 entries", err, http.StatusBadRequest, "multiagent.agents", "got 0")

	// The owner's id beside self names it twice.
	_, err = e.update(lead.ID, anthropic.BetaAgentUpdateParams{Multiagent: coordinator(selfEntry(), idEntry(lead.ID))})
	wantInvalid(t, "self and own id", err, http.StatusBadRequest, "multiagent.agents[1]", lead.ID, "itself", "multiagent.agents[0]")
}

func subagents(entries ...anthropic.BetaManagedAgentsMultiagentPredefinedAgentParamsUnion) anthropic.BetaManagedAgentsMultiagentSubagentsParamsUnion {
	return anthropic.BetaManagedAgentsMultiagentSubagentsParamsUnion{OfEnabled: &anthropic.BetaManagedAgentsMultiagentSubagentsEnabledParams{PredefinedAgents: entries}}
}

func predefined(id string) anthropic.BetaManagedAgentsMultiagentPredefinedAgentParamsUnion {
	return anthropic.BetaManagedAgentsMultiagentPredefinedAgentParamsUnion{OfString: anthropic.String(id)}
}

func predefinedSelf() anthropic.BetaManagedAgentsMultiagentPredefinedAgentParamsUnion {
	return anthropic.BetaManagedAgentsMultiagentPredefinedAgentParamsUnion{OfBetaManagedAgentsMultiagentSelf: &anthropic.BetaManagedAgentsMultiagentSelfParams{}}
}

func ma20261001(p anthropic.BetaManagedAgentsMultiagent20261001Params) anthropic.BetaManagedAgentsMultiagentParamsUnion {
	return anthropic.BetaManagedAgentsMultiagentParamsUnion{OfMultiagent20261001: &p}
}

// want20261001 decodes an agent's multiagent through the SDK and checks a
// multiagent_20261001 with advisor, workflows and inline agents disabled
// and subagents enabled with predefined agents want (none: disabled).
func want20261001(t *testing.T, ag *anthropic.BetaManagedAgentsAgent, want ...ref) {
	t.Helper()
	m, ok := ag.Multiagent.AsAny().(anthropic.BetaManagedAgentsMultiagent20261001)
	if !ok {
		t.Fatalf("agent %s v%d multiagent = %s, want multiagent_20261001", ag.ID, ag.Version, ag.Multiagent.RawJSON())
	}
	if _, ok := m.Advisor.AsAny().(anthropic.BetaManagedAgentsMultiagentAdvisorDisabled); !ok {
		t.Errorf("advisor = %s, want disabled", m.Advisor.RawJSON())
	}
	if _, ok := m.Workflows.AsAny().(anthropic.BetaManagedAgentsMultiagentWorkflowsDisabled); !ok {
		t.Errorf("workflows = %s, want disabled", m.Workflows.RawJSON())
	}
	if len(want) == 0 {
		if _, ok := m.Subagents.AsAny().(anthropic.BetaManagedAgentsMultiagentSubagentsDisabled); !ok {
			t.Errorf("subagents = %s, want disabled", m.Subagents.RawJSON())
		}
		return
	}
	s, ok := m.Subagents.AsAny().(anthropic.BetaManagedAgentsMultiagentSubagentsEnabled)
	if !ok {
		t.Fatalf("subagents = %s, want enabled", m.Subagents.RawJSON())
	}
	if _, ok := s.InlineAgents.AsAny().(anthropic.BetaManagedAgentsMultiagentInlineAgentsDisabled); !ok {
		t.Errorf("inline_agents = %s, want disabled", s.InlineAgents.RawJSON())
	}
	if len(s.PredefinedAgents) != len(want) {
		t.Fatalf("predefined_agents = %s, want %d", s.RawJSON(), len(want))
	}
	for i, w := range want {
		if got := s.PredefinedAgents[i]; got.Type != "agent" || got.ID != w.id || got.Version != w.version {
			t.Errorf("predefined_agents[%d] = %s, want agent %s version %d", i, got.RawJSON(), w.id, w.version)
		}
	}
}

// TestMultiagent20261001: subagents resolve to pinned references (self to
// the agent's own id at the version written), the unsupported members are
// shown disabled and refused enabled, updates merge level by level, null
// clears, and every version keeps its own roster.
func TestMultiagent20261001(t *testing.T) {
	t.Parallel()
	e := newMultiagentEnv(t)
	w1, w2 := e.mustAgent("worker-1"), e.mustAgent("worker-2")
	lead, err := e.agent("lead", ma20261001(anthropic.BetaManagedAgentsMultiagent20261001Params{Subagents: subagents(predefined(w1.ID), predefinedSelf())}))
	if err != nil {
		t.Fatalf("create multiagent_20261001: %v", err)
	}
	want20261001(t, lead, ref{w1.ID, 1}, ref{lead.ID, 1})
	const wantJSON = `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[{"type":"agent","id":"%s","version":1},{"type":"agent","id":"%s","version":1}],"inline_agents":{"type":"disabled"}},"advisor":{"type":"disabled"},"workflows":{"type":"disabled"}}`
	if got, want := lead.Multiagent.RawJSON(), fmt.Sprintf(wantJSON, w1.ID, lead.ID); got != want {
		t.Errorf("multiagent JSON =\n%s\nwant\n%s", got, want)
	}
	refusals20261001(t, e, w1)
	merges20261001(t, e, lead, w1, w2)
}

func refusals20261001(t *testing.T, e *multiagentEnv, w1 *anthropic.BetaManagedAgentsAgent) {
	t.Helper()
	sub := subagents(predefined(w1.ID))
	inline := subagents(predefined(w1.ID))
	inline.OfEnabled.InlineAgents.OfEnabled = &anthropic.BetaManagedAgentsMultiagentInlineAgentsEnabledParams{}
	tests := []struct {
		name string
		p    anthropic.BetaManagedAgentsMultiagent20261001Params
		want []string
	}{
		{"advisor enabled", anthropic.BetaManagedAgentsMultiagent20261001Params{Subagents: sub,
			Advisor: anthropic.BetaManagedAgentsMultiagentAdvisorParamsUnion{OfEnabled: &anthropic.BetaManagedAgentsMultiagentAdvisorEnabledParams{Model: "claude-opus-4-7"}}},
			[]string{"multiagent.advisor: the advisor is not supported by this server", `send {\"type\":\"disabled\"}`}},
		{"workflows enabled", anthropic.BetaManagedAgentsMultiagent20261001Params{Subagents: sub,
			Workflows: anthropic.BetaManagedAgentsMultiagentWorkflowsParamsUnion{OfEnabled: &anthropic.BetaManagedAgentsMultiagentWorkflowsEnabledParams{}}},
			[]string{"multiagent.workflows: workflow runs are not supported by this server; omit it or send"}},
		{"inline agents enabled", anthropic.BetaManagedAgentsMultiagent20261001Params{Subagents: inline},
			[]string{"multiagent.subagents.inline_agents: inline agents are not supported by this server"}},
		{"no predefined agent", anthropic.BetaManagedAgentsMultiagent20261001Params{Subagents: subagents()},
			[]string{"multiagent.subagents.predefined_agents", "at least one agent"}},
		{"subagents default", anthropic.BetaManagedAgentsMultiagent20261001Params{}, []string{"multiagent.subagents.predefined_agents"}},
		{"unknown predefined", anthropic.BetaManagedAgentsMultiagent20261001Params{Subagents: subagents(predefined("agent_01nope"))},
			[]string{"multiagent.subagents.predefined_agents[0]", "no agent"}},
	}
	for _, tc := range tests {
		_, err := e.agent("refused-"+tc.name, ma20261001(tc.p))
		wantInvalid(t, tc.name, err, http.StatusBadRequest, tc.want...)
	}
}

// merges20261001 walks lead (version 1: w1 and self) through updates.
func merges20261001(t *testing.T, e *multiagentEnv, lead, w1, w2 *anthropic.BetaManagedAgentsAgent) {
	t.Helper()
	// Only the type: every member keeps its stored value, self included,
	// so nothing changes and no version is written.
	same := e.mustUpdate(lead.ID, anthropic.BetaAgentUpdateParams{Multiagent: ma20261001(anthropic.BetaManagedAgentsMultiagent20261001Params{
		Advisor: anthropic.BetaManagedAgentsMultiagentAdvisorParamsUnion{OfDisabled: &anthropic.BetaManagedAgentsMultiagentAdvisorDisabledParams{}}})})
	if same.Version != 1 {
		t.Errorf("update keeping the configuration wrote version %d, want 1", same.Version)
	}
	// Resending the same list with self: self pins the current version, no new one.
	same = e.mustUpdate(lead.ID, anthropic.BetaAgentUpdateParams{Multiagent: ma20261001(anthropic.BetaManagedAgentsMultiagent20261001Params{
		Subagents: subagents(predefined(w1.ID), predefinedSelf())})})
	if same.Version != 1 {
		t.Errorf("resending the configuration wrote version %d, want 1", same.Version)
	}
	// Subagents enabled without a list keeps the list, while a sent list replaces it.
	v2 := e.mustUpdate(lead.ID, anthropic.BetaAgentUpdateParams{Multiagent: ma20261001(anthropic.BetaManagedAgentsMultiagent20261001Params{
		Subagents: subagents(predefined(w2.ID), predefinedSelf())})})
	want20261001(t, v2, ref{w2.ID, 1}, ref{lead.ID, 2})
	v2same := e.mustUpdate(lead.ID, anthropic.BetaAgentUpdateParams{Multiagent: ma20261001(anthropic.BetaManagedAgentsMultiagent20261001Params{Subagents: subagents()})})
	if v2same.Version != 2 {
		t.Errorf("subagents without predefined_agents wrote version %d, want 2 (the list is kept)", v2same.Version)
	}
	// Omitted keeps.
	v3 := e.mustUpdate(lead.ID, anthropic.BetaAgentUpdateParams{System: anthropic.String("v3")})
	want20261001(t, v3, ref{w2.ID, 1}, ref{lead.ID, 2})
	// An object of another type replaces.
	v4 := e.mustUpdate(lead.ID, anthropic.BetaAgentUpdateParams{Multiagent: ma20261001(anthropic.BetaManagedAgentsMultiagent20261001Params{
		Subagents: anthropic.BetaManagedAgentsMultiagentSubagentsParamsUnion{OfDisabled: &anthropic.BetaManagedAgentsMultiagentSubagentsDisabledParams{}}})})
	want20261001(t, v4)
	// Enabled again from the defaults: the list must be sent.
	_, err := e.update(lead.ID, anthropic.BetaAgentUpdateParams{Multiagent: ma20261001(anthropic.BetaManagedAgentsMultiagent20261001Params{Subagents: subagents()})})
	wantInvalid(t, "enabled over disabled without a list", err, http.StatusBadRequest, "multiagent.subagents.predefined_agents")
	// Null clears.
	v5 := e.mustUpdate(lead.ID, anthropic.BetaAgentUpdateParams{}, option.WithJSONSet("multiagent", nil))
	if v5.Version != 5 || v5.Multiagent.Type != "" || v5.Multiagent.AsAny() != nil || rawMember(t, v5.RawJSON(), "multiagent") != "null" {
		t.Errorf("after multiagent null: version %d multiagent %s, want version 5 and null", v5.Version, v5.Multiagent.RawJSON())
	}
	versionRosters(t, e, lead.ID, w1.ID, w2.ID)
}

// versionRosters: the versions list shows each version's own roster.
func versionRosters(t *testing.T, e *multiagentEnv, lead, w1, w2 string) {
	t.Helper()
	versions, err := e.client.Beta.Agents.Versions.List(context.Background(), lead, anthropic.BetaAgentVersionListParams{})
	if err != nil {
		t.Fatalf("list versions: %v", err)
	}
	if len(versions.Data) != 5 {
		t.Fatalf("versions list has %d versions, want 5", len(versions.Data))
	}
	byVersion := map[int64]*anthropic.BetaManagedAgentsAgent{}
	for i := range versions.Data {
		byVersion[versions.Data[i].Version] = &versions.Data[i]
	}
	want20261001(t, byVersion[1], ref{w1, 1}, ref{lead, 1})
	want20261001(t, byVersion[2], ref{w2, 1}, ref{lead, 2})
	want20261001(t, byVersion[3], ref{w2, 1}, ref{lead, 2})
	want20261001(t, byVersion[4])
	if got := rawMember(t, byVersion[5].RawJSON(), "multiagent"); got != "null" {
		t.Errorf("version 5 multiagent = %s, want null", got)
	}
}

func rawMember(t *testing.T, body, member string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return string(m[member])
}
