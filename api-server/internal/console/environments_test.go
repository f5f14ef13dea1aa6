package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// TestEnvironmentCreateListAndOpen: an environment created through the
// form with a configuration is what the API stores, is listed with its
// type and networking, and its page shows its configuration and the
// archive and delete actions (delete asks first); its name is escaped.
func TestEnvironmentCreateListAndOpen(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	if code, body := v.get("/console/environments/new"); code != http.StatusOK {
		t.Fatalf("new-environment form: %d", code)
	} else {
		pageShowsAll(t, "the new-environment form", body, `<label for="config">`, `name="csrf"`)
	}
	cfg := `{"type":"cloud","networking":{"type":"limited","allowed_hosts":["api.example.com"]}}`
	id := environmentFromForm(t, v, url.Values{"name": {"<script>x</script>"}, "description": {"for tests"}, "config": {cfg}})

	client := anthropic.NewClient(option.WithBaseURL(srv.BaseURL), option.WithAPIKey(srv.APIKey))
	e, err := client.Beta.Environments.Get(context.Background(), id, anthropic.BetaEnvironmentGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "<script>x</script>" || e.Description != "for tests" || e.Config.Type != "cloud" || e.Config.Networking.Type != "limited" ||
		len(e.Config.Networking.AllowedHosts) != 1 || e.Config.Networking.AllowedHosts[0] != "api.example.com" {
		t.Errorf("stored environment %s, want the form's name, description and config", e.RawJSON())
	}

	code, body := v.get("/console/environments")
	if code != http.StatusOK {
		t.Fatalf("environments page: %d", code)
	}
	pageShowsAll(t, "the environments page", body, `<a href="/console/environments/`+id+`">&lt;script&gt;x&lt;/script&gt;</a>`, "<td>cloud</td>", "<td>limited</td>")
	if strings.Contains(body, "<script>x</script>") {
		t.Error("the environments page shows the name unescaped")
	}

	code, body = v.get("/console/environments/" + id)
	if code != http.StatusOK {
		t.Fatalf("environment page: %d", code)
	}
	pageShowsAll(t, "the environment page", body, "&lt;script&gt;x&lt;/script&gt;", "for tests", "<code>api.example.com</code>",
		`&#34;allowed_hosts&#34;: [`, `action="/console/environments/`+id+`/archive"`)
	if !regexp.MustCompile(`action="/console/environments/` + id + `/delete" data-confirm="[^"]+"`).MatchString(body) {
		t.Error("the environment page has no delete form that asks first (data-confirm)")
	}
	if strings.Contains(body, "<script>x</script>") {
		t.Error("the environment page shows the name unescaped")
	}
}

// TestEnvironmentRefusals: a config that is not a JSON object is refused
// saying what was expected; one the API rejects, and a duplicate name,
// show the API's error.
func TestEnvironmentRefusals(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	code, _, body := v.post("/console/environments", url.Values{"name": {"x"}, "config": {`["cloud"]`}})
	if code != http.StatusBadRequest || !strings.Contains(body, "config (JSON)") || !strings.Contains(body, "expected a JSON object") {
		t.Errorf("a config that is an array: %d, want 400 saying an object is expected\n%s", code, body)
	}
	code, _, body = v.post("/console/environments", url.Values{"name": {"x"}, "config": {`{"type":"cloud"} {}`}})
	if code != http.StatusBadRequest || !strings.Contains(body, "more after the object") {
		t.Errorf("a config with trailing data: %d, want 400\n%s", code, body)
	}
	code, _, body = v.post("/console/environments", url.Values{"name": {"x"}, "config": {`{"type":"moon"}`}})
	if code != http.StatusBadRequest || !strings.Contains(body, "config") {
		t.Errorf("a config of an unknown type: %d, want the API's 400 naming config\n%s", code, body)
	}
	environmentFromForm(t, v, url.Values{"name": {"twice"}})
	code, _, body = v.post("/console/environments", url.Values{"name": {"twice"}})
	if code != http.StatusConflict || !strings.Contains(body, "already exists") {
		t.Errorf("a duplicate name: %d, want the API's 409\n%s", code, body)
	}
}

// TestEnvironmentArchiveAndDelete: an archived environment leaves the list
// (but for the archived filter); a deleted one is gone, from the API too.
func TestEnvironmentArchiveAndDelete(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	id := environmentFromForm(t, v, url.Values{"name": {"short-lived"}})
	_, body := v.get("/console/environments/" + id)
	pageShowsAll(t, "a new environment's page", body, "unrestricted")

	if code, loc, _ := v.post("/console/environments/"+id+"/archive", nil); code != http.StatusSeeOther || loc != "/console/environments/"+id {
		t.Fatalf("archive: %d → %q, want 303 back to the environment", code, loc)
	}
	_, body = v.get("/console/environments/" + id)
	pageShowsAll(t, "the archived environment's page", body, `<span class="badge">archived</span>`)
	if _, body = v.get("/console/environments"); strings.Contains(body, id) {
		t.Error("the environments list shows an archived environment without the archived filter")
	}
	if _, body = v.get("/console/environments?archived=1"); !strings.Contains(body, id) {
		t.Error("the environments list with the archived filter does not show the archived environment")
	}

	if code, loc, _ := v.post("/console/environments/"+id+"/delete", nil); code != http.StatusSeeOther || loc != "/console/environments" {
		t.Fatalf("delete: %d → %q, want 303 to the list", code, loc)
	}
	if code, _ := v.get("/console/environments/" + id); code != http.StatusNotFound {
		t.Errorf("the deleted environment's page: %d, want 404", code)
	}
	client := anthropic.NewClient(option.WithBaseURL(srv.BaseURL), option.WithAPIKey(srv.APIKey))
	if _, err := client.Beta.Environments.Get(context.Background(), id, anthropic.BetaEnvironmentGetParams{}); err == nil {
		t.Error("the API still has the deleted environment")
	}
}
