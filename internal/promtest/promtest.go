// Package promtest reads what a Prometheus registry holds, for tests.
package promtest

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// HistogramCount returns how many observations the histogram series name
// with exactly labels holds in g, and whether that series exists.
func HistogramCount(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) (uint64, bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, labels) {
				return m.GetHistogram().GetSampleCount(), true
			}
		}
	}
	return 0, false
}
