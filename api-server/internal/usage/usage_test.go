package usage_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/api-server/internal/usage"
	"github.com/mangohq/mango/db"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	tab := usage.DefaultTable()
	for _, tc := range []struct {
		model       string
		ok          bool
		input, read int64
	}{
		{"claude-sonnet-4-5", true, 3000, 300},
		{"claude-sonnet-4-5-20250929", true, 3000, 300}, // dated snapshot
		{"claude-opus-4-1-20250805", true, 15000, 1500},
		{"claude-haiku-4-5", true, 1000, 100},
		{"claude-3-5-haiku-20241022", true, 800, 80},
		{"claude-sonnet-4-5-extra", false, 0, 0},
		{"claude-sonnet-5", false, 0, 0},
		{"", false, 0, 0},
	} {
		p, ok := tab.Lookup(tc.model)
		if ok != tc.ok || p.Input != tc.input || p.CacheRead != tc.read {
			t.Errorf("Lookup(%q) = %+v, %v; want input %d, read %d, found %v", tc.model, p, ok, tc.input, tc.read, tc.ok)
		}
	}
	p, _ := tab.Lookup("claude-opus-4-1")
	if p.Output != 75000 || p.CacheWrite5m != 18750 || p.CacheWrite1h != 30000 {
		t.Errorf("opus 4.1 = %+v, want output 75000, writes 18750 (1.25x) and 30000 (2x) nano-USD per token", p)
	}
}

// TestCostExact: costs are exact integers: a million output tokens of
// Haiku 3.5 cost exactly $4, and many small requests add up to the same
// as one large one.
func TestCostExact(t *testing.T) {
	t.Parallel()
	tab := usage.DefaultTable()
	u := tab.Cost(usage.Request{Model: "claude-3-5-haiku", OutputTokens: 1_000_000})
	if u.ListCostNanos != 4_000_000_000 || u.ListCostCents() != 400 {
		t.Fatalf("1M Haiku 3.5 output tokens = %d nano-USD (%d cents), want exactly $4", u.ListCostNanos, u.ListCostCents())
	}
	var sum db.Usage
	for range 1000 {
		sum.Add(tab.Cost(usage.Request{Model: "claude-3-5-haiku", InputTokens: 1, CacheReadInputTokens: 7}))
	}
	one := tab.Cost(usage.Request{Model: "claude-3-5-haiku", InputTokens: 1000, CacheReadInputTokens: 7000})
	if sum.ListCostNanos != one.ListCostNanos || one.ListCostNanos != 1000*800+7000*80 {
		t.Fatalf("1000 small requests = %d nano-USD, one large = %d; want both %d", sum.ListCostNanos, one.ListCostNanos, 1000*800+7000*80)
	}
	if web := tab.Cost(usage.Request{Model: "claude-sonnet-4-5", WebSearchRequests: 3, WebFetchRequests: 5}); web.ListCostNanos != 3*10_000_000 {
		t.Fatalf("3 web searches = %d nano-USD, want 3 cents ($10 per thousand; fetches are free)", web.ListCostNanos)
	}
	if u := tab.Cost(usage.Request{Model: "mystery", InputTokens: 5}); !u.Unpriced || u.ListCostNanos != 0 || u.InputTokens != 5 {
		t.Fatalf("unpriced model = %+v, want tokens counted, no cost, Unpriced", u)
	}
}

func TestParseFile(t *testing.T) {
	t.Parallel()
	yamlFile := `
my-model:
  input: 0.25
  output: 1.5
  cache_read: 0.025
claude-sonnet-4-5:
  input: 4
  output: 20
  cache_write_5m: 5
  cache_write_1h: 8
  web_search: 12.5
`
	jsonFile := `{"my-model": {"input": "0.25", "output": 1.5, "cache_read": 0.025},
	 "claude-sonnet-4-5": {"input": 4, "output": 20, "cache_write_5m": 5, "cache_write_1h": 8, "web_search": 12.5}}`
	for name, data := range map[string]string{"yaml": yamlFile, "json": jsonFile} {
		tab, err := usage.Parse([]byte(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		my, ok := tab.Lookup("my-model")
		want := usage.Price{Input: 250, Output: 1500, CacheRead: 25, CacheWrite5m: 312, CacheWrite1h: 500, WebSearch: 10_000_000}
		if !ok || my != want {
			t.Errorf("%s: my-model = %+v, want %+v (defaults from input)", name, my, want)
		}
		s, _ := tab.Lookup("claude-sonnet-4-5")
		if s.Input != 4000 || s.CacheWrite5m != 5000 || s.CacheWrite1h != 8000 || s.CacheRead != 400 || s.WebSearch != 12_500_000 {
			t.Errorf("%s: overridden sonnet = %+v", name, s)
		}
		if !tab.Priced("claude-haiku-4-5") {
			t.Errorf("%s: a file adds to the defaults; haiku 4.5 lost", name)
		}
	}
	for _, tc := range []struct{ data, want string }{
		{`m: {output: 1}`, `model "m": input: is required`},
		{`m: {input: -1, output: 1}`, `model "m": input: must be a non-negative decimal`},
		{`m: {input: 0.0001, output: 1}`, `at most 3 decimals`},
		{`m: {input: 1, output: 1, cached: 2}`, `field cached not found`},
		{`[1, 2]`, `an object of model id to prices`},
		{`m: {input: [1], output: 1}`, `model "m": input`},
	} {
		_, err := usage.Parse([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.data, err, tc.want)
		}
	}
	path := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(path, []byte(yamlFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if tab, err := usage.LoadFile(path); err != nil || !tab.Priced("my-model") {
		t.Fatalf("LoadFile = %v", err)
	}
}

func TestParseBudget(t *testing.T) {
	t.Parallel()
	n, err := usage.ParseBudget(json.RawMessage(`{"type":"limit","max_list_cost":{"amount":"2500","currency":"USD"}}`))
	if err != nil || n != 2500 {
		t.Fatalf("ParseBudget = %d, %v; want 2500 cents", n, err)
	}
	for _, bad := range []string{
		`{"type":"limit","max_list_cost":{"amount":"0","currency":"USD"}}`,
		`{"type":"limit","max_list_cost":{"amount":"025","currency":"USD"}}`,
		`{"type":"limit","max_list_cost":{"amount":"2.5","currency":"USD"}}`,
		`{"type":"limit","max_list_cost":{"amount":"25","currency":"EUR"}}`,
		`{"type":"limit","max_list_cost":{"amount":25,"currency":"USD"}}`,
		`{"type":"cap","max_list_cost":{"amount":"25","currency":"USD"}}`,
		`{"type":"limit"}`,
		`{"type":"limit","max_list_cost":{"amount":"25","currency":"USD"},"extra":1}`,
	} {
		if _, err := usage.ParseBudget(json.RawMessage(bad)); err == nil || !strings.HasPrefix(err.Error(), "budget") {
			t.Errorf("ParseBudget(%s) = %v, want an error naming the budget field", bad, err)
		}
	}
}

func TestSnapshotShape(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cap := int64(300)
	s := &db.Session{CreatedAt: t0, Status: db.StatusIdle, ActiveMicros: 1_500_000, BudgetMaxCents: &cap,
		Usage: db.Usage{InputTokens: 1, OutputTokens: 2, CacheReadInputTokens: 3, CacheCreation5m: 4, CacheCreation1h: 5,
			WebSearchRequests: 6, WebFetchRequests: 7, ListCostNanos: 129_999_999}}
	got := string(usage.SnapshotEvent(s, t0.Add(time.Minute)))
	want := `{"usage":{"input_tokens":1,"output_tokens":2,"cache_read_input_tokens":3,` +
		`"cache_creation":{"ephemeral_1h_input_tokens":5,"ephemeral_5m_input_tokens":4},` +
		`"server_tool_use":{"web_fetch_requests":7,"web_search_requests":6},` +
		`"list_cost":{"amount":"12","currency":"USD"},"active_seconds":1.5},` +
		`"budget":{"type":"limit","max_list_cost":{"amount":"300","currency":"USD"}}}`
	if got != want {
		t.Fatalf("snapshot =\n%s\nwant\n%s", got, want)
	}
}
