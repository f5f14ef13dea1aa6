package tools_test

import (
	"encoding/json"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mangohq/mango/execution-worker/tools"
)

// TestBashExitCodeOnSpan: bash records the exit code of a command that ran
// to its end on the span of its context (process.exit.code), 0 included;
// a command killed by its timeout records none.
func TestBashExitCodeOnSpan(t *testing.T) {
	t.Parallel()
	sb := localSandboxes(t)(t, "sess_exit_code")
	for _, c := range []struct {
		input, want string
	}{
		{`{"command":"sh -c 'exit 4'"}`, "4"},
		{`{"command":"true"}`, "0"},
		{`{"command":"sleep 5","timeout_ms":200}`, ""},
	} {
		rec := tracetest.NewSpanRecorder()
		ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test").Start(t.Context(), "tool")
		if _, err := tools.Execute(ctx, sb, tools.Bash, json.RawMessage(c.input)); err != nil {
			t.Fatal(err)
		}
		span.End()
		got := ""
		for _, kv := range rec.Ended()[0].Attributes() {
			if kv.Key == "process.exit.code" {
				got = kv.Value.String()
			}
		}
		if got != c.want {
			t.Errorf("bash %s: process.exit.code %q, want %q", c.input, got, c.want)
		}
	}
}
