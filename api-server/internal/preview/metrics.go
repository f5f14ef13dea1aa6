package preview

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	in       *prometheus.CounterVec
	out      prometheus.Counter
	dropped  *prometheus.CounterVec
	latency  prometheus.Histogram
	notifies prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		in: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mango_preview_frames_in_total",
			Help: "Preview frames received, from workers (source=worker) or relayed by other replicas (source=relay).",
		}, []string{"source"}),
		out: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mango_preview_frames_out_total",
			Help: "Preview frames written to SSE clients.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mango_preview_frames_dropped_total",
			Help: "Preview frames dropped, by reason.",
		}, []string{"reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mango_preview_latency_seconds",
			Help:    "Time from the worker producing a preview frame to its write to an SSE client.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5},
		}),
		notifies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mango_preview_notifications_total",
			Help: "NOTIFY payloads this replica sent to relay previews to other replicas.",
		}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) {
	reg.MustRegister(m.in, m.out, m.dropped, m.latency, m.notifies)
}
