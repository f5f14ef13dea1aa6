package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/mangohq/mango/api-server/internal/outbox"
	"github.com/mangohq/mango/db/dbtest"
	"github.com/mangohq/mango/internal/temporaltest"
)

// recorder returns a tracer provider that samples every span and the
// recorder of its ended spans.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// spansNamed returns the ended spans whose name starts with prefix.
func spansNamed(rec *tracetest.SpanRecorder, prefix string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if strings.HasPrefix(s.Name(), prefix) {
			out = append(out, s)
		}
	}
	return out
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// TestRelayDeliveryContinuesWritersTrace: a row written inside a traced
// request and delivered by the relay's poll (not the direct path, as after
// a crash of the api-server) gets an outbox.deliver span whose parent is
// the request's span, and Temporal's SignalWithStartWorkflow span (the
// one the workflow continues) is a child of that.
func TestRelayDeliveryContinuesWritersTrace(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	tp, rec := recorder(t)
	ti, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("temporal")})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.Dial(client.Options{HostPort: temporaltest.HostPort(t), Logger: temporaltest.Quiet{},
		Interceptors: []interceptor.ClientInterceptor{ti}})
	if err != nil {
		t.Fatalf("dial Temporal: %v", err)
	}
	t.Cleanup(tc.Close)

	id := newSessionID(t)
	createSession(t, store, id)
	reqCtx, request := tp.Tracer("test").Start(context.Background(), "POST /v1/sessions/{id}/events")
	wakeIn(t, reqCtx, store, id, "wakeup") // committed; no Wake, no Deliver: the relay's poll finds it
	request.End()

	opts := fastOptions(prometheus.NewRegistry())
	opts.Tracer = tp.Tracer("outbox")
	relay := outbox.New(store, tc, opts)
	runRelay(t, context.Background(), relay)
	waitFor(t, 30*time.Second, "the relay to deliver the row", func() bool {
		return len(outboxRows(t, store)) == 0 && len(spansNamed(rec, "outbox.deliver")) > 0
	})

	delivered := spansNamed(rec, "outbox.deliver")
	if len(delivered) != 1 {
		t.Fatalf("outbox.deliver spans = %d, want 1", len(delivered))
	}
	d := delivered[0]
	if d.Name() != "outbox.deliver wakeup" || d.SpanKind() != trace.SpanKindProducer || d.Status().Code == codes.Error {
		t.Errorf("span %q kind %v status %v, want \"outbox.deliver wakeup\", producer, not an error", d.Name(), d.SpanKind(), d.Status())
	}
	want := request.SpanContext()
	if d.Parent().TraceID() != want.TraceID() || d.Parent().SpanID() != want.SpanID() {
		t.Errorf("outbox.deliver parent = %s/%s, want the writing request's span %s/%s",
			d.Parent().TraceID(), d.Parent().SpanID(), want.TraceID(), want.SpanID())
	}
	a := attrs(d)
	if a["mango.session.id"].AsString() != id || a["mango.outbox.kind"].AsString() != "wakeup" ||
		a["mango.outbox.path"].AsString() != "relay" || a["mango.outbox.attempts"].AsInt64() != 0 ||
		a["mango.outbox.result"].AsString() != "ok" {
		t.Errorf("outbox.deliver attributes = %v, want session %s, kind wakeup, path relay, 0 attempts, result ok", d.Attributes(), id)
	}
	if age, ok := a["mango.outbox.age_ms"]; !ok || age.AsInt64() < 0 {
		t.Errorf("mango.outbox.age_ms = %v (set %v), want a non-negative age", age.AsInt64(), ok)
	}
	signals := spansNamed(rec, "SignalWithStartWorkflow")
	if len(signals) != 1 {
		t.Fatalf("Temporal SignalWithStartWorkflow spans = %d, want 1", len(signals))
	}
	if p := signals[0].Parent(); p.SpanID() != d.SpanContext().SpanID() || p.TraceID() != want.TraceID() {
		t.Errorf("SignalWithStartWorkflow parent = %s/%s, want the outbox.deliver span %s in the request's trace %s",
			p.TraceID(), p.SpanID(), d.SpanContext().SpanID(), want.TraceID())
	}
}

// TestDeliverySpanRecordsFailure: a delivery Temporal refuses ends its
// span with an error status, on the direct path; a row written without a
// span starts a new trace.
func TestDeliverySpanRecordsFailure(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	tp, rec := recorder(t)
	id := newSessionID(t)
	createSession(t, store, id)
	wake(t, store, id, "interrupt") // no span in the writer's context
	opts := fastOptions(nil)
	opts.Tracer = tp.Tracer("outbox")
	outbox.New(store, refusingStarter{}, opts).Deliver(context.Background(), id)

	spans := spansNamed(rec, "outbox.deliver")
	if len(spans) != 1 {
		t.Fatalf("outbox.deliver spans = %d, want 1", len(spans))
	}
	s := spans[0]
	if s.Name() != "outbox.deliver interrupt" || s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "refused") {
		t.Errorf("span %q status %+v, want \"outbox.deliver interrupt\" with an error naming the refusal", s.Name(), s.Status())
	}
	if a := attrs(s); a["mango.outbox.path"].AsString() != "direct" || a["mango.outbox.result"].AsString() != "error" {
		t.Errorf("attributes = %v, want path direct, result error", s.Attributes())
	}
	if s.Parent().IsValid() {
		t.Errorf("parent = %+v, want none (the row was written without tracing)", s.Parent())
	}
}

// refusingStarter refuses every workflow start.
type refusingStarter struct{}

func (refusingStarter) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, errors.New("refused by the test")
}

func (refusingStarter) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, errors.New("refused by the test")
}
