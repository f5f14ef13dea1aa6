package controlplane

import (
	"context"
	"time"

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
		deadline := time.Now().Add(budget)
		wait := retryFirst
		for {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if c := status.Code(err); c != codes.Unavailable && c != codes.Aborted {
				return err
			}
			if time.Now().Add(wait).After(deadline) {
				return err
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
			wait = min(2*wait, retryMax)
		}
	}
}
