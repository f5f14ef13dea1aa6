package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/db"
)

// TestProviderHealth: GET /admin/providers lists the enabled providers
// and their workers (live or not), /metrics exports the live counts, and
// with MANGO_REQUIRE_LIVE_WORKER=1 a session whose provider has no live
// worker is refused with 503 until one reports.
func TestProviderHealth(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SANDBOX_PROVIDERS", "local,docker"),
		testserver.WithEnv("MANGO_REQUIRE_LIVE_WORKER", "1"))
	client := newClient(t, srv)
	agent, _ := fixture(t, client)

	if r := do(t, srv, http.MethodGet, "/admin/providers", "", nil, map[string]string{"x-api-key": ""}); r.status != http.StatusUnauthorized {
		t.Errorf("admin without a key = %d, want 401", r.status)
	}
	type health struct {
		Data []struct {
			Provider     string   `json:"provider"`
			Enabled      bool     `json:"enabled"`
			Default      bool     `json:"default"`
			LiveWorkers  int      `json:"live_workers"`
			Capabilities []string `json:"capabilities"`
			Workers      []struct {
				ID   string `json:"id"`
				Live bool   `json:"live"`
			} `json:"workers"`
		} `json:"data"`
	}
	get := func() health {
		t.Helper()
		r := do(t, srv, http.MethodGet, "/admin/providers", "", nil, nil)
		var h health
		if r.status != http.StatusOK || json.Unmarshal(r.body, &h) != nil {
			t.Fatalf("admin providers = %d %s", r.status, r.body)
		}
		return h
	}
	h := get()
	if len(h.Data) != 2 || h.Data[0].Provider != "local" || !h.Data[0].Default || !h.Data[0].Enabled || h.Data[0].LiveWorkers != 0 ||
		h.Data[1].Provider != "docker" || h.Data[1].Default || !h.Data[1].Enabled {
		t.Fatalf("providers before any worker = %+v", h.Data)
	}

	var env struct{ ID string }
	r := do(t, srv, http.MethodPost, "/v1/environments", "application/json", []byte(`{"name":"health"}`), nil)
	_ = json.Unmarshal(r.body, &env)
	body := []byte(fmt.Sprintf(`{"agent":%q,"environment_id":%q}`, agent.ID, env.ID))
	r = do(t, srv, http.MethodPost, "/v1/sessions", "application/json", body, nil)
	checkEnvelope(t, r, http.StatusServiceUnavailable, "overloaded_error", "no live worker of the local sandbox provider")

	pool, err := pgxpool.New(context.Background(), srv.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	heartbeat(t, srv, "w-local", "local", "packages")
	// A worker last seen 10 minutes ago: no API sets a heartbeat's time,
	// so it is written to the store.
	if _, err := db.NewStore(pool).WorkerHeartbeat(context.Background(), &db.Worker{ID: "w-docker-old", Provider: "docker", TaskQueues: []string{"q"},
		Version: "test"}, time.Now().Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, srv, "w-e2b", "e2b", "pause_resume")

	h = get()
	if len(h.Data) != 3 || h.Data[0].LiveWorkers != 1 || len(h.Data[0].Capabilities) != 1 || h.Data[0].Capabilities[0] != "packages" ||
		h.Data[1].LiveWorkers != 0 || len(h.Data[1].Workers) != 1 || h.Data[1].Workers[0].Live ||
		h.Data[2].Provider != "e2b" || h.Data[2].Enabled || h.Data[2].LiveWorkers != 1 {
		t.Errorf("providers after heartbeats = %+v", h.Data)
	}
	if v := metricValue(t, srv, `mango_provider_live_workers{provider="local"}`); v != 1 {
		t.Errorf("live workers of local = %v, want 1", v)
	}
	if v := metricValue(t, srv, `mango_provider_workers{provider="docker"}`); v != 1 {
		t.Errorf("known workers of docker = %v, want 1", v)
	}
	if r := do(t, srv, http.MethodPost, "/v1/sessions", "application/json", body, nil); r.status != http.StatusOK {
		t.Fatalf("session with a live worker = %d %s", r.status, r.body)
	}
}
