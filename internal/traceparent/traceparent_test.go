package traceparent_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/mangohq/mango/internal/traceparent"
)

// TestTraceParentRoundTrip: a span's traceparent names its trace, span
// and sampling flag, and Join makes it the remote parent again.
func TestTraceParentRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		flags trace.TraceFlags
		want  string
	}{
		{trace.FlagsSampled, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{0, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
	} {
		flags := tt.flags
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
			SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
			TraceFlags: flags,
		})
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		tp := traceparent.Of(ctx)
		if tp != tt.want {
			t.Errorf("Of(flags %v) = %q, want %q", flags, tp, tt.want)
		}
		got := trace.SpanContextFromContext(traceparent.Join(context.Background(), tp))
		if !got.IsRemote() || got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || got.TraceFlags() != flags {
			t.Errorf("WithOf(%q) span = %+v (remote %v), want %+v remote", tp, got, got.IsRemote(), sc)
		}
	}
}

// TestTraceParentWithoutSpan: no valid span gives "", and "" or a
// malformed value leaves the context as it was.
func TestTraceParentWithoutSpan(t *testing.T) {
	t.Parallel()
	if tp := traceparent.Of(context.Background()); tp != "" {
		t.Errorf("Of(no span) = %q, want empty", tp)
	}
	type key struct{}
	base := context.WithValue(context.Background(), key{}, "kept")
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"} {
		ctx := traceparent.Join(base, bad)
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			t.Errorf("WithOf(%q) gave span %+v, want none", bad, sc)
		}
		if ctx.Value(key{}) != "kept" {
			t.Errorf("WithOf(%q) lost the context's values", bad)
		}
	}
}
