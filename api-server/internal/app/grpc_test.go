package app_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/api-server/internal/testserver"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// TestControlPlaneServed checks that the api-server serves the ControlPlane
// on MANGO_GRPC_ADDR behind MANGO_WORKER_TOKEN.
func TestControlPlaneServed(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := pb.NewControlPlaneClient(conn)
	req := &pb.RecordWorkerHeartbeatRequest{WorkerId: "w1", Provider: "local", TaskQueues: []string{"mango.local"}}

	_, err = client.RecordWorkerHeartbeat(context.Background(), req)
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("heartbeat without token: %v, want Unauthenticated", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+srv.WorkerToken)
	if _, err := client.RecordWorkerHeartbeat(ctx, req); err != nil {
		t.Errorf("heartbeat with token: %v", err)
	}
}
