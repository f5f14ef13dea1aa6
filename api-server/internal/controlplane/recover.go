package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"runtime/debug"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recoverer turns a panic in a handler into an Internal status so that one
// bad call cannot take the server down. The panic value and stack go to the
// server's log; the worker sees only "<method>: internal error". It recovers
// only panics on the handler's goroutine.
type recoverer struct{ log *slog.Logger }

func (r recoverer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (_ any, err error) {
	defer r.catch(ctx, info.FullMethod, &err)
	return handler(ctx, req)
}

func (r recoverer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer r.catch(ss.Context(), info.FullMethod, &err)
	return handler(srv, ss)
}

// catch must be deferred directly: it replaces *err when the handler panicked.
func (r recoverer) catch(ctx context.Context, fullMethod string, err *error) {
	v := recover()
	if v == nil {
		return
	}
	method := path.Base(fullMethod)
	r.log.ErrorContext(ctx, "controlplane: handler panicked", "method", method, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	*err = status.Error(codes.Internal, method+": internal error")
}
