// Package traceparent stores and restores the span of a context as a W3C
// traceparent string, for work that a later process continues (an outbox
// row). It depends on OpenTelemetry's API only, so a package storing the
// string (db) does not pull in the exporters of package telemetry.
package traceparent

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
)

// traceParentKey is the W3C trace context header that carries a span's
// trace id, span id and sampling flag.
const traceParentKey = "traceparent"

// Of returns the W3C traceparent of the span in ctx
// ("00-<trace id>-<span id>-<flags>"), for storing beside work that a
// later process continues (an outbox row), or "" when ctx holds no valid
// span (tracing off). Trace state and baggage are not carried.
func Of(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier.Get(traceParentKey)
}

// Join returns ctx with the remote span that traceParent (as Of wrote
// it) names, so spans started from it join that trace
// as its children. An empty or malformed traceParent leaves ctx as it is.
func Join(ctx context.Context, traceParent string) context.Context {
	if traceParent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{traceParentKey: traceParent})
}
