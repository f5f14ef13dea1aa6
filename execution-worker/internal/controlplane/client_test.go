package controlplane_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// fakeControlPlane answers heartbeats only when the expected token is sent.
type fakeControlPlane struct {
	pb.UnimplementedControlPlaneServer
	token string
}

func (f *fakeControlPlane) RecordWorkerHeartbeat(ctx context.Context, _ *pb.RecordWorkerHeartbeatRequest) (*pb.RecordWorkerHeartbeatResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+f.token {
		return nil, status.Errorf(codes.Unauthenticated, "authorization = %v", got)
	}
	return &pb.RecordWorkerHeartbeatResponse{}, nil
}

func TestDialSendsToken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterControlPlaneServer(srv, &fakeControlPlane{token: "s3cret"})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	for _, tc := range []struct {
		token string
		want  codes.Code
	}{{"s3cret", codes.OK}, {"wrong", codes.Unauthenticated}} {
		c, err := controlplane.Dial(ln.Addr().String(), tc.token)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		_, err = c.RecordWorkerHeartbeat(context.Background(), &pb.RecordWorkerHeartbeatRequest{WorkerId: "w", Provider: "local"})
		if got := status.Code(err); got != tc.want {
			t.Errorf("token %q: code %v (%v), want %v", tc.token, got, err, tc.want)
		}
		_ = c.Close()
	}
	if _, err := controlplane.Dial(ln.Addr().String(), ""); err == nil {
		t.Error("Dial with an empty token succeeded, want an error")
	}
}
