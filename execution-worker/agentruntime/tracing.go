package agentruntime

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/tools"
)

// Spans of the agent loop. Their attributes carry names, sizes, counts
// and timings, never message text, tool input or tool output.

func (c *Core) tracer() trace.Tracer {
	if c.Tracer == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return c.Tracer
}

// modelSpan starts the span of one model request (message n of the turn).
func (c *Core) modelSpan(ctx context.Context, req *model.Request, n int, streaming bool) (context.Context, *modelTrace) {
	ctx, span := c.tracer().Start(ctx, "model.request "+req.Model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.request.model", req.Model), attribute.Int("mango.turn.message", n),
			attribute.Bool("mango.model.streaming", streaming), attribute.Int("gen_ai.request.max_tokens", req.MaxTokens)))
	return ctx, &modelTrace{span: span, start: time.Now()}
}

// modelTrace is an open model request span.
type modelTrace struct {
	span  trace.Span
	start time.Time
	first time.Duration // to the first streamed delta, 0 before it
}

// delta notes a streamed event (the first one is the time to first
// token).
func (m *modelTrace) delta() {
	if m.first == 0 {
		m.first = time.Since(m.start)
		m.span.AddEvent("first token")
	}
}

// end ends the span with the response or the error.
func (m *modelTrace) end(resp *model.Response, err error) {
	if m.first > 0 {
		m.span.SetAttributes(attribute.Float64("gen_ai.response.time_to_first_token_ms", float64(m.first.Microseconds())/1000))
	}
	if err != nil {
		m.span.SetStatus(codes.Error, "model request failed")
		retryable, _ := model.Retryable(err)
		m.span.SetAttributes(attribute.Bool("mango.model.retryable", retryable))
	}
	if resp != nil {
		u := resp.Usage
		m.span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", u.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", u.OutputTokens),
			attribute.Int64("gen_ai.usage.cache_read_input_tokens", u.CacheReadInputTokens),
			attribute.Int64("gen_ai.usage.cache_creation_input_tokens", u.CacheCreationInputTokens),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{resp.StopReason}))
	}
	m.span.End()
}

// toolSpan runs a built-in tool call in a span of its own.
func (c *Core) toolSpan(ctx context.Context, name, provider string, call func(context.Context) (tools.Result, error)) (tools.Result, error) {
	ctx, span := c.tracer().Start(ctx, "tool.execute "+name, trace.WithAttributes(attribute.String("gen_ai.tool.name", name),
		attribute.String("mango.sandbox.provider", provider)))
	defer span.End()
	r, err := call(ctx)
	switch {
	case err != nil:
		span.SetStatus(codes.Error, "tool call failed")
	case r.IsError:
		span.SetStatus(codes.Error, "tool reported an error")
	}
	span.SetAttributes(attribute.Int("mango.tool.output_bytes", len(r.Content)), attribute.Bool("mango.tool.is_error", r.IsError))
	return r, err
}
