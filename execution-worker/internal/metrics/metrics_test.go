package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mangohq/mango/execution-worker/internal/metrics"
	"github.com/mangohq/mango/internal/promtest"
)

// TestFamiliesFromStart: every family of turns, model requests, tool
// calls and sandbox acquisitions is in the first scrape, with a series for
// each label value known in advance: the turn outcomes, the six built-in
// tools on the worker's provider and MCP, provisioned or not, and the
// models' "other".
func TestFamiliesFromStart(t *testing.T) {
	t.Parallel()
	w := metrics.New("docker", "v1", nil)
	for name, series := range map[string]int{
		"mango_worker_turns_total":                       len(metrics.TurnOutcomes),
		"mango_worker_turn_duration_seconds":             len(metrics.TurnOutcomes),
		"mango_worker_turn_schedule_to_start_seconds":    1,
		"mango_worker_model_time_to_first_token_seconds": 1,
		"mango_worker_model_request_duration_seconds":    2,
		"mango_worker_tool_duration_seconds":             7,
		"mango_worker_sandbox_acquire_duration_seconds":  2,
	} {
		if got := testutil.CollectAndCount(w.Registry, name); got != series {
			t.Errorf("%s has %d series at start, want %d", name, got, series)
		}
	}
	for _, want := range []map[string]string{{"tool": "bash", "provider": "docker"}, {"tool": "grep", "provider": "docker"}, {"tool": "mcp", "provider": "mcp"}} {
		if _, ok := promtest.HistogramCount(t, w.Registry, "mango_worker_tool_duration_seconds", want); !ok {
			t.Errorf("no tool series %v at start", want)
		}
	}
}

// TestLabelsAndOutcomes: a model id that is not a plain name is measured
// as "other"; a failed request has outcome error; a turn's
// schedule-to-start and a provisioned acquisition land in their series.
func TestLabelsAndOutcomes(t *testing.T) {
	t.Parallel()
	w := metrics.New("local", "v1", nil)
	w.ModelRequest("claude-sonnet-4-5", false, time.Second)
	w.ModelRequest(`my model/"v2"`, true, time.Second)
	w.ModelFirstToken(strings.Repeat("m", 65), 300*time.Millisecond)
	w.TurnScheduleToStart(20 * time.Millisecond)
	w.SandboxAcquire("local", true, 2*time.Second)
	w.ToolCall("bash", "local", time.Second)
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"mango_worker_model_request_duration_seconds", map[string]string{"model": "claude-sonnet-4-5", "outcome": "ok"}},
		{"mango_worker_model_request_duration_seconds", map[string]string{"model": "other", "outcome": "error"}},
		{"mango_worker_model_time_to_first_token_seconds", map[string]string{"model": "other"}},
		{"mango_worker_turn_schedule_to_start_seconds", map[string]string{}},
		{"mango_worker_sandbox_acquire_duration_seconds", map[string]string{"provider": "local", "provisioned": "true"}},
		{"mango_worker_tool_duration_seconds", map[string]string{"tool": "bash", "provider": "local"}},
	} {
		if n, _ := promtest.HistogramCount(t, w.Registry, c.name, c.labels); n != 1 {
			t.Errorf("%s%v observed %d times, want 1", c.name, c.labels, n)
		}
	}
	if n, ok := promtest.HistogramCount(t, w.Registry, "mango_worker_sandbox_acquire_duration_seconds", map[string]string{"provider": "local", "provisioned": "false"}); !ok || n != 0 {
		t.Errorf("unprovisioned acquisitions: %d (series present: %v), want a series with 0", n, ok)
	}
}
