package agentruntime_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/internal/metrics"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/internal/promtest"
)

// planted is in the user's message, a bash command, its output and an
// MCP tool's input: content that no span may carry unless asked to.
const planted = "planted-7f3a9c"

// tracedScript is a turn of three tool rounds: a bash command that prints
// the planted text and exits 3, one whose 5000-byte output is too long for
// a span, and an MCP call.
const tracedScript = `#tool bash {"command":"echo ` + planted + `-out; sh -c 'exit 3'"}
#tool bash {"command":"head -c 5000 /dev/zero | tr '\\0' a"}
#tool mcp__docs__echo {"q":"` + planted + `"}`

// tracedTurn is a turn run with a span recorder and the worker's metrics.
type tracedTurn struct {
	spans   []sdktrace.ReadOnlySpan
	root    trace.SpanContext // the span the turn ran in
	metrics *metrics.Worker
}

// nopPreview makes the core stream its model requests.
type nopPreview struct{}

func (nopPreview) Start(string, string) {}
func (nopPreview) Delta(string, string) {}

// runTraced runs tracedScript for an agent with bash and the MCP server
// "docs" (its URL carrying credentials), capturing content as asked, on a
// local sandbox that reports itself provisioned to its first acquisition
// only, as the worker's turn does.
func runTraced(t *testing.T, capture bool) *tracedTurn {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	box, _ := bashSandbox(t, "sess_traced")
	tc, err := agentruntime.ParseToolConfig(json.RawMessage(strings.TrimSuffix(bashToolset, "]") +
		`,{"type":"mcp_toolset","mcp_server_name":"docs","default_config":{"permission_policy":{"type":"always_allow"}}}]`))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New("local", "test", nil)
	core := &agentruntime.Core{Model: modelfake.New(), Store: newMemStore(), MCP: &fakeMCP{}, Preview: nopPreview{},
		Tracer: tp.Tracer("agentruntime"), CaptureContent: capture, Metrics: m}
	agent := &agentruntime.Agent{ID: "agent_1", MCPServers: []agentruntime.MCPServer{{Type: "url", Name: "docs", URL: "https://user:s3cr3t@docs.example/mcp?token=t0k3n"}}}
	agent.Model.ID = "claude-sonnet-4-5"
	var acquired atomic.Int32
	acquire := func(ctx context.Context) (sandbox.Sandbox, error) {
		if acquired.Add(1) == 1 {
			agentruntime.MarkProvisioned(ctx)
		}
		return box, nil
	}
	msg := model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: tracedScript}}}
	ctx, root := tp.Tracer("test").Start(t.Context(), "turn")
	res, err := core.Run(ctx, &agentruntime.Run{TurnKey: "sevt_t", SessionID: "sess_traced", Agent: agent, Tools: tc, Attempt: 2,
		Conversation: []model.Message{msg}, TurnMessages: 1, Unsaved: []agentruntime.TranscriptMessage{{Key: "sevt_t/0", Msg: msg}}, Sandbox: acquire})
	root.End()
	if err != nil || res.Outcome != agentruntime.OutcomeEndTurn {
		t.Fatalf("Run = %+v, %v; want the turn to end", res, err)
	}
	return &tracedTurn{spans: rec.Ended(), root: root.SpanContext(), metrics: m}
}

// named returns the spans called name, in the order they started.
func (tt *tracedTurn) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tt.spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return out
}

// childOf returns the span called name whose parent is parent.
func (tt *tracedTurn) childOf(parent sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	for _, s := range tt.spans {
		if s.Name() == name && s.Parent().SpanID() == parent.SpanContext().SpanID() {
			return s
		}
	}
	return nil
}

// attr returns the value of s's attribute key ("" and false without it).
func attr(s sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}

// wantAttrs checks attributes of s (values as attribute.Value.Emit gives
// them).
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := attr(s, k); !ok || got != v {
			t.Errorf("span %s: %s = %q (present: %v), want %q", s.Name(), k, got, ok, v)
		}
	}
}

// contentKeys are the attributes that carry content.
var contentKeys = []string{"gen_ai.output.text", "mango.tool.input", "mango.tool.output"}

// TestSpansOfATurn: a turn's model requests, built-in tool calls (each
// acquiring its sandbox within its span) and MCP call make spans under the
// turn's, named and attributed as documented, the bash call's with the
// command's exit code; without content capture no attribute carries the
// message, a command, its output or an MCP input, and none the MCP
// server's URL.
func TestSpansOfATurn(t *testing.T) {
	t.Parallel()
	tt := runTraced(t, false)
	root := tt.root.SpanID()

	bash := tt.named("tool.execute bash")
	if len(bash) != 2 {
		t.Fatalf("%d tool.execute bash spans, want 2", len(bash))
	}
	for i, s := range bash {
		if s.Parent().SpanID() != root {
			t.Errorf("bash span %d: parent %s, want the turn's span", i, s.Parent().SpanID())
		}
		acq := tt.childOf(s, "sandbox.acquire")
		if acq == nil {
			t.Fatalf("bash span %d has no sandbox.acquire child: the sandbox was acquired outside the tool's span", i)
		}
		wantAttrs(t, acq, map[string]string{"mango.sandbox.provider": "local", "mango.sandbox.provisioned": []string{"true", "false"}[i]})
		wantAttrs(t, s, map[string]string{"gen_ai.tool.name": "bash", "mango.sandbox.provider": "local"})
	}
	if n := len(tt.named("sandbox.acquire")); n != 2 {
		t.Errorf("%d sandbox.acquire spans, want 2 (one per bash call)", n)
	}
	wantAttrs(t, bash[0], map[string]string{"process.exit.code": "3", "mango.tool.is_error": "true"})
	if bash[0].Status().Code != codes.Error {
		t.Errorf("failing command's span status %v, want Error", bash[0].Status())
	}
	wantAttrs(t, bash[1], map[string]string{"process.exit.code": "0", "mango.tool.is_error": "false", "mango.tool.output_bytes": "5000"})

	mcp := tt.named("mcp.call docs")
	if len(mcp) != 1 {
		t.Fatalf("%d mcp.call docs spans, want 1", len(mcp))
	}
	if mcp[0].Parent().SpanID() != root || mcp[0].SpanKind() != trace.SpanKindClient {
		t.Errorf("MCP span: parent %s kind %v, want the turn's span and client", mcp[0].Parent().SpanID(), mcp[0].SpanKind())
	}
	wantAttrs(t, mcp[0], map[string]string{"mcp.server.name": "docs", "gen_ai.tool.name": "echo", "mango.tool.is_error": "false",
		"mango.tool.output_bytes": "8"})

	models := tt.named("model.request claude-sonnet-4-5")
	if len(models) != 4 {
		t.Fatalf("%d model request spans, want 4 (three tool rounds and the answer)", len(models))
	}
	for _, s := range models {
		wantAttrs(t, s, map[string]string{"mango.turn.attempt": "2", "mango.model.streaming": "true"})
		if !slices.ContainsFunc(s.Events(), func(e sdktrace.Event) bool { return e.Name == "first token" }) {
			t.Errorf("model span without its first token event: %v", s.Events())
		}
	}

	for _, s := range tt.spans {
		for _, k := range contentKeys {
			if v, ok := attr(s, k); ok {
				t.Errorf("span %s carries %s = %.80q without content capture", s.Name(), k, v)
			}
		}
		for _, kv := range s.Attributes() {
			if v := kv.Value.String(); strings.Contains(v, planted) || strings.Contains(v, "docs.example") || strings.Contains(v, "t0k3n") {
				t.Errorf("span %s attribute %s = %.80q carries content or the MCP server's URL", s.Name(), kv.Key, v)
			}
		}
	}
}

// TestSpansCaptureContent: with content capture, the spans carry the tool
// calls' input and output and the model's text, a value longer than
// MaxContentBytes cut to it and marked with its size.
func TestSpansCaptureContent(t *testing.T) {
	t.Parallel()
	tt := runTraced(t, true)
	bash := tt.named("tool.execute bash")
	if len(bash) != 2 {
		t.Fatalf("%d tool.execute bash spans, want 2", len(bash))
	}
	wantAttrs(t, bash[0], map[string]string{"mango.tool.input": `{"command":"echo ` + planted + `-out; sh -c 'exit 3'"}`})
	if out, _ := attr(bash[0], "mango.tool.output"); !strings.Contains(out, planted+"-out") || !strings.Contains(out, "[exit code 3]") {
		t.Errorf("bash output attribute %q, want the command's output and exit code", out)
	}
	long, _ := attr(bash[1], "mango.tool.output")
	if len(long) > agentruntime.MaxContentBytes || !strings.HasPrefix(long, "aaaa") || !strings.HasSuffix(long, "…(5000 bytes)") {
		t.Errorf("5000-byte output attribute of %d bytes ending %q; want at most %d bytes of it, marked …(5000 bytes)",
			len(long), long[max(0, len(long)-20):], agentruntime.MaxContentBytes)
	}

	mcp := tt.named("mcp.call docs")
	if len(mcp) != 1 {
		t.Fatalf("%d mcp.call docs spans, want 1", len(mcp))
	}
	wantAttrs(t, mcp[0], map[string]string{"mango.tool.input": `{"q":"` + planted + `"}`, "mango.tool.output": "echo ran"})

	models := tt.named("model.request claude-sonnet-4-5")
	if len(models) == 0 {
		t.Fatal("no model request spans")
	}
	if text, _ := attr(models[len(models)-1], "gen_ai.output.text"); text == "" {
		t.Error("the answer's model span has no gen_ai.output.text with content capture")
	}
}

// TestMetricsOfATurn: the turn's model requests (with their time to first
// token), tool calls and sandbox acquisitions are measured with their
// labels.
func TestMetricsOfATurn(t *testing.T) {
	t.Parallel()
	tt := runTraced(t, false)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   uint64
	}{
		{"mango_worker_model_request_duration_seconds", map[string]string{"model": "claude-sonnet-4-5", "outcome": "ok"}, 4},
		{"mango_worker_model_time_to_first_token_seconds", map[string]string{"model": "claude-sonnet-4-5"}, 4},
		{"mango_worker_tool_duration_seconds", map[string]string{"tool": "bash", "provider": "local"}, 2},
		{"mango_worker_tool_duration_seconds", map[string]string{"tool": "mcp", "provider": "mcp"}, 1},
		{"mango_worker_sandbox_acquire_duration_seconds", map[string]string{"provider": "local", "provisioned": "true"}, 1},
		{"mango_worker_sandbox_acquire_duration_seconds", map[string]string{"provider": "local", "provisioned": "false"}, 1},
	} {
		if got, _ := promtest.HistogramCount(t, tt.metrics.Registry, c.name, c.labels); got != c.want {
			t.Errorf("%s%v observed %d times, want %d", c.name, c.labels, got, c.want)
		}
	}
}
