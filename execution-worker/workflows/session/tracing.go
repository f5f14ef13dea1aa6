package session

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Spans of a turn's work around its core (whose spans agentruntime makes):
// the session's files placed into the sandbox, its outputs published and
// its memory stores synced. Their attributes carry counts and sizes, never
// a file's name or content.

// startSpan starts a span of a turn's work with the turns' tracer (none
// without one).
func (a *TurnActivities) startSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	tracer := a.Tracer
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	return tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// endSpan ends span, marked failed (what failed) when err is set.
func endSpan(span trace.Span, err error, what string) {
	if err != nil {
		span.SetStatus(codes.Error, what)
	}
	span.End()
}
