package webhooks

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Results of an attempt, the "result" label of
// mango_webhook_deliveries_total.
const (
	// ResultOK: the endpoint answered 2xx.
	ResultOK = "ok"
	// ResultError: the attempt failed and the delivery will be retried.
	ResultError = "error"
	// ResultGaveUp: the attempt failed after the retry window: no retry,
	// and the store disables the endpoint.
	ResultGaveUp = "gave_up"
	// ResultSkipped: nothing was sent, the endpoint had PerEndpoint
	// attempts in flight; the delivery is due again a Poll later.
	ResultSkipped = "skipped"
)

// Metrics are a relay's Prometheus metrics. Every result of
// mango_webhook_deliveries_total exists from the start at 0, so the
// families show in a scrape before the first delivery.
type Metrics struct {
	deliveries *prometheus.CounterVec
	duration   prometheus.Histogram
	pending    prometheus.Gauge
	oldestAge  prometheus.Gauge
}

// NewMetrics returns a relay's metrics, registered with reg unless reg is
// nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mango_webhook_deliveries_total",
			Help: "Webhook delivery attempts by result: ok (2xx), error (will be retried), gave_up (retry window passed, endpoint disabled), skipped (endpoint at its in-flight cap, nothing sent).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mango_webhook_delivery_duration_seconds",
			Help:    "Time of one webhook delivery attempt that sent its request, from sending it to reading the answer or giving up on it.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mango_webhook_pending",
			Help: "Webhook deliveries to enabled endpoints not yet delivered nor given up.",
		}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mango_webhook_oldest_pending_age_seconds",
			Help: "Age of the event of the oldest pending webhook delivery to an enabled endpoint (0 when none).",
		}),
	}
	for _, r := range []string{ResultOK, ResultError, ResultGaveUp, ResultSkipped} {
		m.deliveries.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.deliveries, m.duration, m.pending, m.oldestAge)
	}
	return m
}

// observe counts an attempt's outcome and, when it sent its request (it
// was not skipped, and signing and building the request worked), its
// duration.
func (m *Metrics) observe(a Attempt) {
	m.deliveries.WithLabelValues(result(a)).Inc()
	if !a.Skipped && a.Latency > 0 {
		m.duration.Observe(a.Latency.Seconds())
	}
}

// setStats sets the pending gauges.
func (m *Metrics) setStats(st Stats) {
	m.pending.Set(float64(st.Pending))
	m.oldestAge.Set(st.OldestAge.Seconds())
}

// result names an attempt's outcome for mango_webhook_deliveries_total.
func result(a Attempt) string {
	switch {
	case a.Skipped:
		return ResultSkipped
	case a.Delivered:
		return ResultOK
	case a.GaveUp:
		return ResultGaveUp
	default:
		return ResultError
	}
}
