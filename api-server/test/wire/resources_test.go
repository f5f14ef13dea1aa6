package wire

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// plantedToken is a repository token that must never come back.
const plantedToken = "ghp_PLANTED_resource_token_9f8e7d"

func newSessionWith(t *testing.T, client anthropic.Client, resources []anthropic.BetaSessionNewParamsResourceUnion) (*anthropic.BetaManagedAgentsSession, error) {
	t.Helper()
	ctx := context.Background()
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "resources",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "resources-" + agent.ID})
	if err != nil {
		t.Fatal(err)
	}
	return client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)},
		EnvironmentID: env.ID, Resources: resources})
}

// TestSessionResourcesLifecycle drives Sessions.New resources and the
// Resources sub-API through the SDK: a file gets a session copy of its
// own id, a repository's token is stored but never returned, the
// resources are listed, updated and deleted.
func TestSessionResourcesLifecycle(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	up := uploadCSV(t, client, "data.csv")

	sess, err := newSessionWith(t, client, []anthropic.BetaSessionNewParamsResourceUnion{
		{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: up.ID, MountPath: anthropic.String("data.csv")}},
		{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{URL: "https://github.com/acme/widgets.git",
			AuthorizationToken: plantedToken,
			Checkout: anthropic.BetaManagedAgentsGitHubRepositoryResourceParamsCheckoutUnion{
				OfBranch: &anthropic.BetaManagedAgentsBranchCheckoutParam{Name: "main"}}}},
	})
	if err != nil {
		t.Fatalf("create session with resources: %v", err)
	}
	file, repo := checkCreatedResources(t, sess, up)

	// The session copy is a file of its own, scoped to the session.
	copyMeta, err := client.Beta.Files.GetMetadata(ctx, file.FileID, anthropic.BetaFileGetMetadataParams{})
	if err != nil {
		t.Fatalf("metadata of the session copy: %v", err)
	}
	if copyMeta.Scope.ID != sess.ID || copyMeta.SizeBytes != up.SizeBytes || copyMeta.Downloadable {
		t.Fatalf("session copy = %s; want scope %s, %d bytes, not downloadable", copyMeta.RawJSON(), sess.ID, up.SizeBytes)
	}

	// Add, get, list.
	added, err := client.Beta.Sessions.Resources.Add(ctx, sess.ID, anthropic.BetaSessionResourceAddParams{
		BetaManagedAgentsFileResourceParams: anthropic.BetaManagedAgentsFileResourceParams{FileID: up.ID}})
	if err != nil {
		t.Fatalf("add a resource: %v", err)
	}
	if added.MountPath != "/mnt/session/uploads/"+up.ID {
		t.Fatalf("default mount path = %q, want /mnt/session/uploads/%s", added.MountPath, up.ID)
	}
	got, err := client.Beta.Sessions.Resources.Get(ctx, repo.ID, anthropic.BetaSessionResourceGetParams{SessionID: sess.ID})
	if err != nil || got.AsGitHubRepository().URL != repo.URL || strings.Contains(got.RawJSON(), plantedToken) {
		t.Fatalf("get repository resource = %v, %v", got, err)
	}
	var ids []string
	pager := client.Beta.Sessions.Resources.ListAutoPaging(ctx, sess.ID, anthropic.BetaSessionResourceListParams{Limit: anthropic.Int(2)})
	for pager.Next() {
		ids = append(ids, pager.Current().ID)
	}
	if err := pager.Err(); err != nil || len(ids) != 3 || ids[0] != file.ID || ids[2] != added.ID {
		t.Fatalf("listed %v (%v), want [%s %s %s]", ids, err, file.ID, repo.ID, added.ID)
	}

	// Update: the token is replaced and still never shown; a file has none.
	upd, err := client.Beta.Sessions.Resources.Update(ctx, repo.ID, anthropic.BetaSessionResourceUpdateParams{SessionID: sess.ID,
		AuthorizationToken: plantedToken + "-rotated"})
	if err != nil || strings.Contains(upd.RawJSON(), plantedToken) {
		t.Fatalf("update token = %v, %v", upd, err)
	}
	_, err = client.Beta.Sessions.Resources.Update(ctx, file.ID, anthropic.BetaSessionResourceUpdateParams{SessionID: sess.ID,
		AuthorizationToken: "x"})
	wantAPIError(t, err, http.StatusBadRequest)

	// Delete: gone from the list, its session copy deleted.
	del, err := client.Beta.Sessions.Resources.Delete(ctx, file.ID, anthropic.BetaSessionResourceDeleteParams{SessionID: sess.ID})
	if err != nil || del.ID != file.ID || string(del.Type) != "session_resource_deleted" {
		t.Fatalf("delete = %v, %v", del, err)
	}
	_, err = client.Beta.Sessions.Resources.Get(ctx, file.ID, anthropic.BetaSessionResourceGetParams{SessionID: sess.ID})
	wantAPIError(t, err, http.StatusNotFound)
	_, err = client.Beta.Files.GetMetadata(ctx, file.FileID, anthropic.BetaFileGetMetadataParams{})
	wantAPIError(t, err, http.StatusNotFound)
	if _, err := client.Beta.Files.GetMetadata(ctx, up.ID, anthropic.BetaFileGetMetadataParams{}); err != nil {
		t.Fatalf("the uploaded file went with its session copy: %v", err)
	}
	s, err := client.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
	if err != nil || len(s.Resources) != 2 {
		t.Fatalf("session after delete has %d resources (%v), want 2", len(s.Resources), err)
	}

	tokenSealedAtRest(t, srv.DatabaseURL)
}

// checkCreatedResources checks the new session's resources: no token,
// the file as a session copy of its own, the repository on its branch.
func checkCreatedResources(t *testing.T, sess *anthropic.BetaManagedAgentsSession, up *anthropic.BetaFileMetadata) (anthropic.BetaManagedAgentsFileResource, anthropic.BetaManagedAgentsGitHubRepositoryResource) {
	t.Helper()
	if strings.Contains(sess.RawJSON(), plantedToken) {
		t.Fatal("the session response contains the repository token")
	}
	if len(sess.Resources) != 2 {
		t.Fatalf("session has %d resources, want 2: %s", len(sess.Resources), sess.RawJSON())
	}
	if _, ok := sess.Resources[0].AsAny().(anthropic.BetaManagedAgentsFileResource); !ok {
		t.Errorf("resources[0] decodes as %T, want BetaManagedAgentsFileResource", sess.Resources[0].AsAny())
	}
	if _, ok := sess.Resources[1].AsAny().(anthropic.BetaManagedAgentsGitHubRepositoryResource); !ok {
		t.Errorf("resources[1] decodes as %T, want BetaManagedAgentsGitHubRepositoryResource", sess.Resources[1].AsAny())
	}
	file := sess.Resources[0].AsFile()
	if file.MountPath != "/mnt/session/uploads/data.csv" || !strings.HasPrefix(file.FileID, "file_") || file.FileID == up.ID {
		t.Fatalf("file resource = %s; want mount /mnt/session/uploads/data.csv and a session copy with its own file id", file.RawJSON())
	}
	repo := sess.Resources[1].AsGitHubRepository()
	if repo.MountPath != "/workspace/widgets" || repo.URL != "https://github.com/acme/widgets.git" || repo.Checkout.AsBranch().Name != "main" {
		t.Fatalf("repository resource = %s; want mount /workspace/widgets and branch main", repo.RawJSON())
	}
	return file, repo
}

// tokenSealedAtRest: the token is sealed at rest: the database holds no
// clear text.
func tokenSealedAtRest(t *testing.T, databaseURL string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var leaks int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM session_resources WHERE position($1::bytea IN token_sealed) > 0`,
		[]byte(plantedToken)).Scan(&leaks); err != nil {
		t.Fatal(err)
	}
	if leaks != 0 {
		t.Fatalf("%d rows hold the token in clear", leaks)
	}
}

// TestSessionResourcesRefused: bad resources answer 400 naming the field
// (a memory store that does not exist too), conflicts are 409.
func TestSessionResourcesRefused(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	up := uploadCSV(t, client, "x.csv")
	cases := []struct {
		name     string
		resource anthropic.BetaSessionNewParamsResourceUnion
		want     string
	}{
		{"unknown file", anthropic.BetaSessionNewParamsResourceUnion{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: "file_nope"}},
			"resources[0].file_id"},
		{"escaping mount", anthropic.BetaSessionNewParamsResourceUnion{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: up.ID,
			MountPath: anthropic.String("../../etc/passwd")}}, "resources[0].mount_path"},
		{"mount outside", anthropic.BetaSessionNewParamsResourceUnion{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: up.ID,
			MountPath: anthropic.String("/etc/passwd")}}, "must lie under"},
		{"credentials in url", anthropic.BetaSessionNewParamsResourceUnion{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{
			URL: "https://user:pw@github.com/a/b"}}, "resources[0].url"},
		{"short sha", anthropic.BetaSessionNewParamsResourceUnion{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{
			URL: "https://github.com/a/b", Checkout: anthropic.BetaManagedAgentsGitHubRepositoryResourceParamsCheckoutUnion{
				OfCommit: &anthropic.BetaManagedAgentsCommitCheckoutParam{Sha: "abc123"}}}}, "resources[0].checkout.sha"},
		{"memory store", anthropic.BetaSessionNewParamsResourceUnion{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{
			MemoryStoreID: "memstore_000000000000000000000000"}}, "resources[0].memory_store_id: memory store"},
	}
	for _, tc := range cases {
		_, err := newSessionWith(t, client, []anthropic.BetaSessionNewParamsResourceUnion{tc.resource})
		apiErr := apiErrorWithStatus(t, err, http.StatusBadRequest)
		if !strings.Contains(apiErr.RawJSON(), tc.want) {
			t.Errorf("%s: error %s does not mention %q", tc.name, apiErr.RawJSON(), tc.want)
		}
	}
	// Two resources at one mount path.
	sess, err := newSessionWith(t, client, []anthropic.BetaSessionNewParamsResourceUnion{
		{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: up.ID}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Beta.Sessions.Resources.Add(ctx, sess.ID, anthropic.BetaSessionResourceAddParams{
		BetaManagedAgentsFileResourceParams: anthropic.BetaManagedAgentsFileResourceParams{FileID: up.ID}})
	wantAPIError(t, err, http.StatusConflict)
	// Archived sessions take no resources.
	if _, err := client.Beta.Sessions.Archive(ctx, sess.ID, anthropic.BetaSessionArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	_, err = client.Beta.Sessions.Resources.Add(ctx, sess.ID, anthropic.BetaSessionResourceAddParams{
		BetaManagedAgentsFileResourceParams: anthropic.BetaManagedAgentsFileResourceParams{FileID: up.ID, MountPath: anthropic.String("other.csv")}})
	wantAPIError(t, err, http.StatusConflict)
	// Unknown ids.
	_, err = client.Beta.Sessions.Resources.Get(ctx, "sesrsc_nope", anthropic.BetaSessionResourceGetParams{SessionID: sess.ID})
	wantAPIError(t, err, http.StatusNotFound)
	_, err = client.Beta.Sessions.Resources.List(ctx, "sesn_nope", anthropic.BetaSessionResourceListParams{})
	wantAPIError(t, err, http.StatusNotFound)
}

// TestRepositoryTokenNeedsKeys: without MANGO_VAULT_KEYS a token cannot be
// stored, and the server says so (422) rather than storing it in clear.
func TestRepositoryTokenNeedsKeys(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_VAULT_KEYS", ""))
	client := newClient(t, srv)
	_, err := newSessionWith(t, client, []anthropic.BetaSessionNewParamsResourceUnion{
		{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{URL: "https://github.com/a/b", AuthorizationToken: plantedToken}}})
	apiErr := apiErrorWithStatus(t, err, http.StatusUnprocessableEntity)
	if strings.Contains(apiErr.RawJSON(), plantedToken) {
		t.Fatal("the error echoes the token")
	}
	// Without a token the repository is accepted.
	if _, err := newSessionWith(t, client, []anthropic.BetaSessionNewParamsResourceUnion{
		{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{URL: "https://github.com/a/b"}}}); err != nil {
		t.Fatalf("public repository without keys: %v", err)
	}
}
