package wire

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/mcptest"
	"github.com/mangohq/mango/internal/telemetry/otlptest"
)

// TestTracingAcrossServices is issue 38's acceptance: with OTEL_* set on
// both binaries (the api-server exporting over gRPC, the worker over
// HTTP), one SDK-driven turn with a bash call and an MCP call (its server
// behind a vault credential) gives one connected trace from the
// user.message request to the turn's commit: the HTTP request, the outbox
// delivery, Temporal's signal, the workflow, RunTurn, the model requests,
// the tool call with the sandbox's acquisition under it, the MCP call and
// the ControlPlane calls on both sides, in that order, with their
// attributes. The message text, the command's output, the vault's token
// and the API key appear in no span; with content capture on, the
// message's text does (the token and key still do not).
func TestTracingAcrossServices(t *testing.T) {
	t.Parallel()
	t.Run("content off", func(t *testing.T) {
		t.Parallel()
		tr := runTraced(t, false)
		tr.connected(t)
		tr.attributes(t)
		tr.absent(t, tr.marker, tr.token, tr.apiKey)
	})
	t.Run("content on", func(t *testing.T) {
		t.Parallel()
		tr := runTraced(t, true)
		tr.absent(t, tr.token, tr.apiKey)
		for _, name := range []string{"tool.execute bash", "mcp.call tracker"} {
			s := tr.one(t, name)
			if !strings.Contains(s.Attrs["mango.tool.input"], tr.marker) || !strings.Contains(s.Attrs["mango.tool.output"], tr.marker) {
				t.Errorf("%s with content capture: attributes %v, want the input and output (with %q)", name, s.Attrs, tr.marker)
			}
		}
		if !tr.anyAttr(tr.marker, "gen_ai.output.text") {
			t.Errorf("no model request span carries its output text with content capture on")
		}
	})
}

// traced is one traced turn: the spans of the user.message's trace and
// what must not appear in them.
type traced struct {
	spans  []otlptest.Span // of the message's trace
	byID   map[string]otlptest.Span
	marker string // in the message, the command and its output
	token  string // the MCP server's bearer token, from the vault
	apiKey string
}

// runTraced runs the turn on a fresh server and worker sending spans to
// an in-process receiver, and collects the message's trace once its
// commit (CompleteTurn, both sides) and the outputs' publication are in.
func runTraced(t *testing.T, capture bool) *traced {
	t.Helper()
	r := otlptest.Start(t)
	content := fmt.Sprint(capture)
	opts := []testserver.Option{testserver.WithEnv("MANGO_MCP_ALLOW_PRIVATE", "1"), testserver.WithEnv("MANGO_OTEL_CAPTURE_CONTENT", content)}
	for k, v := range r.Env("grpc") {
		opts = append(opts, testserver.WithEnv(k, v))
	}
	srv := testserver.Start(t, opts...)
	workerEnv := r.Env("http/protobuf")
	workerEnv["MANGO_MCP_ALLOW_PRIVATE"], workerEnv["MANGO_OTEL_CAPTURE_CONTENT"] = "1", content
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	e.worker = startWorkerWith(t, srv, "traced", e.root, workerEnv)
	mcpSrv := mcptest.NewOAuth(t)
	token, _ := mcpSrv.Issue(time.Hour)
	sid := tracedSession(t, e, mcpSrv.URL, token)
	events := e.watch(t, sid)
	tr := &traced{marker: "planted-7f3a9c", token: token, apiKey: srv.APIKey}
	e.say(t, sid, "#tool bash {\"command\":\"echo "+tr.marker+"-out\"}\n#tool mcp__tracker__echo {\"text\":\""+tr.marker+"-mcp\"}")
	echoedMCP(t, until(t, events, "session.status_idle", 60*time.Second), tr.marker+"-mcp")

	has := func(spans []otlptest.Span, service, prefix string) bool {
		for _, s := range spans {
			if s.Service == service && strings.HasPrefix(s.Name, prefix) {
				return true
			}
		}
		return false
	}
	var msgTrace string
	r.Wait(t, 30*time.Second, "the user.message request's span", func(all []otlptest.Span) bool {
		for _, s := range all {
			if s.Service == "mango-api-server" && s.Name == "POST /v1/sessions/:id/events" && s.Attrs["http.route"] == "/v1/sessions/:id/events" {
				msgTrace = s.TraceID
			}
		}
		return msgTrace != ""
	})
	all := r.Wait(t, 30*time.Second, "the turn in the message's trace", func(all []otlptest.Span) bool {
		in := inTrace(all, msgTrace)
		return has(in, "mango-api-server", "mango.controlplane.v1.ControlPlane/CompleteTurn") &&
			has(in, "mango-execution-worker", "mango.controlplane.v1.ControlPlane/CompleteTurn") &&
			has(in, "mango-execution-worker", "files.publish_outputs") && has(in, "mango-execution-worker", "RunActivity:RunTurn")
	})
	tr.spans = inTrace(all, msgTrace)
	tr.byID = map[string]otlptest.Span{}
	for _, s := range tr.spans {
		tr.byID[s.SpanID] = s
	}
	return tr
}

// tracedSession makes an agent with the built-in toolset and the MCP
// server's tools, and a session whose vault holds the server's token.
func tracedSession(t *testing.T, e *turnEnv, mcpURL, token string) string {
	t.Helper()
	ctx, c := context.Background(), e.client
	vault, err := c.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "tracker"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Vaults.Credentials.New(ctx, vault.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: token, MCPServerURL: mcpURL}}}); err != nil {
		t.Fatal(err)
	}
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "traced", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"},
		MCPServers: []anthropic.BetaManagedAgentsURLMCPServerParams{{Name: "tracker", URL: mcpURL}},
		Tools: append(toolset, anthropic.BetaAgentNewParamsToolUnion{OfMCPToolset: &anthropic.BetaManagedAgentsMCPToolsetParams{MCPServerName: "tracker",
			DefaultConfig: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParams{PermissionPolicy: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParamsPermissionPolicyUnion{
				OfAlwaysAllow: &anthropic.BetaManagedAgentsAlwaysAllowPolicyParam{}}}}})})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("traced-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)},
		EnvironmentID: env.ID, VaultIDs: []string{vault.ID}})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

func inTrace(all []otlptest.Span, traceID string) []otlptest.Span {
	var in []otlptest.Span
	for _, s := range all {
		if s.TraceID == traceID {
			in = append(in, s)
		}
	}
	return in
}

// one returns the first span of the trace whose name starts with prefix.
func (tr *traced) one(t *testing.T, prefix string) otlptest.Span {
	t.Helper()
	for _, s := range tr.spans {
		if strings.HasPrefix(s.Name, prefix) {
			return s
		}
	}
	names := make([]string, 0, len(tr.spans))
	for _, s := range tr.spans {
		names = append(names, s.Service+"/"+s.Name)
	}
	t.Fatalf("no span %q in the message's trace; it has %v", prefix, names)
	return otlptest.Span{}
}

// under reports whether s descends from a span named by prefix.
func (tr *traced) under(s otlptest.Span, prefix string) bool {
	for p, ok := tr.byID[s.ParentID]; ok; p, ok = tr.byID[p.ParentID] {
		if strings.HasPrefix(p.Name, prefix) {
			return true
		}
	}
	return false
}

// connected checks the trace's shape: each hop a child (or descendant)
// of the one before and started after it, across both services.
func (tr *traced) connected(t *testing.T) {
	t.Helper()
	chain := []struct{ service, name, parent string }{
		{"mango-api-server", "POST /v1/sessions/:id/events", ""},
		{"mango-api-server", "outbox.deliver wakeup", "POST /v1/sessions/:id/events"},
		{"mango-api-server", "SignalWithStartWorkflow", "outbox.deliver"},
		{"mango-execution-worker", "HandleSignal", "SignalWithStartWorkflow"},
		{"mango-execution-worker", "RunActivity:RunTurn", ""},
		{"mango-execution-worker", "model.request fake", "RunActivity:RunTurn"},
		{"mango-execution-worker", "tool.execute bash", "RunActivity:RunTurn"},
		{"mango-execution-worker", "sandbox.acquire", "tool.execute bash"},
		{"mango-execution-worker", "mcp.call tracker", "RunActivity:RunTurn"},
		{"mango-execution-worker", "files.publish_outputs", "RunActivity:RunTurn"},
	}
	var prev otlptest.Span
	for i, c := range chain {
		s := tr.one(t, c.name)
		if s.Service != c.service {
			t.Errorf("%s comes from %s, want %s", c.name, s.Service, c.service)
		}
		if c.parent != "" && !tr.under(s, c.parent) {
			t.Errorf("%s is not under %s (parent %q)", c.name, c.parent, tr.byID[s.ParentID].Name)
		}
		if i > 0 && s.Start.Before(prev.Start) {
			t.Errorf("%s started at %v, before %s (%v)", c.name, s.Start, prev.Name, prev.Start)
		}
		prev = s
	}
	// The ControlPlane calls of the turn: the worker's client span, and
	// the api-server's server span as its child.
	client := tr.serviceSpan(t, "mango-execution-worker", "mango.controlplane.v1.ControlPlane/CompleteTurn")
	server := tr.serviceSpan(t, "mango-api-server", "mango.controlplane.v1.ControlPlane/CompleteTurn")
	if server.ParentID != client.SpanID || !tr.under(client, "RunActivity:RunTurn") {
		t.Errorf("CompleteTurn: the server span's parent is %q, want the worker's client span, itself under RunTurn", tr.byID[server.ParentID].Name)
	}
	if s := tr.one(t, "HandleSignal"); !tr.under(s, "POST /v1/sessions/:id/events") {
		t.Errorf("the workflow's handling of the signal is not under the user.message request")
	}
}

// serviceSpan returns the span named name of service.
func (tr *traced) serviceSpan(t *testing.T, service, name string) otlptest.Span {
	t.Helper()
	for _, s := range tr.spans {
		if s.Service == service && s.Name == name {
			return s
		}
	}
	t.Fatalf("no %s span %s in the message's trace", service, name)
	return otlptest.Span{}
}

// attributes checks what each hop's span says.
func (tr *traced) attributes(t *testing.T) {
	t.Helper()
	want := map[string]map[string]string{
		"outbox.deliver wakeup": {"mango.outbox.kind": "wakeup", "mango.outbox.path": "", "mango.session.id": ""},
		"model.request fake": {"gen_ai.request.model": "fake", "gen_ai.usage.input_tokens": "", "gen_ai.usage.output_tokens": "",
			"gen_ai.response.finish_reasons": "", "mango.turn.attempt": "1"},
		"tool.execute bash": {"gen_ai.tool.name": "bash", "mango.sandbox.provider": "local", "mango.tool.is_error": "false",
			"mango.tool.output_bytes": "", "process.exit.code": "0"},
		"sandbox.acquire":  {"mango.sandbox.provider": "local", "mango.sandbox.provisioned": "true"},
		"mcp.call tracker": {"mcp.server.name": "tracker", "gen_ai.tool.name": "echo", "mango.tool.is_error": "false", "mango.tool.output_bytes": ""},
	}
	for name, attrs := range want {
		s := tr.one(t, name)
		for k, v := range attrs {
			got, ok := s.Attrs[k]
			if !ok || (v != "" && got != v) || (v == "" && (got == "" || got == "0")) {
				t.Errorf("%s: %s = %q (set %v), want %q (empty: any non-zero value); all %v", name, k, got, ok, v, s.Attrs)
			}
		}
	}
	if tr.one(t, "outbox.deliver").Kind.String() == "" {
		t.Error("outbox span without a kind")
	}
	// Streamed requests carry their time to first token.
	for _, s := range tr.spans {
		if strings.HasPrefix(s.Name, "model.request") && s.Attrs["mango.model.streaming"] == "true" && s.Attrs["gen_ai.response.time_to_first_token_ms"] == "" {
			t.Errorf("streamed model request without its time to first token: %v", s.Attrs)
		}
	}
}

// absent checks that no attribute (span or resource) of the trace holds
// any of secrets.
func (tr *traced) absent(t *testing.T, secrets ...string) {
	t.Helper()
	for _, s := range tr.spans {
		for _, attrs := range []map[string]string{s.Attrs, s.Resource} {
			for k, v := range attrs {
				for _, secret := range secrets {
					if strings.Contains(v, secret) {
						t.Errorf("span %s/%s attribute %s carries %q: %q", s.Service, s.Name, k, secret, v)
					}
				}
			}
		}
	}
}

// anyAttr reports whether an attribute key of some span holds text.
func (tr *traced) anyAttr(text, key string) bool {
	for _, s := range tr.spans {
		if strings.Contains(s.Attrs[key], text) {
			return true
		}
	}
	return false
}
