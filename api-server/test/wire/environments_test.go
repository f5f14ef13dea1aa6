package wire

import (
	"context"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

func TestEnvironmentLifecycle(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()

	env := createCIEnvironment(t, client)

	got, err := client.Beta.Environments.Get(ctx, env.ID, anthropic.BetaEnvironmentGetParams{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.RawJSON() != env.RawJSON() {
		t.Errorf("get differs from create:\n got %s\nwant %s", got.RawJSON(), env.RawJSON())
	}

	// Names are unique.
	_, err = client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "ci"})
	wantAPIError(t, err, http.StatusConflict)

	selfHosted, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{
		Name:   "on-prem",
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfSelfHosted: &anthropic.BetaSelfHostedConfigParams{}},
	})
	if err != nil {
		t.Fatalf("create self-hosted: %v", err)
	}
	if selfHosted.Config.Type != "self_hosted" {
		t.Errorf("config type = %q, want self_hosted", selfHosted.Config.Type)
	}
	_, err = client.Beta.Environments.Update(ctx, selfHosted.ID, anthropic.BetaEnvironmentUpdateParams{Name: anthropic.String("ci")})
	wantAPIError(t, err, http.StatusConflict)

	updated, err := client.Beta.Environments.Update(ctx, env.ID, anthropic.BetaEnvironmentUpdateParams{
		Name: anthropic.String("ci-2"),
		Config: anthropic.BetaEnvironmentUpdateParamsConfigUnion{OfCloud: &anthropic.BetaCloudConfigParams{
			Networking: anthropic.BetaCloudConfigParamsNetworkingUnion{OfUnrestricted: &anthropic.BetaUnrestrictedNetworkParam{}},
		}},
		Metadata: map[string]string{"cost": "low"},
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if updated.Name != "ci-2" || updated.Config.Networking.Type != "unrestricted" || updated.Description != "build sandbox" {
		t.Errorf("updated = name %q networking %q description %q", updated.Name, updated.Config.Networking.Type, updated.Description)
	}
	if updated.Metadata["owner"] != "platform" || updated.Metadata["cost"] != "low" {
		t.Errorf("metadata = %v, want owner and cost", updated.Metadata)
	}

	environmentPagingAndArchive(t, client, selfHosted.ID)

	deleted, err := client.Beta.Environments.Delete(ctx, env.ID, anthropic.BetaEnvironmentDeleteParams{})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if deleted.ID != env.ID || deleted.Type != "environment_deleted" {
		t.Errorf("delete = %+v, want id and environment_deleted", deleted)
	}
	_, err = client.Beta.Environments.Get(ctx, env.ID, anthropic.BetaEnvironmentGetParams{})
	wantAPIError(t, err, http.StatusNotFound)
	_, err = client.Beta.Environments.Delete(ctx, env.ID, anthropic.BetaEnvironmentDeleteParams{})
	wantAPIError(t, err, http.StatusNotFound)
	// The name is free again.
	if _, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "ci-2"}); err != nil {
		t.Errorf("reuse a deleted environment's name: %v", err)
	}
}

// createCIEnvironment creates the limited-networking cloud environment
// "ci" with packages and checks what comes back.
func createCIEnvironment(t *testing.T, client anthropic.Client) *anthropic.BetaEnvironment {
	t.Helper()
	ctx := context.Background()
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{
		Name:        "ci",
		Description: anthropic.String("build sandbox"),
		Metadata:    map[string]string{"owner": "platform"},
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfCloud: &anthropic.BetaCloudConfigParams{
			Networking: anthropic.BetaCloudConfigParamsNetworkingUnion{OfLimited: &anthropic.BetaLimitedNetworkParams{
				AllowedHosts:         []string{"api.github.com", "*.pypi.org"},
				AllowPackageManagers: anthropic.Bool(true),
			}},
			Packages: anthropic.BetaPackagesParams{Pip: []string{"requests==2.32.0"}, Apt: []string{"jq"}},
		}},
	})
	if err != nil {
		t.Fatalf("create environment: %v", err)
	}
	if env.Type != "environment" || env.Name != "ci" || env.Config.Type != "cloud" {
		t.Fatalf("created = %+v", env)
	}
	net := env.Config.Networking
	if net.Type != "limited" || len(net.AllowedHosts) != 2 || !net.AllowPackageManagers || net.AllowMCPServers {
		t.Errorf("networking = %+v, want limited, 2 hosts, package managers allowed, MCP not", net)
	}
	if len(env.Config.Packages.Pip) != 1 || len(env.Config.Packages.Apt) != 1 || env.Config.Packages.Npm == nil {
		t.Errorf("packages = %+v", env.Config.Packages)
	}
	if env.ArchivedAt != "" {
		t.Errorf("archived_at = %q, want null", env.ArchivedAt)
	}
	return env
}

// environmentPagingAndArchive pages over every environment, then
// archives the self-hosted one: hidden by default, listed with
// include_archived.
func environmentPagingAndArchive(t *testing.T, client anthropic.Client, selfHostedID string) {
	t.Helper()
	ctx := context.Background()
	for i := range 5 {
		if _, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "bulk-" + string(rune('a'+i))}); err != nil {
			t.Fatalf("create bulk %d: %v", i, err)
		}
	}
	pager := client.Beta.Environments.ListAutoPaging(ctx, anthropic.BetaEnvironmentListParams{Limit: anthropic.Int(2)})
	count := 0
	for pager.Next() {
		count++
	}
	if err := pager.Err(); err != nil {
		t.Fatalf("auto-paging: %v", err)
	}
	if count != 7 {
		t.Errorf("listed %d environments, want 7", count)
	}

	archived, err := client.Beta.Environments.Archive(ctx, selfHostedID, anthropic.BetaEnvironmentArchiveParams{})
	if err != nil {
		t.Fatalf("archive: %v", err)
	}
	if archived.ArchivedAt == "" {
		t.Errorf("archived environment has no archived_at")
	}
	page, err := client.Beta.Environments.List(ctx, anthropic.BetaEnvironmentListParams{Limit: anthropic.Int(100)})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(page.Data) != 6 {
		t.Errorf("default list = %d, want 6 (archived hidden)", len(page.Data))
	}
	page, err = client.Beta.Environments.List(ctx, anthropic.BetaEnvironmentListParams{Limit: anthropic.Int(100), IncludeArchived: anthropic.Bool(true)})
	if err != nil {
		t.Fatalf("list include_archived: %v", err)
	}
	if len(page.Data) != 7 {
		t.Errorf("include_archived list = %d, want 7", len(page.Data))
	}
}
