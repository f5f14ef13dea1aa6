package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// pageShowsAll fails when the page lacks any of wants.
func pageShowsAll(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

// TestAgentCreateListAndOpen: an agent created through the form, with the
// built-in toolset asking before each call, is what the API stores, is
// listed with its model and version, and its page shows its configuration
// and the way to start a session with it; its name is shown escaped.
func TestAgentCreateListAndOpen(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	if code, body := v.get("/console/agents/new"); code != http.StatusOK {
		t.Fatalf("new-agent form: %d", code)
	} else {
		pageShowsAll(t, "the new-agent form", body, `name="toolset"`, `<option value="always_ask">`, `<label for="tools_json">`, `name="csrf"`)
	}
	id := agentFromForm(t, v, url.Values{"name": {"<script>x</script>"}, "model": {"claude-sonnet-4-5"}, "system": {"Be brief."},
		"description": {"Reads & writes"}, "toolset": {"1"}, "permission_policy": {"always_ask"}})

	client := anthropic.NewClient(option.WithBaseURL(srv.BaseURL), option.WithAPIKey(srv.APIKey))
	a, err := client.Beta.Agents.Get(context.Background(), id, anthropic.BetaAgentGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "<script>x</script>" || a.Model.ID != "claude-sonnet-4-5" || a.System != "Be brief." || a.Description != "Reads & writes" {
		t.Errorf("stored agent: name %q model %q system %q description %q, want the form's", a.Name, a.Model.ID, a.System, a.Description)
	}
	if len(a.Tools) != 1 || a.Tools[0].Type != "agent_toolset_20260401" || a.Tools[0].DefaultConfig.PermissionPolicy.Type != "always_ask" {
		t.Errorf("stored tools %s, want the agent toolset with default always_ask", a.JSON.Tools.Raw())
	}

	code, body := v.get("/console/agents")
	if code != http.StatusOK {
		t.Fatalf("agents page: %d", code)
	}
	pageShowsAll(t, "the agents page", body, `<a href="/console/agents/`+id+`">&lt;script&gt;x&lt;/script&gt;</a>`, "claude-sonnet-4-5", "v1")
	if strings.Contains(body, "<script>x</script>") {
		t.Error("the agents page shows the agent's name unescaped")
	}

	code, body = v.get("/console/agents/" + id)
	if code != http.StatusOK {
		t.Fatalf("agent page: %d", code)
	}
	pageShowsAll(t, "the agent page", body, "&lt;script&gt;x&lt;/script&gt;", "Be brief.", "Reads &amp; writes",
		`href="/console/sessions/new?agent_id=`+id+`"`, "agent_toolset_20260401", "always_ask",
		`action="/console/agents/`+id+`/archive"`, "one version: nothing to compare")
	if strings.Contains(body, "<script>x</script>") {
		t.Error("the agent page shows the agent's name unescaped")
	}
}

// TestAgentVersionsDiff: after an update through the API the agent page
// lists both versions and shows, by default, what changed from the
// previous one as marked lines; other pairs are chosen by number, and a
// version the agent does not have is refused by name.
func TestAgentVersionsDiff(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	id := agentFromForm(t, v, url.Values{"name": {"differ"}, "model": {"claude-sonnet-4-5"}, "system": {"Be brief."}, "toolset": {"1"},
		"permission_policy": {"always_allow"}})
	client := anthropic.NewClient(option.WithBaseURL(srv.BaseURL), option.WithAPIKey(srv.APIKey))
	if _, err := client.Beta.Agents.Update(context.Background(), id, anthropic.BetaAgentUpdateParams{
		System: anthropic.String("Be <thorough>."), Version: anthropic.Int(1)}); err != nil {
		t.Fatal(err)
	}

	code, body := v.get("/console/agents/" + id)
	if code != http.StatusOK {
		t.Fatalf("agent page: %d", code)
	}
	pageShowsAll(t, "the agent page after an update", body,
		`<span class="del">-   &#34;system&#34;: &#34;Be brief.&#34;,</span>`,
		`<span class="add">&#43;   &#34;system&#34;: &#34;Be &lt;thorough&gt;.&#34;,</span>`,
		"unchanged lines", `href="/console/agents/`+id+`?from=1&amp;to=2#diff-h"`, "v2")
	if n := strings.Count(body, `<span class="add">`) + strings.Count(body, `<span class="del">`); n != 2 {
		t.Errorf("the default diff has %d changed lines, want 2 (the system prompt's)", n)
	}

	code, body = v.get("/console/agents/" + id + "?from=2&to=1")
	pageShowsAll(t, "the reversed diff", body, `<span class="add">&#43;   &#34;system&#34;: &#34;Be brief.&#34;,</span>`)
	if code != http.StatusOK {
		t.Errorf("reversed diff: %d", code)
	}
	if _, body = v.get("/console/agents/" + id + "?from=2&to=2"); !strings.Contains(body, "v2 and v2 have the same configuration") {
		t.Error("comparing a version with itself does not say they are the same")
	}
	code, body = v.get("/console/agents/" + id + "?from=9")
	if code != http.StatusBadRequest || !strings.Contains(body, "from: &#34;9&#34; is not a version of this agent; expected a whole number from 1 to 2") {
		t.Errorf("diff from a missing version: %d, want 400 naming it\n%s", code, body)
	}
}

// TestAgentToolsJSONAndArchive: the advanced tools JSON replaces the
// toolset checkbox, malformed JSON is refused saying what was expected,
// and an archived agent leaves the list (but for the archived filter)
// and offers no new session.
func TestAgentToolsJSONAndArchive(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	code, _, body := v.post("/console/agents", url.Values{"name": {"bad"}, "model": {"m"}, "tools_json": {`{"type":"custom"}`}})
	if code != http.StatusBadRequest || !strings.Contains(body, "tools (JSON)") || !strings.Contains(body, "expected a JSON array of tool objects") {
		t.Errorf("tools that are not an array: %d, want 400 saying an array is expected\n%s", code, body)
	}
	code, _, body = v.post("/console/agents", url.Values{"name": {"bad"}, "model": {"m"}, "toolset": {"1"}, "permission_policy": {"sometimes"}})
	if code != http.StatusBadRequest || !strings.Contains(body, "always_allow, always_ask") {
		t.Errorf("an unknown permission policy: %d, want 400 naming the policies\n%s", code, body)
	}
	code, _, body = v.post("/console/agents", url.Values{"name": {""}, "model": {"m"}})
	if code != http.StatusBadRequest || !strings.Contains(body, "name") {
		t.Errorf("an agent without a name: %d, want the API's 400 naming the field\n%s", code, body)
	}

	tools := `[{"type":"custom","name":"get_weather","description":"The weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]`
	id := agentFromForm(t, v, url.Values{"name": {"custom-only"}, "model": {"m"}, "toolset": {"1"}, "permission_policy": {"always_ask"}, "tools_json": {tools}})
	client := anthropic.NewClient(option.WithBaseURL(srv.BaseURL), option.WithAPIKey(srv.APIKey))
	a, err := client.Beta.Agents.Get(context.Background(), id, anthropic.BetaAgentGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Tools) != 1 || a.Tools[0].Type != "custom" || a.Tools[0].Name != "get_weather" {
		t.Errorf("stored tools %s, want only the custom tool of the JSON", a.JSON.Tools.Raw())
	}

	if code, loc, _ := v.post("/console/agents/"+id+"/archive", nil); code != http.StatusSeeOther || loc != "/console/agents/"+id {
		t.Fatalf("archive: %d → %q, want 303 back to the agent", code, loc)
	}
	if a, err = client.Beta.Agents.Get(context.Background(), id, anthropic.BetaAgentGetParams{}); err != nil || a.ArchivedAt.IsZero() {
		t.Errorf("agent after archive: archived_at %v (err %v), want set", a.ArchivedAt, err)
	}
	_, body = v.get("/console/agents/" + id)
	pageShowsAll(t, "the archived agent's page", body, `<span class="badge">archived</span>`)
	if strings.Contains(body, "/console/sessions/new?agent_id=") {
		t.Error("the archived agent's page offers a new session")
	}
	if _, body = v.get("/console/agents"); strings.Contains(body, id) {
		t.Error("the agents list shows an archived agent without the archived filter")
	}
	if _, body = v.get("/console/agents?archived=1"); !strings.Contains(body, id) {
		t.Error("the agents list with the archived filter does not show the archived agent")
	}
}

// TestAgentListPages: more agents than a page holds are reached through
// the next-page link, which keeps the archived filter.
func TestAgentListPages(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	var first string
	for i := range 26 {
		id := agentFromForm(t, v, url.Values{"name": {fmt.Sprintf("agent %02d", i)}, "model": {"m"}})
		if i == 0 {
			first = id
		}
	}
	_, body := v.get("/console/agents?archived=1")
	if strings.Contains(body, first) {
		t.Fatal("the first page shows the oldest of 26 agents, want the newest 25")
	}
	m := regexp.MustCompile(`href="/console/agents\?(page=[A-Za-z0-9_-]+&amp;archived=1)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the first page of 26 agents has no next-page link keeping the filter\n%s", body)
	}
	code, body := v.get("/console/agents?" + strings.ReplaceAll(m[1], "&amp;", "&"))
	if code != http.StatusOK || !strings.Contains(body, first) || !strings.Contains(body, `name="archived" value="1" checked`) {
		t.Errorf("the next page: %d, shows the oldest agent %v, keeps the filter %v", code, strings.Contains(body, first),
			strings.Contains(body, `name="archived" value="1" checked`))
	}
}
