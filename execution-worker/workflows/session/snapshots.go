package session

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// snapStore is cpStore with context snapshots: an agentruntime.Store
// that also implements agentruntime.ContextStore, so the turn compacts.
type snapStore struct {
	*cpStore
	snaps pb.ContextSnapshotsClient
	// summaryModel is the model that writes summaries
	// (MANGO_COMPACTION_MODEL): it prices their usage. Empty: the turn's.
	summaryModel string
}

var _ agentruntime.ContextStore = (*snapStore)(nil)

// SaveContextSnapshot implements agentruntime.ContextStore.
func (s *snapStore) SaveContextSnapshot(ctx context.Context, snap *agentruntime.ContextSnapshot, events []agentruntime.NewEvent) (*agentruntime.ContextSnapshot, error) {
	body, err := json.Marshal(snap)
	if err != nil {
		return nil, fmt.Errorf("encode context snapshot: %w", err)
	}
	evs, err := s.pbEvents(events)
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		if e.GetUsage() != nil && s.summaryModel != "" {
			e.Usage.Model = s.summaryModel
		}
	}
	resp, err := s.snaps.SaveContextSnapshot(ctx, &pb.SaveContextSnapshotRequest{SessionId: s.sessionID, Events: evs,
		Snapshot: &pb.ContextSnapshot{Key: snap.Key, Covered: int32(snap.Covered), Body: string(body)}}) //nolint:gosec // a conversation's length
	if err != nil {
		return nil, fmt.Errorf("save context snapshot: %w", err)
	}
	return decodeSnapshot(resp.GetSnapshot())
}

// turnSnapshot is the session's context snapshot in force (nil: none), as
// the run's turn context holds it or, from a server that predates
// turn_context, as c loads it.
func turnSnapshot(ctx context.Context, c pb.ContextSnapshotsClient, run *pb.GetRunResponse) (*agentruntime.ContextSnapshot, error) {
	var snap *pb.ContextSnapshot
	if tc := run.GetTurnContext(); tc != nil {
		snap = tc.GetContextSnapshot()
	} else {
		resp, err := c.GetContextSnapshot(ctx, &pb.GetContextSnapshotRequest{SessionId: run.GetSessionId()})
		if err != nil {
			return nil, fmt.Errorf("load context snapshot of session %s: %w", run.GetSessionId(), err)
		}
		snap = resp.GetSnapshot()
	}
	if snap == nil {
		return nil, nil
	}
	return decodeSnapshot(snap)
}

func decodeSnapshot(p *pb.ContextSnapshot) (*agentruntime.ContextSnapshot, error) {
	var snap agentruntime.ContextSnapshot
	if err := json.Unmarshal([]byte(p.GetBody()), &snap); err != nil {
		return nil, fmt.Errorf("decode context snapshot %s: %w", p.GetKey(), err)
	}
	snap.Key, snap.Covered = p.GetKey(), int(p.GetCovered())
	return &snap, nil
}
