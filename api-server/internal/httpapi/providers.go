package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mangohq/mango/api-server/internal/apierror"
)

// LiveWorkerWindow is how recent a worker's last heartbeat must be for it
// to count as live (workers beat every 10 s).
const LiveWorkerWindow = 2 * time.Minute

// providerHealth is one provider in GET /admin/providers.
type providerHealth struct {
	Provider string `json:"provider"`
	// Enabled: sessions may select it (MANGO_SANDBOX_PROVIDERS).
	Enabled bool `json:"enabled"`
	// Default: new sessions without a selection use it (MANGO_SANDBOX).
	Default     bool `json:"default"`
	LiveWorkers int  `json:"live_workers"`
	// Capabilities are those reported by at least one live worker.
	Capabilities []string       `json:"capabilities"`
	Workers      []workerHealth `json:"workers"`
}

type workerHealth struct {
	ID           string    `json:"id"`
	TaskQueues   []string  `json:"task_queues"`
	Capabilities []string  `json:"capabilities"`
	Version      string    `json:"version"`
	FirstSeenAt  time.Time `json:"first_seen_at"`
	LastSeenAt   time.Time `json:"last_seen_at"`
	Live         bool      `json:"live"`
}

// providerHealths reports every enabled provider and every provider a
// worker ever reported, in that order.
func (a *API) providerHealths(ctx context.Context) ([]providerHealth, error) {
	workers, err := a.deps.Store.WorkerList(ctx)
	if err != nil {
		return nil, err
	}
	since := a.now().Add(-LiveWorkerWindow)
	var out []providerHealth
	index := map[string]int{}
	add := func(name string) *providerHealth {
		if i, ok := index[name]; ok {
			return &out[i]
		}
		index[name] = len(out)
		out = append(out, providerHealth{Provider: name, Enabled: slices.Contains(a.deps.Providers, name),
			Default: len(a.deps.Providers) > 0 && a.deps.Providers[0] == name, Capabilities: []string{}, Workers: []workerHealth{}})
		return &out[len(out)-1]
	}
	for _, p := range a.deps.Providers {
		add(p)
	}
	for _, w := range workers {
		p := add(w.Provider)
		live := !w.LastSeenAt.Before(since)
		p.Workers = append(p.Workers, workerHealth{ID: w.ID, TaskQueues: w.TaskQueues, Capabilities: w.Capabilities,
			Version: w.Version, FirstSeenAt: w.FirstSeenAt.UTC(), LastSeenAt: w.LastSeenAt.UTC(), Live: live})
		if live {
			p.LiveWorkers++
			for _, c := range w.Capabilities {
				if !slices.Contains(p.Capabilities, c) {
					p.Capabilities = append(p.Capabilities, c)
				}
			}
		}
	}
	for i := range out {
		slices.Sort(out[i].Capabilities)
	}
	return out, nil
}

// adminProviders answers GET /admin/providers: the sandbox providers with
// their workers and whether each is live. It is an operator endpoint
// beside the public API, behind the same API key.
func (a *API) adminProviders(c echo.Context) error {
	health, err := a.providerHealths(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"data": health})
}

// checkLiveWorker refuses (503) a session whose provider has no live
// worker, when the server is configured to (MANGO_REQUIRE_LIVE_WORKER).
func (a *API) checkLiveWorker(ctx context.Context, provider string) error {
	if !a.deps.RequireLiveWorker {
		return nil
	}
	health, err := a.providerHealths(ctx)
	if err != nil {
		return err
	}
	for _, h := range health {
		if h.Provider == provider && h.LiveWorkers > 0 {
			return nil
		}
	}
	return apierror.Unavailable(fmt.Sprintf("no live worker of the %s sandbox provider has reported in the last %s; the session was not created (retry once a worker is up)", provider, LiveWorkerWindow))
}

// providerCollector exports mango_provider_live_workers{provider} and
// mango_provider_workers{provider}, read from the workers table at scrape
// time (every replica reports the same figures).
type providerCollector struct {
	api         *API
	live, known *prometheus.Desc
}

func newProviderCollector(a *API) *providerCollector {
	return &providerCollector{api: a,
		live:  prometheus.NewDesc("mango_provider_live_workers", "Workers of a sandbox provider whose last heartbeat is recent.", []string{"provider"}, nil),
		known: prometheus.NewDesc("mango_provider_workers", "Workers of a sandbox provider that ever sent a heartbeat.", []string{"provider"}, nil),
	}
}

func (p *providerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.live
	ch <- p.known
}

func (p *providerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	health, err := p.api.providerHealths(ctx)
	if err != nil {
		p.api.deps.Logger.Warn("metrics: cannot read workers", "err", err)
		ch <- prometheus.NewInvalidMetric(p.live, err)
		return
	}
	for _, h := range health {
		ch <- prometheus.MustNewConstMetric(p.live, prometheus.GaugeValue, float64(h.LiveWorkers), h.Provider)
		ch <- prometheus.MustNewConstMetric(p.known, prometheus.GaugeValue, float64(len(h.Workers)), h.Provider)
	}
}
