package app

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	temporallog "go.temporal.io/sdk/log"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSDKLogDemotesCanceledHeartbeats: the SDK's warning about a
// heartbeat cut short by a cancellation becomes DEBUG (dropped at INFO);
// other heartbeat errors, and other warnings carrying a cancellation,
// stay warnings, through the SDK's logger and its With.
func TestSDKLogDemotesCanceledHeartbeats(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
		logger := temporallog.With(temporallog.NewStructuredLogger(slog.New(sdkLogHandler{base.Handler()}).With("component", "temporal")), "ActivityType", "RunTurn")
		logger.Warn(heartbeatErrorMessage, "Error", status.Error(codes.Canceled, "context canceled"))
		logger.Warn(heartbeatErrorMessage, "Error", context.Canceled)
		logger.Warn(heartbeatErrorMessage, "Error", errors.New("connection refused"))
		logger.Warn("Failed to poll for task.", "Error", context.Canceled)
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		var warned, debugged int
		for _, l := range lines {
			if !strings.Contains(l, "component=temporal") || !strings.Contains(l, "ActivityType=RunTurn") {
				t.Errorf("level %v: line %q lost its attributes", level, l)
			}
			switch {
			case strings.Contains(l, "level=WARN") && strings.Contains(l, "canceled") && strings.Contains(l, heartbeatErrorMessage):
				t.Errorf("level %v: a canceled heartbeat still warns: %q", level, l)
			case strings.Contains(l, "level=WARN"):
				warned++
			case strings.Contains(l, "level=DEBUG"):
				debugged++
			}
		}
		wantDebug := 0
		if level == slog.LevelDebug {
			wantDebug = 2
		}
		if warned != 2 || debugged != wantDebug {
			t.Errorf("level %v: %d warnings and %d debug lines, want 2 and %d:\n%s", level, warned, debugged, wantDebug, buf.String())
		}
	}
}
