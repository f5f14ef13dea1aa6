package controlplane_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// flaky answers the first failures calls with code, then succeeds.
type flaky struct {
	pb.UnimplementedControlPlaneServer
	failures int32
	code     codes.Code
	calls    atomic.Int32
}

func (f *flaky) RecordToolJournal(context.Context, *pb.RecordToolJournalRequest) (*pb.RecordToolJournalResponse, error) {
	if f.calls.Add(1) <= f.failures {
		return nil, status.Error(f.code, "not now")
	}
	return &pb.RecordToolJournalResponse{Created: true}, nil
}

func serve(t *testing.T, ln net.Listener, svc pb.ControlPlaneServer) {
	t.Helper()
	srv := grpc.NewServer()
	pb.RegisterControlPlaneServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
}

func dialRetry(t *testing.T, addr string, budget time.Duration) *controlplane.Client {
	t.Helper()
	c, err := controlplane.Dial(addr, "tok", grpc.WithChainUnaryInterceptor(controlplane.RetryUnavailable(budget)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRetryUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		code      codes.Code
		failures  int32
		budget    time.Duration
		want      codes.Code
		wantCalls int32
	}{
		{"unavailable until it recovers", codes.Unavailable, 3, 30 * time.Second, codes.OK, 4},
		{"aborted (a concurrent update) is retried too", codes.Aborted, 1, 30 * time.Second, codes.OK, 2},
		{"a budget too short gives up", codes.Unavailable, 1000, 120 * time.Millisecond, codes.Unavailable, 0},
		{"other codes are not retried", codes.InvalidArgument, 5, 30 * time.Second, codes.InvalidArgument, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			svc := &flaky{failures: tt.failures, code: tt.code}
			serve(t, ln, svc)
			c := dialRetry(t, ln.Addr().String(), tt.budget)
			_, err = c.RecordToolJournal(context.Background(), &pb.RecordToolJournalRequest{SessionId: "s", ToolUseId: "u", Body: "{}"})
			if got := status.Code(err); got != tt.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tt.want)
			}
			if n := svc.calls.Load(); tt.wantCalls > 0 && n != tt.wantCalls {
				t.Errorf("server saw %d calls, want %d", n, tt.wantCalls)
			}
		})
	}
}

// TestRetryAcrossServerRestart: a call made while nothing listens (the
// api-server restarting) completes once the server is back on its address.
func TestRetryAcrossServerRestart(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // down

	var attempts atomic.Int32
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	c, err := controlplane.Dial(addr, "tok", grpc.WithChainUnaryInterceptor(controlplane.RetryUnavailable(30*time.Second), count))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	done := make(chan error, 1)
	go func() {
		_, err := c.RecordToolJournal(context.Background(), &pb.RecordToolJournalRequest{SessionId: "s", ToolUseId: "u", Body: "{}"})
		done <- err
	}()
	// Come back only after the call has failed and been retried, so the
	// test shows a retry rather than a slow first attempt.
	for attempts.Load() < 2 {
		select {
		case err := <-done:
			t.Fatalf("call returned %v while the server was down", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("address %s taken meanwhile: %v", addr, err)
	}
	serve(t, ln, &flaky{})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("call across the restart: %v, want success", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("call did not complete within 20s of the server coming back")
	}
}
