package wire

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/temporaltest"
)

func TestHealthReadinessMetrics(t *testing.T) {
	t.Parallel()
	temporaltest.HostPort(t)
	srv := testserver.Start(t)
	noKey := map[string]string{"x-api-key": ""}

	if r := do(t, srv, http.MethodGet, "/healthz", "", nil, noKey); r.status != http.StatusOK || r.header.Get("request-id") == "" ||
		!strings.Contains(string(r.body), `"version":"`) || !strings.Contains(string(r.body), `"commit":"`) {
		t.Errorf("/healthz = %d %s (request-id %q), want 200 with the version, commit and a request id", r.status, r.body, r.header.Get("request-id"))
	}
	if r := do(t, srv, http.MethodGet, "/readyz", "", nil, noKey); r.status != http.StatusOK {
		t.Errorf("/readyz = %d %s, want 200 with PostgreSQL and Temporal up", r.status, r.body)
	}
	do(t, srv, http.MethodGet, "/v1/agents", "", nil, nil)
	do(t, srv, http.MethodGet, "/v1/agents/agent_nope", "", nil, nil)
	r := do(t, srv, http.MethodGet, "/metrics", "", nil, noKey)
	if r.status != http.StatusOK {
		t.Fatalf("/metrics = %d", r.status)
	}
	for _, want := range []string{
		`mango_http_requests_total{method="GET",route="/v1/agents",status="200"} 1`,
		`mango_http_requests_total{method="GET",route="/v1/agents/:id",status="404"} 1`,
		`mango_http_request_duration_seconds_bucket{method="GET",route="/v1/agents",status="200",le=`,
		`mango_build_info{commit="`,
		`component="api-server"`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestReadinessWithoutTemporal(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_TEMPORAL_HOSTPORT", "127.0.0.1:1"))
	noKey := map[string]string{"x-api-key": ""}
	if r := do(t, srv, http.MethodGet, "/healthz", "", nil, noKey); r.status != http.StatusOK {
		t.Errorf("/healthz = %d, want 200 (process up)", r.status)
	}
	r := do(t, srv, http.MethodGet, "/readyz", "", nil, noKey)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "temporal") {
		t.Errorf("/readyz = %d %s, want 503 naming temporal", r.status, r.body)
	}
	// The API itself keeps serving while Temporal is down.
	if r := do(t, srv, http.MethodPost, "/v1/agents", "application/json", agentJSON(nil), nil); r.status != http.StatusOK {
		t.Errorf("create agent with Temporal down = %d %s", r.status, r.body)
	}
}
