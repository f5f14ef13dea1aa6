package agentruntime

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/tools"
)

// Spans of the agent loop. Their attributes carry names, sizes, counts
// and timings. Message text, tool input and tool output appear only with
// Core.CaptureContent (MANGO_OTEL_CAPTURE_CONTENT), each value clipped to
// MaxContentBytes. The same places measure the loop for Core.Metrics.

// MaxContentBytes bounds each content attribute of a span: a longer value
// is cut and ends in "…(N bytes)", N being its whole size.
const MaxContentBytes = 4 << 10

func (c *Core) tracer() trace.Tracer {
	if c.Tracer == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return c.Tracer
}

// clipContent is s as a span carries it: whole up to MaxContentBytes,
// else cut (on a UTF-8 boundary) and marked with its size.
func clipContent(s string) string {
	if len(s) <= MaxContentBytes {
		return s
	}
	mark := fmt.Sprintf("…(%d bytes)", len(s))
	return tools.CutUTF8(s, MaxContentBytes-len(mark)) + mark
}

// modelSpan starts the span of one model request (message n of the turn).
func (c *Core) modelSpan(ctx context.Context, run *Run, req *model.Request, n int, streaming bool) (context.Context, *modelTrace) {
	attrs := []attribute.KeyValue{attribute.String("gen_ai.request.model", req.Model), attribute.Int("mango.turn.message", n),
		attribute.Bool("mango.model.streaming", streaming), attribute.Int("gen_ai.request.max_tokens", req.MaxTokens)}
	if run.Attempt > 0 {
		attrs = append(attrs, attribute.Int("mango.turn.attempt", run.Attempt))
	}
	ctx, span := c.tracer().Start(ctx, "model.request "+req.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, &modelTrace{span: span, metrics: c.metrics(), model: req.Model, capture: c.CaptureContent, start: time.Now()}
}

// modelTrace is an open model request span.
type modelTrace struct {
	span    trace.Span
	metrics Metrics
	model   string
	capture bool // the span carries the response's text
	start   time.Time
	// first is the time to the first streamed delta, once streamed is set.
	first    time.Duration
	streamed bool
}

// delta notes a streamed event (the first one is the time to first
// token).
func (m *modelTrace) delta() {
	if m.streamed {
		return
	}
	m.streamed, m.first = true, time.Since(m.start)
	m.span.AddEvent("first token")
	m.metrics.ModelFirstToken(m.model, m.first)
}

// end ends the span with the response or the error, and measures the
// request.
func (m *modelTrace) end(resp *model.Response, err error) {
	m.metrics.ModelRequest(m.model, err != nil, time.Since(m.start))
	if m.streamed {
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
		if m.capture {
			m.span.SetAttributes(attribute.String("gen_ai.output.text", clipContent(responseText(resp))))
		}
	}
	m.span.End()
}

// responseText is the text blocks of a response, joined by newlines.
func responseText(resp *model.Response) string {
	var parts []string
	for _, b := range resp.Content {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// toolSpan starts the span of a call of built-in tool name; the call
// names the sandbox provider it runs in once it has its sandbox (ranIn).
func (c *Core) toolSpan(ctx context.Context, name string, input json.RawMessage) (context.Context, *toolTrace) {
	return c.startTool(ctx, "tool.execute "+name, name, "", input, trace.WithAttributes(attribute.String("gen_ai.tool.name", name)))
}

// mcpSpan starts the span of a call of MCP tool t. The server is named as
// the agent names it: its URL (which may carry credentials) never
// appears.
func (c *Core) mcpSpan(ctx context.Context, t *mcpTool, input json.RawMessage) (context.Context, *toolTrace) {
	return c.startTool(ctx, "mcp.call "+t.server, MCPMetricsLabel, MCPMetricsLabel, input, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("mcp.server.name", t.server), attribute.String("gen_ai.tool.name", t.name)))
}

// startTool starts a tool call's span, measured as tool on provider.
func (c *Core) startTool(ctx context.Context, span, tool, provider string, input json.RawMessage, opts ...trace.SpanStartOption) (context.Context, *toolTrace) {
	ctx, s := c.tracer().Start(ctx, span, opts...)
	if c.CaptureContent {
		s.SetAttributes(attribute.String("mango.tool.input", clipContent(string(input))))
	}
	return ctx, &toolTrace{span: s, metrics: c.metrics(), tool: tool, provider: provider, capture: c.CaptureContent, start: time.Now()}
}

// toolTrace is an open tool call span.
type toolTrace struct {
	span           trace.Span
	metrics        Metrics
	tool, provider string // provider "": the call has no sandbox (yet)
	capture        bool   // the span carries the result's content
	start          time.Time
}

// ranIn notes the sandbox provider the call runs in.
func (t *toolTrace) ranIn(provider string) {
	t.provider = provider
	t.span.SetAttributes(attribute.String("mango.sandbox.provider", provider))
}

// end ends the span with the call's result or error, and measures the
// call (one that never got its sandbox did not run: it is not).
func (t *toolTrace) end(r tools.Result, err error) {
	switch {
	case err != nil:
		t.span.SetStatus(codes.Error, "tool call failed")
	case r.IsError:
		t.span.SetStatus(codes.Error, "tool reported an error")
	}
	t.span.SetAttributes(attribute.Int("mango.tool.output_bytes", len(r.Content)), attribute.Bool("mango.tool.is_error", r.IsError))
	if t.capture && err == nil {
		t.span.SetAttributes(attribute.String("mango.tool.output", clipContent(r.Content)))
	}
	t.span.End()
	if t.provider != "" {
		t.metrics.ToolCall(t.tool, t.provider, time.Since(t.start))
	}
}

// acquisition is what Run.Sandbox tells the sandbox.acquire span of the
// call (MarkProvisioned).
type acquisition struct{ provisioned atomic.Bool }

type acquisitionKey struct{}

// MarkProvisioned tells, from within Run.Sandbox, that the sandbox it
// returns was provisioned (created, or re-attached after the worker lost
// it) for this turn rather than the one the worker holds: the
// acquisition's span and measure say so. Outside Run.Sandbox it does
// nothing.
func MarkProvisioned(ctx context.Context) {
	if a, ok := ctx.Value(acquisitionKey{}).(*acquisition); ok {
		a.provisioned.Store(true)
	}
}

// sandbox returns the session's sandbox (Run.Sandbox) in a sandbox.acquire
// span, a child of the call that needs it, and measures the wait.
func (c *Core) sandbox(ctx context.Context, run *Run) (sandbox.Sandbox, error) {
	acq := &acquisition{}
	ctx, span := c.tracer().Start(context.WithValue(ctx, acquisitionKey{}, acq), "sandbox.acquire")
	defer span.End()
	start := time.Now()
	sb, err := run.Sandbox(ctx)
	if err != nil {
		span.SetStatus(codes.Error, "sandbox not acquired")
		return nil, err
	}
	provider, provisioned := sb.Ref().Provider, acq.provisioned.Load()
	span.SetAttributes(attribute.String("mango.sandbox.provider", provider), attribute.Bool("mango.sandbox.provisioned", provisioned))
	c.metrics().SandboxAcquire(provider, provisioned, time.Since(start))
	return sb, nil
}
