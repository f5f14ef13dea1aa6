package httpapi

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/internal/telemetry"
)

const requestIDKey = "request_id"

// requestID gives every request an id, returned in the request-id header
// and in error envelopes.
func requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := ids.New(ids.Request)
		c.Set(requestIDKey, id)
		c.Response().Header().Set("request-id", id)
		return next(c)
	}
}

func requestIDOf(c echo.Context) string {
	id, _ := c.Get(requestIDKey).(string)
	return id
}

// public paths need no API key.
var public = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

func (a *API) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		if span := trace.SpanFromContext(c.Request().Context()); span.IsRecording() {
			// The request's span (when tracing is on) is named by its route.
			telemetry.SetRoute(c.Request().Context(), routeOf(c))
			span.SetAttributes(attribute.String("http.route", routeOf(c)))
		}
		level := slog.LevelDebug
		if c.Response().Status >= 500 {
			level = slog.LevelWarn
		}
		a.deps.Logger.Log(c.Request().Context(), level, "http request",
			"method", c.Request().Method, "route", routeOf(c), "status", c.Response().Status,
			"duration_ms", float64(time.Since(start).Microseconds())/1000, "request_id", requestIDOf(c))
		return nil
	}
}

func routeOf(c echo.Context) string {
	if p := c.Path(); p != "" {
		return p
	}
	return "unmatched"
}

type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mango_http_requests_total",
			Help: "HTTP requests served, by route template, method and status code.",
		}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mango_http_request_duration_seconds",
			Help:    "HTTP request latency, by route template, method and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method", "status"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

func (m *httpMetrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		status := strconv.Itoa(c.Response().Status)
		route := routeOf(c)
		m.requests.WithLabelValues(route, c.Request().Method, status).Inc()
		m.latency.WithLabelValues(route, c.Request().Method, status).Observe(time.Since(start).Seconds())
		return nil
	}
}

// recoverPanics turns a panic in a handler into a logged internal error:
// the client gets the api_error envelope, never a stack trace or a reset
// connection.
func (a *API) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				a.deps.Logger.ErrorContext(c.Request().Context(), "handler panic", "panic", r, "stack", string(debug.Stack()),
					"method", c.Request().Method, "route", routeOf(c), "request_id", requestIDOf(c))
				err = apierror.Internal()
			}
		}()
		return next(c)
	}
}
