// Package metrics is the execution worker's Prometheus metrics, served on
// MANGO_METRICS_ADDR (/metrics, plus /healthz).
package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/tools"
	"github.com/mangohq/mango/internal/buildinfo"
)

// Previews reports the preview stream's counters.
type Previews interface {
	Sent() int64
	Dropped() int64
	Connected() bool
}

// Worker holds the worker's metrics.
type Worker struct {
	Registry *prometheus.Registry

	turns       *prometheus.CounterVec
	turnSeconds *prometheus.HistogramVec
	turnWait    prometheus.Histogram
	firstToken  *prometheus.HistogramVec
	modelTime   *prometheus.HistogramVec
	toolTime    *prometheus.HistogramVec
	acquireTime *prometheus.HistogramVec
}

// TurnOutcomes are the outcomes a RunTurn is counted under: those its
// result reports (session.Turn*) and "error" for one that failed.
var TurnOutcomes = []string{"idle", "interrupted", "parked", "retry", "terminated", "gone", "nothing", "error"}

// OtherLabel replaces a label value that is not a plain name of at most
// 64 characters (a model id from an agent's configuration), so that no
// value can blow up a series' cardinality or break an exposition.
const OtherLabel = "other"

var plainLabel = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// label returns v, or OtherLabel when v is not a plain name.
func label(v string) string {
	if plainLabel.MatchString(v) {
		return v
	}
	return OtherLabel
}

// New registers the worker's metrics: turns by outcome and their
// duration and schedule-to-start wait, model requests (time to first
// token, duration), tool calls, sandbox acquisitions, preview frames sent
// and dropped, the preview stream's state, an info series, and the Go and
// process collectors. provider is the worker's sandbox provider.
func New(provider, version string, previews Previews) *Worker {
	reg := prometheus.NewRegistry()
	w := newWorker(reg)
	w.preinit(provider)
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "mango_worker_info", Help: "The worker's provider and version.",
		ConstLabels: prometheus.Labels{"provider": provider, "version": version}})
	info.Set(1)
	b := buildinfo.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "mango_build_info",
		Help: "The component's version, commit and Go version; always 1.",
		ConstLabels: prometheus.Labels{"component": "execution-worker", "version": b.Version,
			"commit": b.Commit, "go_version": b.GoVersion}})
	build.Set(1)
	reg.MustRegister(w.turns, w.turnSeconds, w.turnWait, w.firstToken, w.modelTime, w.toolTime, w.acquireTime, info, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if previews != nil {
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mango_worker_preview_frames_sent_total",
				Help: "Preview frames sent to the ControlPlane."}, func() float64 { return float64(previews.Sent()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mango_worker_preview_frames_dropped_total",
				Help: "Preview frames dropped (queue full or stream down); turns never wait for previews."}, func() float64 { return float64(previews.Dropped()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mango_worker_preview_stream_connected",
				Help: "1 while the preview stream to the ControlPlane is open."}, func() float64 {
				if previews.Connected() {
					return 1
				}
				return 0
			}),
		)
	}
	return w
}

// newWorker makes the worker's turn, model, tool and sandbox metrics.
func newWorker(reg *prometheus.Registry) *Worker {
	return &Worker{
		Registry: reg,
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mango_worker_turns_total",
			Help: "RunTurn activities finished, by outcome (idle, interrupted, parked, retry, terminated, gone, nothing, error).",
		}, []string{"outcome"}),
		turnSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mango_worker_turn_duration_seconds",
			Help:    "Duration of RunTurn activities, by outcome.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"outcome"}),
		turnWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mango_worker_turn_schedule_to_start_seconds",
			Help: "Time RunTurn activities (first attempts) waited between being scheduled and starting on this worker " +
				"(Temporal's schedule-to-start; about 0 for turns run eagerly).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		firstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mango_worker_model_time_to_first_token_seconds",
			Help:    "Time from the start of a streamed model request to its first streamed event, by model (\"other\": a model id that is not a plain name).",
			Buckets: []float64{.05, .1, .25, .5, .75, 1, 1.5, 2, 3, 5, 8, 12, 20, 30},
		}, []string{"model"}),
		modelTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mango_worker_model_request_duration_seconds",
			Help:    "Duration of model requests, by model and outcome (ok, error).",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600},
		}, []string{"model", "outcome"}),
		toolTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mango_worker_tool_duration_seconds",
			Help: "Duration of tool calls, by tool and provider: built-in tools with the sandbox provider they ran in " +
				"(the wait for the sandbox included), MCP tool calls as tool and provider \"mcp\".",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"tool", "provider"}),
		acquireTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mango_worker_sandbox_acquire_duration_seconds",
			Help: "Time a tool call waited for its session's sandbox, by provider and provisioned: true when the sandbox was " +
				"created or re-attached for the turn (the turn starts that early, so this is what the first model request did not hide), " +
				"false when the worker's was reused.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900},
		}, []string{"provider", "provisioned"}),
	}
}

// preinit creates the series whose label values are known in advance, so
// that every family is in a scrape from the start: turns by outcome, the
// built-in tools on provider and MCP calls, provider's sandbox
// acquisitions, and the model families under OtherLabel (model ids are
// only known once requested).
func (w *Worker) preinit(provider string) {
	for _, o := range TurnOutcomes {
		w.turns.WithLabelValues(o)
		w.turnSeconds.WithLabelValues(o)
	}
	for _, t := range tools.LocalNames() {
		w.toolTime.WithLabelValues(t, label(provider))
	}
	w.toolTime.WithLabelValues(agentruntime.MCPMetricsLabel, agentruntime.MCPMetricsLabel)
	for _, p := range []string{"true", "false"} {
		w.acquireTime.WithLabelValues(label(provider), p)
	}
	w.firstToken.WithLabelValues(OtherLabel)
	for _, o := range []string{"ok", "error"} {
		w.modelTime.WithLabelValues(OtherLabel, o)
	}
}

// Interrupts reports the interrupt push's counters.
type Interrupts interface {
	Received() int64
	Applied() int64
	Connected() bool
}

// WatchInterrupts registers the interrupt push's metrics: interrupts
// received on the stream, turns they stopped, and the stream's state.
func (w *Worker) WatchInterrupts(in Interrupts) {
	w.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mango_worker_interrupts_received_total",
			Help: "Interrupts the api-server pushed on the interrupt stream (for any session)."}, func() float64 { return float64(in.Received()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mango_worker_interrupts_applied_total",
			Help: "Running turns a pushed interrupt stopped before Temporal's cancellation arrived."}, func() float64 { return float64(in.Applied()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mango_worker_interrupt_stream_connected",
			Help: "1 while the interrupt stream from the ControlPlane is open."}, func() float64 {
			if in.Connected() {
				return 1
			}
			return 0
		}),
	)
}

// Reconciler reports what the sandbox reconciler's last pass left alone.
type Reconciler interface {
	Unclaimed() int64
}

// SandboxReconciler registers the number of legacy sandboxes (created
// before installation ids) that the last reconciliation pass left alone
// because no binding of this installation references them.
func (w *Worker) SandboxReconciler(r Reconciler) {
	w.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mango_worker_sandboxes_unclaimed",
		Help: "Sandboxes without an installation id that no binding of this installation references: never destroyed, left for an operator."},
		func() float64 { return float64(r.Unclaimed()) }))
}

// Cache reports how many items a cache holds and about how many bytes.
type Cache interface {
	Len() (items int, bytes int64)
}

// TranscriptCache registers the transcript cache's size: sessions held
// and their decoded transcripts' bytes (bounded; the least recently run
// session goes first).
func (w *Worker) TranscriptCache(c Cache) {
	w.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mango_worker_transcript_cache_sessions",
			Help: "Sessions whose decoded transcript the worker keeps, so their turns fetch only new entries."}, func() float64 {
			n, _ := c.Len()
			return float64(n)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mango_worker_transcript_cache_bytes",
			Help: "About how many bytes the kept transcripts take (bounded at 64 MiB)."}, func() float64 {
			_, b := c.Len()
			return float64(b)
		}),
	)
}

// Turn records a finished RunTurn.
func (w *Worker) Turn(outcome string, took time.Duration) {
	w.turns.WithLabelValues(outcome).Inc()
	w.turnSeconds.WithLabelValues(outcome).Observe(took.Seconds())
}

// TurnScheduleToStart records how long a RunTurn waited to start.
func (w *Worker) TurnScheduleToStart(waited time.Duration) {
	w.turnWait.Observe(waited.Seconds())
}

// ModelFirstToken records a streamed model request's time to its first
// event.
func (w *Worker) ModelFirstToken(model string, took time.Duration) {
	w.firstToken.WithLabelValues(label(model)).Observe(took.Seconds())
}

// ModelRequest records a model request's duration.
func (w *Worker) ModelRequest(model string, failed bool, took time.Duration) {
	outcome := "ok"
	if failed {
		outcome = "error"
	}
	w.modelTime.WithLabelValues(label(model), outcome).Observe(took.Seconds())
}

// ToolCall records a tool call's duration.
func (w *Worker) ToolCall(tool, provider string, took time.Duration) {
	w.toolTime.WithLabelValues(label(tool), label(provider)).Observe(took.Seconds())
}

// SandboxAcquire records how long a tool call waited for its sandbox.
func (w *Worker) SandboxAcquire(provider string, provisioned bool, took time.Duration) {
	w.acquireTime.WithLabelValues(label(provider), strconv.FormatBool(provisioned)).Observe(took.Seconds())
}

var _ agentruntime.Metrics = (*Worker)(nil)

// Listen binds addr, so a taken port fails startup; Serve then serves.
func Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// healthz answers liveness probes with the build that is running.
func healthz(rw http.ResponseWriter, _ *http.Request) {
	b := buildinfo.Get()
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(map[string]string{"status": "ok", "version": b.Version, "commit": b.Commit})
}

// Serve serves /metrics and /healthz on l until ctx ends.
func (w *Worker) Serve(ctx context.Context, l net.Listener, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(w.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", healthz)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.ErrorContext(ctx, "metrics listener failed", "err", err)
	}
}
