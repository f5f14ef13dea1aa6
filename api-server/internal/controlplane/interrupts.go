package controlplane

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/api-server/internal/interrupts"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// InterruptSource hands out subscriptions to the interrupts committed on
// any replica (implemented by *interrupts.Hub).
type InterruptSource interface {
	Subscribe() *interrupts.Subscription
}

// WatchInterrupts implements pb.ControlPlaneServer. It subscribes before
// sending the response headers, so a worker that has read them receives
// every interrupt committed from then on (as far as the stream's buffer
// allows), and forwards them until the worker goes away or the api-server
// drains.
func (s *Server) WatchInterrupts(req *pb.WatchInterruptsRequest, stream pb.ControlPlane_WatchInterruptsServer) error {
	if req.GetWorkerId() == "" {
		return status.Error(codes.InvalidArgument, "watch interrupts: worker_id is required")
	}
	if s.interrupts == nil {
		return status.Error(codes.Unavailable, "watch interrupts: this api-server does not push interrupts")
	}
	sub := s.interrupts.Subscribe()
	defer sub.Close()
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-s.drain:
			return status.Error(codes.Unavailable, "watch interrupts: api-server is shutting down, reconnect")
		case in := <-sub.C():
			if err := stream.Send(&pb.WatchInterruptsResponse{SessionId: in.SessionID, EventId: in.EventID, Seq: in.Seq,
				OutboxId: in.OutboxID}); err != nil {
				return err
			}
		}
	}
}
