package session_test

import (
	"context"
	"io"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"

	"github.com/mangohq/mango/execution-worker/internal/metrics"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
	"github.com/mangohq/mango/execution-worker/workflows/session"
	"github.com/mangohq/mango/internal/promtest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// contextCP is a toolCP whose run carries a turn context (without
// resources), as the api-server's does.
type contextCP struct{ *toolCP }

func (f contextCP) GetRun(ctx context.Context, req *pb.GetRunRequest, opts ...grpc.CallOption) (*pb.GetRunResponse, error) {
	run, err := f.toolCP.GetRun(ctx, req, opts...)
	if run != nil {
		run.TurnContext = &pb.TurnContext{}
	}
	return run, err
}

// discardOutputs is an output store that has nothing published and
// accepts every output.
type discardOutputs struct{}

func (discardOutputs) ListOutputs(context.Context, string) ([]*pb.Output, error) { return nil, nil }

func (discardOutputs) Publish(_ context.Context, _ *pb.PublishOutputHeader, r io.Reader) (*pb.PublishOutputResponse, error) {
	_, err := io.Copy(io.Discard, r)
	return &pb.PublishOutputResponse{}, err
}

// TestTurnSpansAndMetrics: a turn's bash calls each acquire the sandbox
// in a sandbox.acquire span of their own; the first reports it
// provisioned (it waited for the acquisition the turn started early), the
// second and the next turn's (the worker holds the sandbox) not. The
// session's files are materialized and its outputs published in spans
// that count them; the model spans carry the activity's attempt, and the
// turns' schedule-to-start and acquisitions are measured.
func TestTurnSpansAndMetrics(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), Installation: "tracing-test"})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New("local", "test", nil)
	manager := sandbox.NewSessionManager(p, sandboxtest.NewBindings(), "mango.local.h1")
	turn := func(script string) []sdktrace.ReadOnlySpan {
		rec.Reset()
		a := &session.TurnActivities{ControlPlane: contextCP{&toolCP{text: script}}, Model: modelfake.New(), Manager: manager,
			Tracer: tp.Tracer("agentruntime"), Metrics: m, OnStart: m.TurnScheduleToStart,
			Resources: &sessionfiles.Materializer{}, Outputs: &sessionfiles.Publisher{Store: discardOutputs{}}}
		if res := runTurn(t, a, session.RunTurnInput{SessionID: "sesn_1"}); res.Outcome != session.TurnIdle {
			t.Fatalf("outcome %s, want idle", res.Outcome)
		}
		return rec.Ended()
	}

	spans := turn("#tool bash {\"command\":\"printf hello > mnt/session/outputs/a.txt\"}\n#tool bash {\"command\":\"true\"}")
	if got := provisioned(t, spans); !slices.Equal(got, []string{"true", "false"}) {
		t.Errorf("first turn: the bash calls' sandbox.acquire spans say provisioned %v, want [true false]", got)
	}
	wantSpan(t, spans, "files.materialize", map[string]string{"mango.files.resources": "0"})
	wantSpan(t, spans, "files.publish_outputs", map[string]string{"mango.files.count": "1", "mango.files.bytes": "5"})
	wantSpan(t, spans, "model.request claude-sonnet-4-5", map[string]string{"mango.turn.attempt": "1"})

	spans = turn("#tool bash {\"command\":\"true\"}")
	if got := provisioned(t, spans); !slices.Equal(got, []string{"false"}) {
		t.Errorf("second turn: sandbox.acquire says provisioned %v, want [false] (the worker holds the sandbox)", got)
	}

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   uint64
	}{
		{"mango_worker_turn_schedule_to_start_seconds", map[string]string{}, 2},
		{"mango_worker_sandbox_acquire_duration_seconds", map[string]string{"provider": "local", "provisioned": "true"}, 1},
		{"mango_worker_sandbox_acquire_duration_seconds", map[string]string{"provider": "local", "provisioned": "false"}, 2},
		{"mango_worker_tool_duration_seconds", map[string]string{"tool": "bash", "provider": "local"}, 3},
	} {
		if got, _ := promtest.HistogramCount(t, m.Registry, c.name, c.labels); got != c.want {
			t.Errorf("%s%v observed %d times, want %d", c.name, c.labels, got, c.want)
		}
	}
}

// provisioned returns, for each tool.execute bash span in the order they
// started, the provisioned attribute of its sandbox.acquire child.
func provisioned(t *testing.T, spans []sdktrace.ReadOnlySpan) []string {
	t.Helper()
	var bash []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "tool.execute bash" {
			bash = append(bash, s)
		}
	}
	slices.SortFunc(bash, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	var out []string
	for _, b := range bash {
		i := slices.IndexFunc(spans, func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "sandbox.acquire" && s.Parent().SpanID() == b.SpanContext().SpanID()
		})
		if i < 0 {
			t.Fatalf("a tool.execute bash span has no sandbox.acquire child")
		}
		out = append(out, spanAttrs(spans[i])["mango.sandbox.provisioned"])
	}
	return out
}

// wantSpan checks that a span called name exists and every one has
// attributes want.
func wantSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, name string, want map[string]string) {
	t.Helper()
	found := false
	for _, s := range spans {
		if s.Name() != name {
			continue
		}
		found = true
		got := spanAttrs(s)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("span %s: %s = %q, want %q", name, k, got[k], v)
			}
		}
	}
	if !found {
		t.Errorf("no %s span", name)
	}
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}
