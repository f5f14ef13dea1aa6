package app

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sdkLogHandler is the Temporal SDK's log handler. It demotes to DEBUG
// the SDK's warning "RecordActivityHeartbeat with error" and its error
// "Activity error." when the error is a cancellation, none of them a
// fault:
//   - the SDK sends a turn's last batched heartbeat on the activity's
//     context, which ends with the turn, so a loaded worker logged the
//     warning for about one turn in ten (measured: 163 in 1,600 turns; 20
//     in one `make bench`). The SDK hands the log the gRPC client's
//     answer, a *serviceerror.Canceled;
//   - Temporal answers a heartbeat with the workflow's cancellation of the
//     activity (an interrupt the push did not deliver first, a deletion):
//     a *temporal.CanceledError, which the turn then returns.
//
// Other errors keep their level.
type sdkLogHandler struct{ slog.Handler }

const (
	heartbeatErrorMessage = "RecordActivityHeartbeat with error"
	activityErrorMessage  = "Activity error."
)

func (h sdkLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if (r.Message == heartbeatErrorMessage || r.Message == activityErrorMessage) && r.Level > slog.LevelDebug && canceledAttr(r) {
		if !h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r = r.Clone()
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h sdkLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return sdkLogHandler{h.Handler.WithAttrs(attrs)}
}

func (h sdkLogHandler) WithGroup(name string) slog.Handler {
	return sdkLogHandler{h.Handler.WithGroup(name)}
}

// canceledAttr reports whether r carries an error attribute that is a
// cancellation: context.Canceled, a gRPC status Canceled (as a status or
// as the Temporal client's serviceerror), or the activity's cancellation.
func canceledAttr(r slog.Record) bool {
	canceled := false
	r.Attrs(func(a slog.Attr) bool {
		err, ok := a.Value.Any().(error)
		if !ok || !strings.EqualFold(a.Key, "error") {
			return true
		}
		var answer *serviceerror.Canceled
		var activity *temporal.CanceledError
		canceled = errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled ||
			errors.As(err, &answer) || errors.As(err, &activity)
		return false
	})
	return canceled
}
