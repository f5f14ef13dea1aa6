package session

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/grpc"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// snapClient stores snapshots in memory, first write of a key wins.
type snapClient struct {
	saved []*pb.SaveContextSnapshotRequest
	byKey map[string]*pb.ContextSnapshot
	last  *pb.ContextSnapshot
	gets  int
}

func (c *snapClient) GetContextSnapshot(context.Context, *pb.GetContextSnapshotRequest, ...grpc.CallOption) (*pb.GetContextSnapshotResponse, error) {
	c.gets++
	return &pb.GetContextSnapshotResponse{Snapshot: c.last}, nil
}

func (c *snapClient) SaveContextSnapshot(_ context.Context, req *pb.SaveContextSnapshotRequest, _ ...grpc.CallOption) (*pb.SaveContextSnapshotResponse, error) {
	c.saved = append(c.saved, req)
	if old, ok := c.byKey[req.GetSnapshot().GetKey()]; ok {
		return &pb.SaveContextSnapshotResponse{Snapshot: old}, nil
	}
	c.byKey[req.GetSnapshot().GetKey()] = req.GetSnapshot()
	c.last = req.GetSnapshot()
	return &pb.SaveContextSnapshotResponse{Snapshot: req.GetSnapshot(), Created: true}, nil
}

// The snapshot travels as JSON and comes back equal; the first write of a
// key wins; the summary's usage is priced with the compaction model.
func TestSnapStore(t *testing.T) {
	t.Parallel()
	c := &snapClient{byKey: map[string]*pb.ContextSnapshot{}}
	s := &snapStore{cpStore: &cpStore{sessionID: "sesn_1", model: "claude-sonnet-4-5"}, snaps: c, summaryModel: "claude-haiku-4-5"}
	snap := &agentruntime.ContextSnapshot{Key: "context/7", Covered: 7, Messages: []model.Message{
		{Role: "user", Content: []model.Block{{Type: "text", Text: "<context_summary>\nsummary\n</context_summary>"}}},
		{Role: "assistant", Content: []model.Block{{Type: "text", Text: "Understood."}}},
	}}
	events := []agentruntime.NewEvent{
		{Key: "context/7/span_end", Type: "span.model_request_end", Body: map[string]any{}, Usage: &model.Usage{InputTokens: 10, OutputTokens: 2}},
		{Key: "context/7/compacted", Type: "agent.thread_context_compacted", Body: struct{}{}},
	}
	got, err := s.SaveContextSnapshot(t.Context(), snap, events)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, snap) {
		t.Errorf("stored snapshot %+v, want %+v", got, snap)
	}
	req := c.saved[0]
	if u := req.GetEvents()[0].GetUsage(); u.GetModel() != "claude-haiku-4-5" || u.GetInputTokens() != 10 {
		t.Errorf("summary usage %v, want 10 input tokens priced as claude-haiku-4-5", u)
	}
	if req.GetEvents()[1].GetUsage() != nil || req.GetSnapshot().GetCovered() != 7 {
		t.Errorf("request %v: want no usage on the compacted event, covered 7", req)
	}
	other := &agentruntime.ContextSnapshot{Key: "context/7", Covered: 7, Messages: snap.Messages[:1]}
	if got, err := s.SaveContextSnapshot(t.Context(), other, events); err != nil || !reflect.DeepEqual(got, snap) {
		t.Errorf("second save under the key: %+v, %v; want the first snapshot", got, err)
	}
	// A server that predates turn_context: the snapshot is loaded.
	latest, err := turnSnapshot(t.Context(), c, &pb.GetRunResponse{SessionId: "sesn_1"})
	if err != nil || !reflect.DeepEqual(latest, snap) || c.gets != 1 {
		t.Errorf("turnSnapshot without a turn context = %+v, %v after %d loads; want %+v after 1", latest, err, c.gets, snap)
	}
	// The run's turn context holds it, or says there is none: no call.
	latest, err = turnSnapshot(t.Context(), c, &pb.GetRunResponse{SessionId: "sesn_1", TurnContext: &pb.TurnContext{ContextSnapshot: c.last}})
	if err != nil || !reflect.DeepEqual(latest, snap) || c.gets != 1 {
		t.Errorf("turnSnapshot from the turn context = %+v, %v after %d loads; want %+v after 1", latest, err, c.gets, snap)
	}
	if latest, err = turnSnapshot(t.Context(), c, &pb.GetRunResponse{TurnContext: &pb.TurnContext{}}); latest != nil || err != nil || c.gets != 1 {
		t.Errorf("turnSnapshot from a turn context without one = %+v, %v after %d loads; want nil after 1", latest, err, c.gets)
	}
}
