// Package metrics holds the Prometheus metrics several api-server
// components share, so each is registered once per registry.
package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mangohq/mango/internal/buildinfo"
)

// BuildInfo returns the mango_build_info gauge: always 1, labelled with
// the component, version, commit and Go version of this binary.
func BuildInfo(component string) prometheus.Collector {
	b := buildinfo.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mango_build_info",
		Help: "The component's version, commit and Go version; always 1.",
		ConstLabels: prometheus.Labels{"component": component, "version": b.Version,
			"commit": b.Commit, "go_version": b.GoVersion},
	})
	g.Set(1)
	return g
}

// EventsAppended returns the counter of events appended to session logs
// for one source ("http", "controlplane"), registering the shared
// mango_events_appended_total vector on first use.
func EventsAppended(reg prometheus.Registerer, source string) (prometheus.Counter, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mango_events_appended_total",
		Help: "Events appended to session logs, by source.",
	}, []string{"source"})
	if err := reg.Register(vec); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			return nil, err
		}
		vec = existing
	}
	return vec.WithLabelValues(source), nil
}
