package telemetry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/internal/telemetry"
	"github.com/mangohq/mango/internal/telemetry/otlptest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// start loads the configuration of getenv and starts tracing with it.
func start(t *testing.T, getenv func(string) string, version string) (*telemetry.Tracing, error) {
	t.Helper()
	c, err := telemetry.Load(getenv)
	if err != nil {
		return nil, err
	}
	return telemetry.Start(context.Background(), c, "mango-test", version, slog.New(slog.DiscardHandler))
}

// TestOffByDefault: without OTEL_* variables nothing is exported, and the
// switches that turn the SDK off win over an endpoint.
func TestOffByDefault(t *testing.T) {
	for name, vars := range map[string]map[string]string{
		"nothing set":      {},
		"sdk disabled":     {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"},
		"exporter is none": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"},
	} {
		c, err := telemetry.Load(env(vars))
		if err != nil || c.Enabled {
			t.Errorf("%s: Load = %+v, %v; want tracing off", name, c, err)
		}
	}
	for name, bad := range map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon", "OTEL_TRACES_SAMPLER": "sometimes",
		"OTEL_TRACES_SAMPLER_ARG": "2", "OTEL_RESOURCE_ATTRIBUTES": "novalue", "OTEL_BSP_SCHEDULE_DELAY": "soon"} {
		if _, err := telemetry.Load(env(map[string]string{"OTEL_TRACES_EXPORTER": "otlp", name: bad})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v, want an error naming %s", name, bad, err, name)
		}
	}
}

// TestExportOverBothProtocols: spans reach an OTLP receiver over gRPC and
// over HTTP, with the service name and version in their resource and the
// operator's OTEL_RESOURCE_ATTRIBUTES; the sampler comes from
// OTEL_TRACES_SAMPLER.
func TestExportOverBothProtocols(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		r := otlptest.Start(t)
		vars := r.Env(protocol)
		vars["OTEL_RESOURCE_ATTRIBUTES"] = "deployment.environment=test"
		tr, err := start(t, env(vars), "v1.2.3")
		if err != nil || !tr.Enabled {
			t.Fatalf("%s: Setup = %+v, %v", protocol, tr, err)
		}
		_, span := tr.Provider().Tracer(telemetry.Scope("test")).Start(context.Background(), "unit of work")
		span.End()
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatalf("%s: shutdown: %v", protocol, err)
		}
		spans := r.Wait(t, 10*time.Second, "the span", func(s []otlptest.Span) bool { return len(s) == 1 })
		s := spans[0]
		if s.Name != "unit of work" || s.Service != "mango-test" || s.Resource["service.version"] != "v1.2.3" ||
			s.Resource["deployment.environment"] != "test" || s.Scope != "github.com/mangohq/mango/test" {
			t.Errorf("%s: span %+v", protocol, s)
		}
	}

	r := otlptest.Start(t)
	vars := r.Env("grpc")
	vars["OTEL_TRACES_SAMPLER"] = "always_off"
	tr, err := start(t, env(vars), "v1")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Provider().Tracer("x").Start(context.Background(), "not sampled")
	span.End()
	_ = tr.Shutdown(context.Background())
	if n := len(r.Spans()); n != 0 {
		t.Errorf("always_off sampler: %d spans exported", n)
	}
}

// TestLogHandlerNamesTheTrace: a record logged with a traced context
// carries its trace and span ids; one without a trace carries none.
func TestLogHandlerNamesTheTrace(t *testing.T) {
	r := otlptest.Start(t)
	tr, err := start(t, env(r.Env("grpc")), "v1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewTextHandler(&buf, nil))).With("component", "c")
	ctx, span := tr.Provider().Tracer(telemetry.Scope("test")).Start(context.Background(), "op")
	log.InfoContext(ctx, "inside")
	span.End()
	log.InfoContext(context.Background(), "outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	sc := span.SpanContext()
	if len(lines) != 2 || !strings.Contains(lines[0], "trace_id="+sc.TraceID().String()) || !strings.Contains(lines[0], "span_id="+sc.SpanID().String()) ||
		!strings.Contains(lines[0], "component=c") || strings.Contains(lines[1], "trace_id") {
		t.Errorf("log lines:\n%s\nwant the first with trace %s and span %s, the second with neither", buf.String(), sc.TraceID(), sc.SpanID())
	}
}
