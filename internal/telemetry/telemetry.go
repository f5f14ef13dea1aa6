// Package telemetry sets up OpenTelemetry tracing for both Mango binaries
// from the standard OTEL_* variables, and joins logs to traces.
//
// Tracing is off unless the environment asks for it: OTEL_TRACES_EXPORTER
// is "otlp", or an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn it off. The exporter speaks OTLP over
// gRPC or HTTP (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then
// OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" or "http/protobuf", the default) and
// reads its endpoint, headers, TLS, timeout and compression from the
// environment itself; the sampler (OTEL_TRACES_SAMPLER, default
// parentbased_always_on), the batch processor (OTEL_BSP_*) and the resource
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) are the SDK's standard
// ones. Context crosses processes as W3C trace context and baggage.
package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// EnvCaptureContent lets spans carry message text, tool input and tool
// output (MANGO_OTEL_CAPTURE_CONTENT); off, they carry sizes and names
// only.
const EnvCaptureContent = "MANGO_OTEL_CAPTURE_CONTENT"

// Config is what the environment asks of tracing, read and checked with
// the rest of a binary's configuration (Load) and applied at start (Start).
type Config struct {
	// Enabled: spans are exported.
	Enabled bool
	// Protocol is "grpc" or "http/protobuf".
	Protocol string
	// CaptureContent lets spans carry content (EnvCaptureContent).
	CaptureContent bool

	client     otlptrace.Client
	sampler    sdktrace.Sampler
	batchDelay time.Duration
	resource   []attribute.KeyValue
	endpoint   string
}

// Load reads the tracing configuration through getenv (os.Getenv in
// production). The error names the variable that is wrong.
func Load(getenv func(string) string) (Config, error) {
	c := Config{CaptureContent: isTrue(getenv(EnvCaptureContent))}
	if !enabled(getenv) {
		return c, nil
	}
	c.Enabled = true
	c.Protocol = firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	switch c.Protocol {
	case "":
		c.Protocol = "http/protobuf"
	case "grpc", "http/protobuf":
	default:
		return c, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not grpc or http/protobuf", c.Protocol)
	}
	var err error
	if c.client, err = exporterClient(c.Protocol, getenv); err != nil {
		return c, err
	}
	if c.sampler, err = sampler(getenv); err != nil {
		return c, err
	}
	if c.batchDelay, err = millis(getenv, "OTEL_BSP_SCHEDULE_DELAY"); err != nil {
		return c, err
	}
	if c.resource, err = resourceAttrs(getenv); err != nil {
		return c, err
	}
	c.endpoint = firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	return c, nil
}

// Tracing is a running binary's tracing.
type Tracing struct {
	Config
	provider *sdktrace.TracerProvider
}

// Provider is the tracer provider to instrument with: the exporting one,
// or a no-op one when tracing is off (spans then cost next to nothing).
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil || t.provider == nil {
		return noop.NewTracerProvider()
	}
	return t.provider
}

// Shutdown flushes the spans not yet exported and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Start starts tracing as c says for service (its name and version in
// the resource, unless OTEL_SERVICE_NAME says otherwise) and says on log
// what it did. The provider is the caller's to pass on (several servers
// may share a process in tests); the W3C trace context and baggage
// propagators are installed globally.
func Start(ctx context.Context, c Config, service, version string, log *slog.Logger) (*Tracing, error) {
	t := &Tracing{Config: c}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !c.Enabled {
		log.InfoContext(ctx, "tracing off (set OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER=otlp to export spans)")
		return t, nil
	}
	exp, err := otlptrace.New(ctx, c.client)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID(), resource.WithAttributes(c.resource...))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	var batch []sdktrace.BatchSpanProcessorOption
	if c.batchDelay > 0 {
		batch = append(batch, sdktrace.WithBatchTimeout(c.batchDelay))
	}
	t.provider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, batch...), sdktrace.WithResource(res), sdktrace.WithSampler(c.sampler))
	log.InfoContext(ctx, "tracing on", "protocol", c.Protocol, "endpoint", c.endpoint, "sampler", c.sampler.Description(), "capture_content", c.CaptureContent)
	return t, nil
}

// enabled reads whether the environment asks for exported spans.
func enabled(getenv func(string) string) bool {
	if isTrue(getenv("OTEL_SDK_DISABLED")) {
		return false
	}
	switch strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

func isTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// Scope is the instrumentation scope of a Mango component's spans.
func Scope(component string) string { return "github.com/mangohq/mango/" + component }

// LogHandler returns h with the trace and span of the logged context, when
// there is one, added to each record as trace_id and span_id: a log line
// written inside a traced operation (with a ...Context call) names the
// trace to look it up in.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

func (h logHandler) WithGroup(name string) slog.Handler { return logHandler{h.Handler.WithGroup(name)} }

// HTTP spans are named by route ("POST /v1/sessions/:id/events"), which
// only the router knows, after the request span started: HTTPHandler
// leaves a slot for it in the request's context, the router fills it
// (SetRoute), and the span takes its name from it when the request ends.

type routeKey struct{}

// SetRoute records the route that served the request of ctx, for its span.
func SetRoute(ctx context.Context, route string) {
	if p, ok := ctx.Value(routeKey{}).(*string); ok {
		*p = route
	}
}

// HTTPHandler traces h's requests with provider (OpenTelemetry's otelhttp:
// W3C trace context in, server spans with the semantic conventions'
// attributes), each span named by the method and the route SetRoute gave.
func HTTPHandler(h http.Handler, provider trace.TracerProvider) http.Handler {
	traced := otelhttp.NewHandler(h, "http", otelhttp.WithTracerProvider(provider),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if p, ok := r.Context().Value(routeKey{}).(*string); ok && *p != "" {
				return r.Method + " " + *p
			}
			return r.Method
		}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		traced.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, new(string))))
	})
}
