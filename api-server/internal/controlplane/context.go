package controlplane

import (
	"context"
	"encoding/json"
	"math"

	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// snapshotServer serves the ContextSnapshots service: the compacted,
// model-facing projections workers store beside the transcript.
type snapshotServer struct {
	pb.UnimplementedContextSnapshotsServer
	s *Server
}

// GetContextSnapshot implements pb.ContextSnapshotsServer.
func (c *snapshotServer) GetContextSnapshot(ctx context.Context, req *pb.GetContextSnapshotRequest) (*pb.GetContextSnapshotResponse, error) {
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	snap, err := c.s.store.ContextSnapshotLatest(ctx, req.GetSessionId())
	if err != nil {
		return nil, c.s.fail(ctx, "get context snapshot", err)
	}
	resp := &pb.GetContextSnapshotResponse{}
	if snap != nil {
		resp.Snapshot = snapshotToPB(snap)
	}
	return resp, nil
}

// SaveContextSnapshot implements pb.ContextSnapshotsServer.
func (c *snapshotServer) SaveContextSnapshot(ctx context.Context, req *pb.SaveContextSnapshotRequest) (*pb.SaveContextSnapshotResponse, error) {
	const op = "save context snapshot"
	sid := req.GetSessionId()
	if err := requireSession(sid); err != nil {
		return nil, err
	}
	in := req.GetSnapshot()
	switch {
	case in == nil:
		return nil, invalid("snapshot", "required")
	case in.GetKey() == "":
		return nil, invalid("snapshot.key", "required")
	case in.GetCovered() < 0:
		return nil, invalid("snapshot.covered", "must not be negative")
	case !json.Valid([]byte(in.GetBody())):
		return nil, invalid("snapshot.body", "not valid JSON")
	case len(req.GetEvents()) == 0:
		return nil, invalid("events", "at least one is required")
	}
	evs, err := c.s.newEvents(sid, req.GetEvents())
	if err != nil {
		return nil, err
	}
	stored, created, _, _, err := c.s.store.ContextSnapshotSave(ctx, sid,
		db.ContextSnapshot{Key: in.GetKey(), Covered: int(in.GetCovered()), Body: json.RawMessage(in.GetBody())},
		&db.AppendRequest{Events: evs, Now: c.s.now()})
	if err != nil {
		return nil, c.s.fail(ctx, op, err)
	}
	return &pb.SaveContextSnapshotResponse{Snapshot: snapshotToPB(stored), Created: created}, nil
}

func snapshotToPB(s *db.ContextSnapshot) *pb.ContextSnapshot {
	covered := int32(min(s.Covered, math.MaxInt32)) //nolint:gosec // bounded above
	return &pb.ContextSnapshot{Key: s.Key, Covered: covered, Body: string(s.Body)}
}
