package app_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/internal/poll"
)

// TestWorkerMetrics: with MANGO_METRICS_ADDR the worker serves Prometheus
// metrics: turns by outcome with their duration and schedule-to-start,
// model requests, tool calls and sandbox acquisitions, preview counters, an
// info series, and the sandboxes of a version before installation ids
// that its reconciler leaves alone (one workspace here, as that version
// left it in the sandbox root).
func TestWorkerMetrics(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	env["MANGO_METRICS_ADDR"] = addr
	hash := sandbox.KeyHash("sesn_before_installation_ids")
	root := env["MANGO_LOCAL_SANDBOX_ROOT"]
	if err := os.Mkdir(filepath.Join(root, hash), 0o700); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf(`{"key_hash":%q,"created_at":"2026-01-01T00:00:00Z"}`, hash)
	if err := os.WriteFile(filepath.Join(root, hash+".json"), []byte(marker), 0o600); err != nil {
		t.Fatal(err)
	}
	runWorker(t, env)
	session := srv.NewSession(t, "local")
	sendMessage(t, srv, session, `#tool bash {"command":"true"}`)
	waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })

	want := []string{
		`mango_worker_turns_total{outcome="idle"} 1`,
		`mango_worker_turn_duration_seconds_count{outcome="idle"} 1`,
		`mango_worker_info{provider="local",version="dev"} 1`,
		`mango_worker_preview_frames_sent_total `,
		`mango_worker_preview_frames_dropped_total `,
		`mango_worker_preview_stream_connected 1`,
		`mango_worker_sandboxes_unclaimed 1`,
		`mango_worker_tool_duration_seconds_count{provider="local",tool="bash"} 1`,
		`mango_worker_sandbox_acquire_duration_seconds_count{provider="local",provisioned="true"} 1`,
		`mango_worker_turn_schedule_to_start_seconds_count `,
		`mango_worker_model_time_to_first_token_seconds_count{model=`,
		`mango_worker_model_request_duration_seconds_count{model=`,
		`mango_build_info{commit="`,
		`component="execution-worker"`,
		`go_goroutines `,
	}
	poll.Until(t, 10*time.Second, "the metrics to contain every wanted series", func() (bool, string) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		body := string(b)
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = w
			}
		}
		return missing == "", fmt.Sprintf("metrics lack %q:\n%s", missing, body)
	})
}
