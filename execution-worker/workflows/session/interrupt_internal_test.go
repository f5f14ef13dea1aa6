package session

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/mangohq/mango/execution-worker/interrupts"
)

// TestInterruptedOnlyByARequestedCancel: only a cancellation Temporal
// requested (the workflow cancelled the turn), or a pushed interrupt meant
// for the turn, ends a turn as interrupted.
// A heartbeat answered "no such attempt" (the attempt timed out while
// Temporal was down) also cancels the context; treating that as an
// interrupt ended turns idle without their tool results.
func TestInterruptedOnlyByARequestedCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cause error
		want  bool
	}{
		{"cancel requested", temporal.NewCanceledError(), true},
		{"pushed interrupt", interrupts.ErrInterrupted, true},
		{"attempt unknown to the server", serviceerror.NewNotFound("invalid activityID or activity already timed out"), false},
		{"worker shutting down", errors.New("worker is shutting down"), false},
		{"plain cancel", nil, false},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(tt.cause)
		if got := interrupted(ctx); got != tt.want {
			t.Errorf("%s: interrupted = %v, want %v", tt.name, got, tt.want)
		}
	}
}
