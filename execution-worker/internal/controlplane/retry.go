package controlplane

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Retry backoff bounds of [RetryUnavailable].
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = time.Second
)

// RetryUnavailable returns a unary client interceptor that retries a call
// answered Unavailable (the api-server restarting or unreachable, or its
// database down) or Aborted (a concurrent update) with exponential backoff
// for up to budget in total, or until the call's context ends. Every
// ControlPlane RPC is idempotent (keyed appends, first-write-wins journal
// entries, upserts), so sending one again is safe; this is what keeps a
// finished tool's result from being lost, or reported ambiguous, because
// the control plane blinked. Other codes are returned at once.
func RetryUnavailable(budget time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if budget <= 0 {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		var last error
		_, err := backoff.Retry(ctx, func() (struct{}, error) {
			last = invoker(ctx, method, req, reply, cc, opts...)
			if c := status.Code(last); c != codes.Unavailable && c != codes.Aborted {
				return struct{}{}, backoff.Permanent(last) // nil on success
			}
			return struct{}{}, last
		}, backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: retryFirst, Multiplier: 2, MaxInterval: retryMax}),
			backoff.WithMaxElapsedTime(budget))
		if err != nil {
			// The budget spent, or ctx ended while waiting: the call's
			// own last error, not the context's.
			return last
		}
		return nil
	}
}
