package controlplane

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// resourceServer serves the SessionResources service: what a session's
// sandbox must hold, and what it holds.
type resourceServer struct {
	pb.UnimplementedSessionResourcesServer
	s *Server
}

// ListSessionResources implements pb.SessionResourcesServer.
func (r *resourceServer) ListSessionResources(ctx context.Context, req *pb.ListSessionResourcesRequest) (*pb.ListSessionResourcesResponse, error) {
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	rs, err := r.s.store.ResourcesForWorker(ctx, req.GetSessionId())
	if err != nil {
		return nil, r.s.fail(ctx, "list session resources", err)
	}
	return &pb.ListSessionResourcesResponse{Resources: resourcesToPB(rs)}, nil
}

// resourcesToPB is a session's resources as a worker needs them.
func resourcesToPB(rs []*db.Resource) []*pb.SessionResource {
	out := make([]*pb.SessionResource, 0, len(rs))
	for _, res := range rs {
		p := &pb.SessionResource{Id: res.ID, Type: res.Type, MountPath: res.MountPath, FileId: res.FileID, Url: res.URL,
			HasToken: len(res.TokenSealed) > 0, Deleted: res.DeletedAt != nil, Version: res.Version, MaterializedVersion: res.MaterializedVersion}
		if c := res.Checkout; c != nil {
			p.CheckoutType = c.Type
			p.CheckoutRef = c.Name
			if c.Type == "commit" {
				p.CheckoutRef = c.SHA
			}
		}
		out = append(out, p)
	}
	return out
}

// GetResourceToken implements pb.SessionResourcesServer. The token is
// opened here, in memory, and never logged.
func (r *resourceServer) GetResourceToken(ctx context.Context, req *pb.GetResourceTokenRequest) (*pb.GetResourceTokenResponse, error) {
	if err := requireFields("session_id", req.GetSessionId(), "resource_id", req.GetResourceId()); err != nil {
		return nil, err
	}
	sealed, err := r.s.store.ResourceToken(ctx, req.GetSessionId(), req.GetResourceId())
	if errors.Is(err, db.ErrNotFound) {
		return nil, status.Error(codes.NotFound, "get resource token: resource not found")
	}
	if err != nil {
		return nil, r.s.fail(ctx, "get resource token", err)
	}
	if len(sealed) == 0 {
		return &pb.GetResourceTokenResponse{}, nil
	}
	token, err := r.s.secrets.Open(sealed, db.ResourceTokenPurpose(req.GetResourceId()))
	if err != nil {
		// The cause names at most a key id, never key material or the token.
		r.s.log.ErrorContext(ctx, "controlplane: cannot open a resource token", "resource_id", req.GetResourceId(), "err", err)
		return nil, status.Error(codes.FailedPrecondition, "get resource token: the token cannot be decrypted with the configured keys")
	}
	return &pb.GetResourceTokenResponse{AuthorizationToken: string(token)}, nil
}

// MarkResourceMaterialized implements pb.SessionResourcesServer.
func (r *resourceServer) MarkResourceMaterialized(ctx context.Context, req *pb.MarkResourceMaterializedRequest) (*pb.MarkResourceMaterializedResponse, error) {
	if err := requireFields("session_id", req.GetSessionId(), "resource_id", req.GetResourceId()); err != nil {
		return nil, err
	}
	if err := r.s.store.ResourceMarkMaterialized(ctx, req.GetSessionId(), req.GetResourceId(), req.GetVersion()); err != nil {
		return nil, r.s.fail(ctx, "mark resource materialized", err)
	}
	return &pb.MarkResourceMaterializedResponse{}, nil
}
