package app

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.temporal.io/api/serviceerror"
	temporallog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSDKLogDemotesCanceledHeartbeats: the SDK's warning about a
// heartbeat cut short by a cancellation, and its error about an activity
// ended by its cancellation, become DEBUG (dropped at INFO), whatever form
// the cancellation takes; other heartbeat and activity errors, and other
// warnings carrying a cancellation, keep their level, through the SDK's
// logger and its With.
func TestSDKLogDemotesCanceledHeartbeats(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
		logger := temporallog.With(temporallog.NewStructuredLogger(slog.New(sdkLogHandler{base.Handler()}).With("component", "temporal")), "ActivityType", "RunTurn")
		logger.Warn(heartbeatErrorMessage, "Error", status.Error(codes.Canceled, "context canceled"))
		logger.Warn(heartbeatErrorMessage, "Error", context.Canceled)
		// What the SDK logs: the gRPC client's answer as a serviceerror, and
		// the activity's cancellation by its workflow.
		logger.Warn(heartbeatErrorMessage, "Error", serviceerror.NewCanceled("context canceled"))
		logger.Warn(heartbeatErrorMessage, "Error", temporal.NewCanceledError())
		logger.Warn(heartbeatErrorMessage, "Error", serviceerror.NewUnavailable("connection refused"))
		logger.Error(activityErrorMessage, "Error", temporal.NewCanceledError())
		logger.Error(activityErrorMessage, "Error", errors.New("model unreachable"))
		logger.Warn(heartbeatErrorMessage, "Error", errors.New("connection refused"))
		logger.Warn("Failed to poll for task.", "Error", context.Canceled)
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		var warned, debugged int
		for _, l := range lines {
			if !strings.Contains(l, "component=temporal") || !strings.Contains(l, "ActivityType=RunTurn") {
				t.Errorf("level %v: line %q lost its attributes", level, l)
			}
			switch {
			case !strings.Contains(l, "level=DEBUG") && strings.Contains(l, "canceled") &&
				(strings.Contains(l, heartbeatErrorMessage) || strings.Contains(l, activityErrorMessage)):
				t.Errorf("level %v: a cancellation is still logged above DEBUG: %q", level, l)
			case strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR"):
				warned++
			case strings.Contains(l, "level=DEBUG"):
				debugged++
			}
		}
		wantDebug := 0
		if level == slog.LevelDebug {
			wantDebug = 5
		}
		if warned != 4 || debugged != wantDebug {
			t.Errorf("level %v: %d warnings and errors and %d debug lines, want 4 and %d:\n%s", level, warned, debugged, wantDebug, buf.String())
		}
	}
}
