package wire

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/mangohq/mango/internal/poll"
)

// dashboardFile is the Grafana dashboard the chart ships.
const dashboardFile = "../../../deploy/helm/mango/dashboards/mango.json"

// TestDashboardQueriesExportedMetrics: every query of the Grafana
// dashboard is valid PromQL, and every metric it names is exported by the
// api-server or a worker after one turn with a bash tool (a histogram's
// _bucket, _sum and _count count as the histogram). A renamed metric, or
// a panel written for one that does not exist, fails here.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	t.Parallel()
	names := dashboardMetrics(t)
	if len(names) < 20 {
		t.Fatalf("the dashboard names %d metrics: %v; the parse found too few to be right", len(names), names)
	}
	e := newInterruptEnv(t, nil)
	sid := e.session(t, toolset)
	events := e.watch(t, sid)
	e.say(t, sid, `#tool bash {"command":"echo dashboard"}`)
	until(t, events, "session.status_idle", 60*time.Second)

	poll.Until(t, 30*time.Second, "every metric of the dashboard exported", func() (bool, string) {
		exported := exportedFamilies(t, e.srv.BaseURL+"/metrics", e.metrics)
		var missing []string
		for _, n := range names {
			if !exported[n] && !exported[histogramOf(n)] {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0, fmt.Sprintf("not exported: %v", missing)
	})
}

// dashboardMetrics parses every query of the dashboard (its Grafana
// variables replaced by values) and returns the metric names they select.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("the dashboard is not valid JSON: %v", err)
	}
	exprs := map[string]string{}
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			exprs[fmt.Sprintf("panel %q query %d", p.Title, i)] = tg.Expr
		}
	}
	// A label_values(metric, label) variable names a metric too.
	labelValues := regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*),`)
	seen := map[string]bool{}
	for _, v := range d.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			seen[m[1]] = true
		}
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$provider", ".*")
	p := parser.NewParser(parser.Options{})
	for where, q := range exprs {
		if strings.Contains(vars.Replace(q), "$") {
			t.Errorf("%s uses a variable the dashboard does not define: %s", where, q)
			continue
		}
		expr, err := p.ParseExpr(vars.Replace(q))
		if err != nil {
			t.Errorf("%s is not valid PromQL: %v\n%s", where, err, q)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if v, ok := n.(*parser.VectorSelector); ok {
				if v.Name == "" {
					t.Errorf("%s selects series without a metric name: %s", where, v)
				}
				seen[v.Name] = true
			}
			return nil
		})
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// exportedFamilies scrapes urls and returns the metric families they
// export.
func exportedFamilies(t *testing.T, urls ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, u := range urls {
		tp := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := tp.TextToMetricFamilies(strings.NewReader(scrape(t, u)))
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		for n := range fams {
			out[n] = true
		}
	}
	return out
}

// histogramOf is the histogram a _bucket, _sum or _count series belongs
// to ("" for other names).
func histogramOf(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok {
			return base
		}
	}
	return ""
}
