package wire

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/telemetry/otlptest"
)

// TestTracingAcrossServices: with OTEL_* set on both binaries, spans of an
// SDK-driven session and its bash turn reach an OTLP receiver from the
// api-server (HTTP requests named by route, the ControlPlane's gRPC server
// side, Temporal's starts and signals) and from the worker (the workflow
// and its activities, the ControlPlane's gRPC client side), and the
// ControlPlane calls the worker makes inside an activity join that
// activity's trace on the api-server's side. Neither the message text nor
// the command's output appears in any attribute.
func TestTracingAcrossServices(t *testing.T) {
	t.Parallel()
	r := otlptest.Start(t)
	var opts []testserver.Option
	for k, v := range r.Env("grpc") {
		opts = append(opts, testserver.WithEnv(k, v))
	}
	srv := testserver.Start(t, opts...)
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	e.worker = startWorkerWith(t, srv, "traced", e.root, r.Env("http/protobuf"))
	sid := e.session(t, toolset)
	events := e.watch(t, sid)
	const secret = "planted-7f3a9c"
	e.say(t, sid, `#tool bash {"command":"echo `+secret+`-out"}`)
	until(t, events, "session.status_idle", 60*time.Second)
	if _, err := e.client.Beta.Sessions.Get(context.Background(), sid, anthropic.BetaSessionGetParams{}); err != nil {
		t.Fatal(err)
	}

	has := func(spans []otlptest.Span, service, prefix string) bool {
		for _, s := range spans {
			if s.Service == service && strings.HasPrefix(s.Name, prefix) {
				return true
			}
		}
		return false
	}
	spans := r.Wait(t, 30*time.Second, "spans of both services", func(s []otlptest.Span) bool {
		return has(s, "mango-api-server", "SignalWithStartWorkflow") &&
			has(s, "mango-execution-worker", "RunActivity") && has(s, "mango-execution-worker", "mango.controlplane") &&
			has(s, "mango-api-server", "mango.controlplane")
	})

	// The user.message request's trace runs through the signal it caused,
	// the workflow's handling of it, the turn's activity on the worker and
	// the ControlPlane calls the turn makes, back on the api-server.
	var msgTrace string
	for _, s := range spans {
		if s.Service == "mango-api-server" && s.Name == "POST /v1/sessions/:id/events" && s.Attrs["http.route"] == "/v1/sessions/:id/events" {
			msgTrace = s.TraceID
		}
	}
	if msgTrace == "" {
		t.Fatalf("no api-server span named by the route POST /v1/sessions/:id/events")
	}
	spans = r.Wait(t, 30*time.Second, "the turn in the message's trace", func(all []otlptest.Span) bool {
		var in []otlptest.Span
		for _, s := range all {
			if s.TraceID == msgTrace {
				in = append(in, s)
			}
		}
		return has(in, "mango-api-server", "SignalWithStartWorkflow") && has(in, "mango-execution-worker", "HandleSignal") &&
			has(in, "mango-execution-worker", "RunActivity:RunTurn") && has(in, "mango-execution-worker", "model.request") &&
			has(in, "mango-execution-worker", "tool.execute bash") && has(in, "mango-api-server", "mango.controlplane.v1.ControlPlane/CompleteTurn")
	})
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	// Every span of the trace but its root has its parent in the trace,
	// across both services (a span still open, such as the workflow's run,
	// is not exported yet: its children are let off).
	joined := 0
	for _, s := range spans {
		if s.TraceID != msgTrace {
			continue
		}
		if p, ok := byID[s.ParentID]; ok && p.Service != s.Service {
			joined++
		}
	}
	for _, s := range spans {
		if s.TraceID != msgTrace {
			continue
		}
		switch {
		case strings.HasPrefix(s.Name, "model.request"):
			if s.Attrs["gen_ai.request.model"] == "" || s.Attrs["gen_ai.usage.input_tokens"] == "" || s.Attrs["gen_ai.response.finish_reasons"] == "" {
				t.Errorf("model request span attributes %v, want the model, the tokens and the stop reason", s.Attrs)
			}
		case s.Name == "tool.execute bash":
			if s.Attrs["gen_ai.tool.name"] != "bash" || s.Attrs["mango.sandbox.provider"] != "local" || s.Attrs["mango.tool.output_bytes"] == "0" || s.Attrs["mango.tool.is_error"] != "false" {
				t.Errorf("tool span attributes %v, want bash on local with its output's size", s.Attrs)
			}
			if p, ok := byID[s.ParentID]; !ok || p.Name != "RunActivity:RunTurn" {
				t.Errorf("the tool span's parent is %q, want the turn's activity", p.Name)
			}
		}
	}
	if joined < 3 {
		t.Errorf("%d spans of the message's trace have a parent in the other service, want the signal, the ControlPlane calls ...", joined)
	}
	for _, s := range spans {
		for k, v := range s.Attrs {
			if strings.Contains(v, secret) {
				t.Errorf("span %s/%s attribute %s carries the message or output: %q", s.Service, s.Name, k, v)
			}
		}
	}
}
