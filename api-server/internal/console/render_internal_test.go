package console

import (
	"bytes"
	"strings"
	"testing"
)

// TestNextPageLinks: every list's "next page" link carries the cursor as
// a query value of its own, whatever characters the cursor holds (a query
// string put into a URL attribute whole would be escaped into one value).
func TestNextPageLinks(t *testing.T) {
	as, err := loadAssets()
	if err != nil {
		t.Fatal(err)
	}
	ps, err := loadPages(as)
	if err != nil {
		t.Fatal(err)
	}
	const cursor = "c/ur=so+r"
	const want = "page=c%2fur%3dso%2br"
	cases := map[string]struct {
		page string
		data any
		want string
	}{
		"sessions":    {"sessions", sessionListPage{Next: cursor, Archived: true}, want + "&amp;status=&amp;agent_id=&amp;archived=1"},
		"agents":      {"agents", listPage{Next: cursor}, want},
		"deployments": {"deployments", deploymentListPage{Next: cursor, Archived: true}, want + "&amp;archived=1"},
		"runs":        {"deployment", deploymentPage{Deployment: map[string]any{"id": "depl_1"}, RunsNext: cursor}, "runs_" + want},
		"webhooks":    {"webhooks", webhookListPage{Next: cursor}, "after_id=c%2fur%3dso%2br"},
	}
	for name, c := range cases {
		var buf bytes.Buffer
		if err := ps.byName[c.page].ExecuteTemplate(&buf, "layout", view{Data: c.data, SignedIn: true, CSRF: "x"}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(buf.String(), "?"+c.want+`"`) {
			i := strings.Index(buf.String(), "Next page")
			t.Errorf("%s: no link with ?%s in the page (near the link: %q)", name, c.want, buf.String()[max(0, i-200):max(0, i)])
		}
	}
}
