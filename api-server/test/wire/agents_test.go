package wire

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

func TestAgentLifecycle(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()

	created, err := client.Beta.Agents.New(ctx, researcherAgentParams())
	if err != nil {
		t.Fatalf("create agent: %v", err)
	}
	checkCreatedResearcher(t, created)

	got, err := client.Beta.Agents.Get(ctx, created.ID, anthropic.BetaAgentGetParams{})
	if err != nil {
		t.Fatalf("get agent: %v", err)
	}
	if got.RawJSON() != created.RawJSON() {
		t.Errorf("get differs from create:\n got %s\nwant %s", got.RawJSON(), created.RawJSON())
	}

	agentUpdatesAndVersions(t, client, created)
	agentArchive(t, client, created)
}

// researcherAgentParams is TestAgentLifecycle's agent: a toolset with
// per-tool configs, an MCP toolset and a custom tool.
func researcherAgentParams() anthropic.BetaAgentNewParams {
	return anthropic.BetaAgentNewParams{
		Name:        "researcher",
		Description: anthropic.String("finds things"),
		System:      anthropic.String("You are careful."),
		Model: anthropic.BetaManagedAgentsModelConfigParams{
			ID:     "claude-sonnet-5",
			Effort: anthropic.BetaManagedAgentsModelConfigParamsEffortUnion{OfBetaManagedAgentsModelConfigEffortBetaManagedAgentsEffortLevel: anthropic.String("high")},
		},
		Metadata: map[string]string{"team": "search", "tier": "gold"},
		MCPServers: []anthropic.BetaManagedAgentsURLMCPServerParams{
			{Name: "docs", URL: "https://mcp.example.com/docs"},
		},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{
			{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{
				DefaultConfig: anthropic.BetaManagedAgentsAgentToolsetDefaultConfigParams{Enabled: anthropic.Bool(true)},
				Configs: []anthropic.BetaManagedAgentsAgentToolConfigParamsUnion{
					{OfBash: &anthropic.BetaManagedAgentsBashToolConfigParams{
						PermissionPolicy: anthropic.BetaManagedAgentsBashToolConfigParamsPermissionPolicyUnion{OfAlwaysAsk: &anthropic.BetaManagedAgentsAlwaysAskPolicyParam{}},
					}},
					{OfWrite: &anthropic.BetaManagedAgentsWriteToolConfigParams{Enabled: anthropic.Bool(false)}},
				},
			}},
			{OfMCPToolset: &anthropic.BetaManagedAgentsMCPToolsetParams{MCPServerName: "docs",
				Configs: []anthropic.BetaManagedAgentsMCPToolConfigParams{{Name: "search", PermissionPolicy: anthropic.BetaManagedAgentsMCPToolConfigParamsPermissionPolicyUnion{OfAlwaysAllow: &anthropic.BetaManagedAgentsAlwaysAllowPolicyParam{}}}},
			}},
			{OfCustom: &anthropic.BetaManagedAgentsCustomToolParams{
				Name: "lookup_order", Description: "Look up an order",
				InputSchema: anthropic.BetaManagedAgentsCustomToolInputSchemaParam{
					Properties: map[string]any{"id": map[string]any{"type": "string"}},
					Required:   []string{"id"},
				},
			}},
		},
	}
}

// checkCreatedResearcher checks the created agent and its resolved tools.
func checkCreatedResearcher(t *testing.T, created *anthropic.BetaManagedAgentsAgent) {
	t.Helper()
	if created.Version != 1 || created.Name != "researcher" || created.Type != "agent" {
		t.Fatalf("created = version %d name %q type %q, want 1 researcher agent", created.Version, created.Name, created.Type)
	}
	if created.Model.ID != "claude-sonnet-5" || created.Model.Effort.Type != "high" || created.Model.Speed != "standard" {
		t.Errorf("model = %+v, want claude-sonnet-5 effort high speed standard", created.Model)
	}
	if created.ExecutionIdentity.Type != "service_account" {
		t.Errorf("execution_identity = %q, want service_account", created.ExecutionIdentity.Type)
	}
	if !created.ArchivedAt.IsZero() {
		t.Errorf("archived_at = %v, want null", created.ArchivedAt)
	}
	if len(created.Tools) != 3 {
		t.Fatalf("tools = %d entries, want 3", len(created.Tools))
	}
	toolset := created.Tools[0]
	if toolset.Type != "agent_toolset_20260401" {
		t.Fatalf("tools[0].type = %q", toolset.Type)
	}
	policies := map[string]string{}
	enabled := map[string]bool{}
	for _, c := range toolset.Configs.OfBetaManagedAgentsAgentToolConfigArray {
		policies[c.Name] = c.PermissionPolicy.Type
		enabled[c.Name] = c.Enabled
	}
	wantPolicies := map[string]string{"bash": "always_ask", "edit": "always_allow", "read": "always_allow", "write": "always_allow",
		"glob": "always_allow", "grep": "always_allow", "web_fetch": "always_allow", "web_search": "always_allow"}
	for name, want := range wantPolicies {
		if policies[name] != want {
			t.Errorf("resolved %s policy = %q, want %q", name, policies[name], want)
		}
	}
	if enabled["write"] || !enabled["bash"] {
		t.Errorf("enabled = %v, want write disabled and bash enabled", enabled)
	}
	mcp := created.Tools[1]
	if mcp.Type != "mcp_toolset" || mcp.MCPServerName != "docs" || mcp.DefaultConfig.PermissionPolicy.Type != "always_ask" {
		t.Errorf("mcp toolset = type %q server %q default policy %q, want mcp_toolset docs always_ask", mcp.Type, mcp.MCPServerName, mcp.DefaultConfig.PermissionPolicy.Type)
	}
	custom := created.Tools[2]
	if custom.Type != "custom" || custom.Name != "lookup_order" || len(custom.InputSchema.Required) != 1 {
		t.Errorf("custom tool = %+v", custom)
	}
}

// agentUpdatesAndVersions: an update makes a new immutable version,
// a stale precondition conflicts, a no-op makes none, old versions stay
// readable.
func agentUpdatesAndVersions(t *testing.T, client anthropic.Client, created *anthropic.BetaManagedAgentsAgent) {
	t.Helper()
	ctx := context.Background()
	// Update: a new immutable version; metadata is a patch.
	updated, err := client.Beta.Agents.Update(ctx, created.ID, anthropic.BetaAgentUpdateParams{
		Name:     anthropic.String("researcher-2"),
		Version:  anthropic.Int(1),
		Metadata: map[string]string{"tier": "platinum"},
	}, option.WithJSONSet("metadata.team", nil))
	if err != nil {
		t.Fatalf("update agent: %v", err)
	}
	if updated.Version != 2 || updated.Name != "researcher-2" {
		t.Fatalf("updated = version %d name %q, want 2 researcher-2", updated.Version, updated.Name)
	}
	if len(updated.Metadata) != 1 || updated.Metadata["tier"] != "platinum" {
		t.Errorf("metadata after patch = %v, want only tier=platinum", updated.Metadata)
	}
	if !updated.UpdatedAt.After(created.UpdatedAt) && !updated.UpdatedAt.Equal(created.UpdatedAt) {
		t.Errorf("updated_at went backwards")
	}

	// A stale version precondition is a conflict that will not clear.
	_, err = client.Beta.Agents.Update(ctx, created.ID, anthropic.BetaAgentUpdateParams{Name: anthropic.String("x"), Version: anthropic.Int(1)})
	apiErr := apiErrorWithStatus(t, err, http.StatusConflict)
	if apiErr.Response.Header.Get("x-should-retry") != "false" {
		t.Errorf("409 without x-should-retry: false")
	}

	// A no-op update creates no version.
	same, err := client.Beta.Agents.Update(ctx, created.ID, anthropic.BetaAgentUpdateParams{Name: anthropic.String("researcher-2")})
	if err != nil {
		t.Fatalf("no-op update: %v", err)
	}
	if same.Version != 2 {
		t.Errorf("no-op update produced version %d, want 2", same.Version)
	}

	// Old versions stay readable.
	v1, err := client.Beta.Agents.Get(ctx, created.ID, anthropic.BetaAgentGetParams{Version: anthropic.Int(1)})
	if err != nil {
		t.Fatalf("get version 1: %v", err)
	}
	if v1.Version != 1 || v1.Name != "researcher" {
		t.Errorf("version 1 = %d %q, want 1 researcher", v1.Version, v1.Name)
	}
	_, err = client.Beta.Agents.Get(ctx, created.ID, anthropic.BetaAgentGetParams{Version: anthropic.Int(3)})
	wantAPIError(t, err, http.StatusNotFound)

	versions, err := client.Beta.Agents.Versions.List(ctx, created.ID, anthropic.BetaAgentVersionListParams{})
	if err != nil {
		t.Fatalf("list versions: %v", err)
	}
	if len(versions.Data) != 2 || versions.Data[0].Version != 2 || versions.Data[1].Version != 1 {
		t.Fatalf("versions = %d items, want [2 1]", len(versions.Data))
	}
}

// agentArchive: an archived agent is hidden from the default list, shown
// with include_archived, and cannot be updated.
func agentArchive(t *testing.T, client anthropic.Client, created *anthropic.BetaManagedAgentsAgent) {
	t.Helper()
	ctx := context.Background()
	archived, err := client.Beta.Agents.Archive(ctx, created.ID, anthropic.BetaAgentArchiveParams{})
	if err != nil {
		t.Fatalf("archive: %v", err)
	}
	if archived.ArchivedAt.IsZero() {
		t.Fatalf("archived agent has no archived_at")
	}
	list, err := client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(list.Data) != 0 {
		t.Errorf("default list shows %d archived agents, want 0", len(list.Data))
	}
	list, err = client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{IncludeArchived: anthropic.Bool(true)})
	if err != nil {
		t.Fatalf("list include_archived: %v", err)
	}
	if len(list.Data) != 1 || list.Data[0].ID != created.ID {
		t.Errorf("include_archived list = %d items, want the archived agent", len(list.Data))
	}
	_, err = client.Beta.Agents.Update(ctx, created.ID, anthropic.BetaAgentUpdateParams{Name: anthropic.String("y")})
	wantAPIError(t, err, http.StatusConflict)
}

func TestAgentListPagingAndFilters(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()

	const n = 105
	created := make([]string, 0, n)
	var middle time.Time
	for i := range n {
		a, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "agent", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-haiku-5-5"}})
		if err != nil {
			t.Fatalf("create agent %d: %v", i, err)
		}
		created = append(created, a.ID)
		if i == n/2 {
			middle = a.CreatedAt
		}
	}

	for _, limit := range []int64{0, 7, 100} {
		params := anthropic.BetaAgentListParams{}
		if limit > 0 {
			params.Limit = anthropic.Int(limit)
		}
		pager := client.Beta.Agents.ListAutoPaging(ctx, params)
		seen := map[string]bool{}
		var order []string
		for pager.Next() {
			a := pager.Current()
			if seen[a.ID] {
				t.Fatalf("limit %d: agent %s listed twice", limit, a.ID)
			}
			seen[a.ID] = true
			order = append(order, a.ID)
		}
		if err := pager.Err(); err != nil {
			t.Fatalf("limit %d: auto-paging: %v", limit, err)
		}
		if len(order) != n {
			t.Fatalf("limit %d: auto-paging returned %d agents, want %d", limit, len(order), n)
		}
		// Newest first: the reverse of creation order.
		for i, id := range order {
			if id != created[n-1-i] {
				t.Fatalf("limit %d: position %d is %s, want %s (newest first)", limit, i, id, created[n-1-i])
			}
		}
	}

	first, err := client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(first.Data) != 20 || first.NextPage == "" {
		t.Errorf("default page = %d items next %q, want 20 and a cursor", len(first.Data), first.NextPage)
	}

	gte, err := client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{CreatedAtGte: anthropic.Time(middle), Limit: anthropic.Int(100)})
	if err != nil {
		t.Fatalf("list created_at[gte]: %v", err)
	}
	lte, err := client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{CreatedAtLte: anthropic.Time(middle), Limit: anthropic.Int(100)})
	if err != nil {
		t.Fatalf("list created_at[lte]: %v", err)
	}
	for _, a := range gte.Data {
		if a.CreatedAt.Before(middle) {
			t.Errorf("created_at[gte] returned %s created %v before %v", a.ID, a.CreatedAt, middle)
		}
	}
	for _, a := range lte.Data {
		if a.CreatedAt.After(middle) {
			t.Errorf("created_at[lte] returned %s created %v after %v", a.ID, a.CreatedAt, middle)
		}
	}
	if len(gte.Data)+len(lte.Data) < n+1 || len(gte.Data) == 0 || len(lte.Data) == 0 {
		t.Errorf("gte %d + lte %d agents do not cover all %d (+ the boundary)", len(gte.Data), len(lte.Data), n)
	}
}
