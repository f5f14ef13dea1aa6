package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

func newClient(t *testing.T, srv *testserver.Server, opts ...option.RequestOption) anthropic.Client {
	t.Helper()
	base := []option.RequestOption{
		option.WithBaseURL(srv.BaseURL),
		option.WithAPIKey(srv.APIKey),
		option.WithMaxRetries(0),
	}
	return anthropic.NewClient(append(base, opts...)...)
}

// wantAPIError asserts that err is an SDK API error with the given status.
func wantAPIError(t *testing.T, err error, status int) {
	t.Helper()
	_ = apiErrorWithStatus(t, err, status)
}

// apiErrorWithStatus is wantAPIError returning the error for more checks.
func apiErrorWithStatus(t *testing.T, err error, status int) *anthropic.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("expected an API error with status %d, got success", status)
	}
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("expected *anthropic.Error with status %d, got %T: %v", status, err, err)
	}
	if apiErr.StatusCode != status {
		t.Fatalf("status = %d, want %d (body: %s)", apiErr.StatusCode, status, apiErr.RawJSON())
	}
	if apiErr.Response != nil && apiErr.Response.Header.Get("request-id") == "" {
		t.Errorf("error response has no request-id header")
	}
	return apiErr
}

// waitSessionGone waits up to 60s until srv's ControlPlane no longer knows
// the session: an append to it finds nothing (NotFound), so its row is
// gone, not only fenced for deletion (FailedPrecondition). The probe
// appends nothing to a session in either state. why says what deleted it
// (for the failure message).
func waitSessionGone(t *testing.T, srv *testserver.Server, sid, why string) {
	t.Helper()
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Errorf("dial the control plane: %v", err)
		return
	}
	defer func() { _ = conn.Close() }()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+srv.WorkerToken)
	cp := pb.NewControlPlaneClient(conn)
	probe := &pb.AppendEventsRequest{SessionId: sid,
		Events: []*pb.NewEvent{{Key: "deletion-probe", Type: "agent.message", Body: `{"content":[{"type":"text","text":"probe"}]}`}}}
	poll.Until(t, 60*time.Second, fmt.Sprintf("session %s to be deleted (%s): an append answering NotFound", sid, why), func() (bool, string) {
		_, err := cp.AppendEvents(ctx, probe)
		return status.Code(err) == codes.NotFound, fmt.Sprintf("append: %v", err)
	})
}

// heartbeat reports a worker to srv's ControlPlane as a running worker
// does (at the server's clock).
func heartbeat(t *testing.T, srv *testserver.Server, id, provider string, caps ...string) {
	t.Helper()
	conn, ctx := workerConn(t, srv)
	if _, err := pb.NewControlPlaneClient(conn).RecordWorkerHeartbeat(ctx, &pb.RecordWorkerHeartbeatRequest{WorkerId: id, Provider: provider,
		TaskQueues: []string{"q"}, Capabilities: caps, Version: "test"}); err != nil {
		t.Fatalf("heartbeat of worker %s: %v", id, err)
	}
}
