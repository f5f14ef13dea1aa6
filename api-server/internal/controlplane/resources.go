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
			HasToken: len(res.TokenSealed) > 0, Deleted: res.DeletedAt != nil, Version: res.Version, MaterializedVersion: res.MaterializedVersion,
			SkillId: res.SkillID, SkillVersionId: res.SkillVersionID, SkillName: res.SkillName, SkillDescription: res.SkillDescription,
			MemoryStoreId: res.MemoryStoreID, MemoryAccess: res.Access, MemoryInstructions: res.Instructions,
			MemoryStoreName: res.StoreName, MemoryStoreDescription: res.StoreDescription}
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

// ReadSkillVersion implements pb.SessionResourcesServer: the archive of a
// skill resource's version, as the Skills API's content download serves
// it.
func (r *resourceServer) ReadSkillVersion(req *pb.ReadSkillVersionRequest, stream pb.SessionResources_ReadSkillVersionServer) error {
	const op = "read skill version"
	ctx := stream.Context()
	if r.s.files == nil {
		return errNoFileStore
	}
	if err := requireFields("session_id", req.GetSessionId(), "resource_id", req.GetResourceId()); err != nil {
		return err
	}
	res, err := r.s.store.SkillResource(ctx, req.GetSessionId(), req.GetResourceId())
	if errors.Is(err, db.ErrNotFound) {
		return status.Errorf(codes.NotFound, "%s: session %s has no skill resource %s", op, req.GetSessionId(), req.GetResourceId())
	}
	if err != nil {
		return r.s.fail(ctx, op, err)
	}
	v, err := r.s.store.SkillVersionGet(ctx, res.SkillID, res.SkillVersionID)
	if errors.Is(err, db.ErrNotFound) {
		return status.Errorf(codes.NotFound, "%s: version %s of skill %s was deleted", op, res.SkillVersionID, res.SkillID)
	}
	if err != nil {
		return r.s.fail(ctx, op, err)
	}
	rc, err := r.s.files.Open(ctx, v.StorageKey, 0)
	if err != nil {
		return r.s.storeFail(ctx, op, "skill version", v.ID, err)
	}
	defer func() { _ = rc.Close() }()
	return r.s.streamBlob(ctx, op, "skill version", v.ID, rc, v.SizeBytes, func(data []byte, first bool) error {
		msg := &pb.ReadSkillVersionResponse{Data: data}
		if first {
			msg.SizeBytes = v.SizeBytes
		}
		return stream.Send(msg)
	})
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
