package console_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/db"
)

// providerRow matches a provider's row of the summary table: its name and
// its health, in words.
func providerRow(provider string) *regexp.Regexp {
	return regexp.MustCompile(`<td><a href="#provider-` + provider + `">` + provider + `</a></td>\s*<td><span class="status status-(\w+)"><span aria-hidden="true" class="dot"></span>([a-z ]+)</span></td>`)
}

// TestProvidersPage: the providers page shows each enabled provider's
// health in words (no live worker, then healthy once one reports), and
// each worker, live or stale, with what it reported escaped.
func TestProvidersPage(t *testing.T) {
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SANDBOX", "local"), testserver.WithEnv("MANGO_SANDBOX_PROVIDERS", "local,docker"))
	v := signedIn(t, srv)

	code, body := v.get("/console/providers")
	if code != http.StatusOK {
		t.Fatalf("providers page: %d", code)
	}
	for _, p := range []string{"local", "docker"} {
		if m := providerRow(p).FindStringSubmatch(body); m == nil || m[2] != "no live worker" {
			t.Errorf("provider %s before any worker: health %v, want \"no live worker\"", p, m)
		}
	}
	if n := strings.Count(body, "No worker has reported for this provider."); n != 2 {
		t.Errorf("providers without workers: %d say so, want 2", n)
	}

	// No API sets a heartbeat's time: the workers are written to the
	// store, as a worker's heartbeat would (one now, one 10 minutes ago).
	pool, err := pgxpool.New(context.Background(), srv.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := db.NewStore(pool)
	for _, w := range []struct {
		worker db.Worker
		at     time.Time
	}{
		{db.Worker{ID: "w-local", Provider: "local", TaskQueues: []string{"q-local"}, Capabilities: []string{"packages"}, Version: "<b>v1</b>"}, time.Now()},
		{db.Worker{ID: "w-docker-old", Provider: "docker", TaskQueues: []string{"q-docker"}, Version: "v0"}, time.Now().Add(-10 * time.Minute)},
	} {
		if _, err := store.WorkerHeartbeat(context.Background(), &w.worker, w.at); err != nil {
			t.Fatal(err)
		}
	}

	_, body = v.get("/console/providers")
	if m := providerRow("local").FindStringSubmatch(body); m == nil || m[2] != "healthy" {
		t.Errorf("provider local with a live worker: health %v, want healthy", m)
	}
	if m := providerRow("docker").FindStringSubmatch(body); m == nil || m[2] != "no live worker" {
		t.Errorf("provider docker with a stale worker: health %v, want \"no live worker\"", m)
	}
	live := regexp.MustCompile(`<td><code>w-local</code></td>\s*<td><span class="status status-live">.*?live</span></td>\s*<td>&lt;b&gt;v1&lt;/b&gt;</td>`)
	stale := regexp.MustCompile(`<td><code>w-docker-old</code></td>\s*<td><span class="status status-stale">.*?stale</span></td>`)
	if !live.MatchString(body) {
		t.Errorf("providers page lacks the live worker w-local with its version escaped")
	}
	if !stale.MatchString(body) {
		t.Errorf("providers page lacks the stale worker w-docker-old")
	}
	pageHas(t, "providers page", body, "<code>packages</code>", "<code>q-local</code>", "1 / 1", "0 / 1")
	pageLacks(t, "providers page", body, "<b>v1</b>")
}
