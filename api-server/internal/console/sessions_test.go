package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// TestSessionListFiltersAndArchive: the sessions list shows titles escaped,
// filters by agent and status (refusing an unknown status), pages through
// 26 sessions by its next link, and archiving through the console archives
// the session (it then shows as archived, and leaves the default list).
func TestSessionListFiltersAndArchive(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	ctx := context.Background()
	client := anthropic.NewClient(option.WithBaseURL(srv.BaseURL), option.WithAPIKey(srv.APIKey))
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("sessions-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	newAgent := func(name string) string {
		a, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: name, Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}})
		if err != nil {
			t.Fatal(err)
		}
		return a.ID
	}
	one, other := newAgent("one"), newAgent("other")
	var ids []string
	for i := range 26 {
		s, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(one)},
			EnvironmentID: env.ID, Title: anthropic.String(fmt.Sprintf("<b>title %d</b>", i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	lone, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(other)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}

	_, first := v.get("/console/sessions?agent_id=" + one)
	if strings.Contains(first, "<b>title") || !strings.Contains(first, "&lt;b&gt;title 25&lt;/b&gt;") {
		t.Errorf("the list does not show the titles escaped")
	}
	if strings.Contains(first, lone.ID) {
		t.Errorf("the list filtered on agent %s shows %s of another agent", one, lone.ID)
	}
	m := regexpNext.FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("no next page link on the first page of 26 sessions")
	}
	_, second := v.get(strings.ReplaceAll(m[1], "&amp;", "&"))
	if !strings.Contains(second, ids[0]) || strings.Contains(second, ids[25]) {
		t.Errorf("the second page does not hold the oldest session and only it")
	}
	if code, body := v.get("/console/sessions?status=sleeping"); code != http.StatusBadRequest || !strings.Contains(body, "idle, running, rescheduling, terminated") {
		t.Errorf("an unknown status filter: %d, want 400 naming the statuses", code)
	}
	if _, idle := v.get("/console/sessions?status=running&agent_id=" + other); strings.Contains(idle, lone.ID) {
		t.Errorf("the running filter shows the idle session %s", lone.ID)
	}

	if code, loc, _ := v.post("/console/sessions/"+lone.ID+"/archive", url.Values{}); code != http.StatusSeeOther || loc != "/console/sessions/"+lone.ID {
		t.Fatalf("archive: %d → %q", code, loc)
	}
	got, err := client.Beta.Sessions.Get(ctx, lone.ID, anthropic.BetaSessionGetParams{})
	if err != nil || got.ArchivedAt.IsZero() {
		t.Fatalf("after the console's archive the session is %v, %v; want archived", got.ArchivedAt, err)
	}
	if _, page := v.get("/console/sessions/" + lone.ID); !strings.Contains(page, "Archived") || strings.Contains(page, `action="/console/sessions/`+lone.ID+`/messages"`) {
		t.Errorf("the archived session's page does not say so, or still offers to send a message")
	}
	if _, all := v.get("/console/sessions?agent_id=" + other); strings.Contains(all, lone.ID) {
		t.Errorf("the default list shows the archived session")
	}
	if _, all := v.get("/console/sessions?archived=1&agent_id=" + other); !strings.Contains(all, lone.ID) {
		t.Errorf("the list with archived sessions lacks it")
	}
}
