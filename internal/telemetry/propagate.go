package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
)

// traceParentKey is the W3C trace context header that carries a span's
// trace id, span id and sampling flag.
const traceParentKey = "traceparent"

// TraceParent returns the W3C traceparent of the span in ctx
// ("00-<trace id>-<span id>-<flags>"), for storing beside work that a
// later process continues (an outbox row), or "" when ctx holds no valid
// span (tracing off). Trace state and baggage are not carried.
func TraceParent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier.Get(traceParentKey)
}

// WithTraceParent returns ctx with the remote span that traceParent (as
// TraceParent wrote it) names, so spans started from it join that trace
// as its children. An empty or malformed traceParent leaves ctx as it is.
func WithTraceParent(ctx context.Context, traceParent string) context.Context {
	if traceParent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{traceParentKey: traceParent})
}
