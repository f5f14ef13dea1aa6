package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// resourceSDK is the official SDK's client of srv.
func resourceSDK(srv *testserver.Server) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(srv.BaseURL), option.WithAPIKey(srv.APIKey))
}

// deploymentFixture creates an agent and an environment through the
// API and returns their ids.
func deploymentFixture(t *testing.T, client anthropic.Client, agentName string) (string, string) {
	t.Helper()
	ctx := context.Background()
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: agentName,
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "console-env"})
	if err != nil {
		t.Fatal(err)
	}
	return agent.ID, env.ID
}

// pageHas fails t unless body has every one of wants.
func pageHas(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

// pageLacks fails t when body has one of bad.
func pageLacks(t *testing.T, what, body string, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if strings.Contains(body, b) {
			t.Errorf("%s has %q, want it absent", what, b)
		}
	}
}

var runSessionLink = regexp.MustCompile(`href="/console/sessions/(sesn_[^"]+)"`)

// deploymentEnv is a server, a signed-in visitor, the SDK, an agent and an
// environment.
type deploymentEnv struct {
	v       *visitor
	client  anthropic.Client
	agentID string
	envID   string
}

func newDeploymentEnv(t *testing.T) *deploymentEnv {
	t.Helper()
	srv := testserver.Start(t)
	e := &deploymentEnv{v: signedIn(t, srv), client: resourceSDK(srv)}
	e.agentID, e.envID = deploymentFixture(t, e.client, "digest <b>agent</b>")
	return e
}

// form is a valid create form of the console.
func (e *deploymentEnv) form() url.Values {
	return url.Values{"name": {"<script>x</script>"}, "agent_id": {e.agentID}, "environment_id": {e.envID},
		"message": {"Summarise <i>yesterday</i>"}, "cron": {"0 7 1 1 *"}, "timezone": {"Europe/Berlin"}}
}

// create posts the create form and returns the new deployment's id.
func (e *deploymentEnv) create(t *testing.T, form url.Values) string {
	t.Helper()
	code, loc, _ := e.v.post("/console/deployments", form)
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/deployments/depl_") {
		t.Fatalf("create: %d → %q, want 303 to the deployment's page", code, loc)
	}
	id := strings.TrimPrefix(loc, "/console/deployments/")
	// An archived deployment's schedule is deleted: the shared Temporal
	// server does not keep firing it after the test.
	t.Cleanup(func() {
		_, _ = e.client.Beta.Deployments.Archive(context.Background(), id, anthropic.BetaDeploymentArchiveParams{})
	})
	return id
}

// status is the deployment's status as the API answers it.
func (e *deploymentEnv) status(t *testing.T, id string) string {
	t.Helper()
	d, err := e.client.Beta.Deployments.Get(context.Background(), id, anthropic.BetaDeploymentGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if !d.ArchivedAt.IsZero() {
		return "archived"
	}
	return string(d.Status)
}

// TestDeploymentCreate: the create form offers the agents and
// environments; it is refused without a message, or with a cron
// expression but no time zone; a deployment created through it is what
// the API holds, listed with its schedule and shown with its initial
// message, its name escaped everywhere.
func TestDeploymentCreate(t *testing.T) {
	e := newDeploymentEnv(t)
	if code, body := e.v.get("/console/deployments"); code != http.StatusOK || !strings.Contains(body, "No deployments.") {
		t.Fatalf("empty deployments list: %d, want 200 with \"No deployments.\"", code)
	}
	code, body := e.v.get("/console/deployments/new")
	if code != http.StatusOK {
		t.Fatalf("new deployment form: %d", code)
	}
	pageHas(t, "new deployment form", body, `value="`+e.agentID+`"`, `value="`+e.envID+`"`, "digest &lt;b&gt;agent&lt;/b&gt;", `name="csrf"`)

	form := e.form()
	form.Set("message", "  ")
	if code, _, body := e.v.post("/console/deployments", form); code != http.StatusBadRequest || !strings.Contains(body, "initial message") {
		t.Errorf("create without a message: %d, want 400 naming the initial message", code)
	}
	form = e.form()
	form.Set("timezone", "")
	if code, _, body := e.v.post("/console/deployments", form); code != http.StatusBadRequest || !strings.Contains(body, "IANA time zone") {
		t.Errorf("create with a cron expression but no time zone: %d, want 400 asking for an IANA time zone", code)
	}
	id := e.create(t, e.form())
	d, err := e.client.Beta.Deployments.Get(context.Background(), id, anthropic.BetaDeploymentGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "<script>x</script>" || d.Agent.ID != e.agentID || d.EnvironmentID != e.envID || d.Schedule.Expression != "0 7 1 1 *" ||
		d.Schedule.Timezone != "Europe/Berlin" || len(d.InitialEvents) != 1 || d.InitialEvents[0].Type != "user.message" {
		t.Errorf("the API's deployment: %s", d.RawJSON())
	} else if c := d.InitialEvents[0].AsUserMessage().Content; len(c) != 1 || c[0].Text != "Summarise <i>yesterday</i>" {
		t.Errorf("the API's initial message: %s, want the form's text", d.InitialEvents[0].RawJSON())
	}

	_, body = e.v.get("/console/deployments")
	pageHas(t, "deployments list", body, "&lt;script&gt;x&lt;/script&gt;", `href="/console/deployments/`+id+`"`, "0 7 1 1 *", "Europe/Berlin",
		"status-active", "digest &lt;b&gt;agent&lt;/b&gt;", e.envID)
	pageLacks(t, "deployments list", body, "<script>x</script>")
	_, body = e.v.get("/console/deployments/" + id)
	pageHas(t, "deployment page", body, "&lt;script&gt;x&lt;/script&gt;", "Summarise &lt;i&gt;yesterday&lt;/i&gt;", "Run now", ">Pause<",
		`action="/console/deployments/`+id+`/archive" data-confirm=`, "No runs yet.")
	pageLacks(t, "deployment page", body, "<script>x</script>", "<i>yesterday</i>", ">Unpause<")
	if code, body := e.v.get("/console/deployments/depl_0000000000000000000000000"); code != http.StatusNotFound || !strings.Contains(body, "not found") {
		t.Errorf("unknown deployment: %d, want 404 saying not found", code)
	}
}

// TestDeploymentActions: a deployment's page runs it (the run links its
// session), pauses and unpauses it, shows a failed run's error and the
// pause it caused, and archives it (then offers no actions, and the list
// shows it only with the archived ones).
func TestDeploymentActions(t *testing.T) {
	e := newDeploymentEnv(t)
	ctx := context.Background()
	id := e.create(t, e.form())
	page := "/console/deployments/" + id

	if code, loc, _ := e.v.post(page+"/run", nil); code != http.StatusSeeOther || loc != page {
		t.Fatalf("run now: %d → %q, want 303 back to %s", code, loc, page)
	}
	runs, err := e.client.Beta.DeploymentRuns.List(ctx, anthropic.BetaDeploymentRunListParams{DeploymentID: anthropic.String(id)})
	if err != nil || len(runs.Data) != 1 || runs.Data[0].SessionID == "" {
		t.Fatalf("runs after run now: %v %+v, want one with a session", err, runs)
	}
	_, body := e.v.get(page)
	if m := runSessionLink.FindStringSubmatch(body); m == nil || m[1] != runs.Data[0].SessionID {
		t.Errorf("deployment page's run links session %v, want %s", m, runs.Data[0].SessionID)
	}
	pageHas(t, "deployment page after a run", body, runs.Data[0].ID, "manual")

	if code, loc, _ := e.v.post(page+"/pause", nil); code != http.StatusSeeOther || loc != page {
		t.Fatalf("pause: %d → %q", code, loc)
	}
	_, body = e.v.get(page)
	pageHas(t, "paused deployment page", body, "status-paused", "paused by its client", ">Unpause<")
	if s := e.status(t, id); s != "paused" {
		t.Errorf("status after pause: %s, want paused", s)
	}
	if code, _, _ := e.v.post(page+"/unpause", nil); code != http.StatusSeeOther {
		t.Fatalf("unpause: %d", code)
	}
	if s := e.status(t, id); s != "active" {
		t.Errorf("status after unpause: %s, want active", s)
	}

	// With its agent archived, the deployment is paused with that error
	// and a run records it instead of a session.
	if _, err := e.client.Beta.Agents.Archive(ctx, e.agentID, anthropic.BetaAgentArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := e.v.post(page+"/run", nil); code != http.StatusSeeOther {
		t.Fatalf("run with the agent archived: %d, want 303 (the run records the error)", code)
	}
	_, body = e.v.get(page)
	pageHas(t, "deployment page after a failed run", body, "status-paused", "a run or what it uses failed: <code>agent_archived_error</code>",
		`<span class="badge badge-error">error</span> <code>agent_archived_error</code>: agent &#34;`+e.agentID+`&#34; is archived`)

	if code, _, _ := e.v.post(page+"/archive", nil); code != http.StatusSeeOther {
		t.Fatalf("archive: %d", code)
	}
	_, body = e.v.get(page)
	pageHas(t, "archived deployment page", body, "status-archived")
	pageLacks(t, "archived deployment page", body, "Run now", ">Pause<")
	if s := e.status(t, id); s != "archived" {
		t.Errorf("status after archive: %s, want archived", s)
	}
	if _, body := e.v.get("/console/deployments"); strings.Contains(body, id) {
		t.Errorf("deployments list after archive lists the archived %s", id)
	}
	if _, body := e.v.get("/console/deployments?archived=1"); !strings.Contains(body, id) {
		t.Errorf("deployments list with archived ones lacks %s", id)
	}
}
