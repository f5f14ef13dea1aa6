package controlplane_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/mangohq/mango/api-server/internal/controlplane"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// startSnapshots is start with a ContextSnapshots client on the same
// server.
func startSnapshots(t *testing.T) (*env, pb.ContextSnapshotsClient) {
	t.Helper()
	e := &env{store: dbtest.Store(t), reg: prometheus.NewRegistry(), clock: newClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	conn := dial(t, controlplane.Deps{Store: e.store, Token: token, Registry: e.reg, Now: e.clock.now})
	e.client = pb.NewControlPlaneClient(conn)
	return e, pb.NewContextSnapshotsClient(conn)
}

// Snapshots are immutable and keyed: saving a key again returns the first
// snapshot and appends no event twice; the newest snapshot is in force.
func TestContextSnapshots(t *testing.T) {
	t.Parallel()
	e, snaps := startSnapshots(t)
	ctx := authed(context.Background())
	sid, _ := e.session(t, false)

	if _, err := snaps.GetContextSnapshot(context.Background(), &pb.GetContextSnapshotRequest{SessionId: sid}); err == nil {
		t.Error("GetContextSnapshot without the worker token: no error, want UNAUTHENTICATED")
	}
	got, err := snaps.GetContextSnapshot(ctx, &pb.GetContextSnapshotRequest{SessionId: sid})
	if err != nil || got.GetSnapshot() != nil {
		t.Fatalf("GetContextSnapshot of a new session: %v, %v; want no snapshot", got, err)
	}
	compacted := func(key string) []*pb.NewEvent {
		return []*pb.NewEvent{{Key: key + "/compacted", Type: "agent.thread_context_compacted"}}
	}
	first := &pb.ContextSnapshot{Key: "context/4", Covered: 4, Body: `{"messages":[1]}`}
	resp, err := snaps.SaveContextSnapshot(ctx, &pb.SaveContextSnapshotRequest{SessionId: sid, Snapshot: first, Events: compacted("context/4")})
	if err != nil || !resp.GetCreated() || !jsonEqual(resp.GetSnapshot().GetBody(), first.GetBody()) {
		t.Fatalf("first save: %v, %v; want it created", resp, err)
	}
	// A retry with another body (a different summary) keeps the first.
	again := &pb.ContextSnapshot{Key: "context/4", Covered: 4, Body: `{"messages":[2]}`}
	resp, err = snaps.SaveContextSnapshot(ctx, &pb.SaveContextSnapshotRequest{SessionId: sid, Snapshot: again, Events: compacted("context/4")})
	if err != nil || resp.GetCreated() || !jsonEqual(resp.GetSnapshot().GetBody(), first.GetBody()) {
		t.Fatalf("second save under the key: %v, %v; want the first snapshot, not created", resp, err)
	}
	if n := e.count(t, `SELECT count(*) FROM events WHERE session_id = $1 AND type = 'agent.thread_context_compacted'`, sid); n != 1 {
		t.Errorf("%d agent.thread_context_compacted events, want 1", n)
	}
	later := &pb.ContextSnapshot{Key: "context/9", Covered: 9, Body: `{"messages":[3]}`}
	if _, err := snaps.SaveContextSnapshot(ctx, &pb.SaveContextSnapshotRequest{SessionId: sid, Snapshot: later, Events: compacted("context/9")}); err != nil {
		t.Fatal(err)
	}
	got, err = snaps.GetContextSnapshot(ctx, &pb.GetContextSnapshotRequest{SessionId: sid})
	if err != nil || got.GetSnapshot().GetKey() != "context/9" || got.GetSnapshot().GetCovered() != 9 {
		t.Errorf("GetContextSnapshot: %v, %v; want context/9 covering 9", got, err)
	}

	for name, req := range map[string]*pb.SaveContextSnapshotRequest{
		"no session":   {Snapshot: first, Events: compacted("x")},
		"no snapshot":  {SessionId: sid, Events: compacted("x")},
		"no key":       {SessionId: sid, Snapshot: &pb.ContextSnapshot{Body: "{}"}, Events: compacted("x")},
		"bad body":     {SessionId: sid, Snapshot: &pb.ContextSnapshot{Key: "k", Body: "{"}, Events: compacted("x")},
		"negative":     {SessionId: sid, Snapshot: &pb.ContextSnapshot{Key: "k", Covered: -1, Body: "{}"}, Events: compacted("x")},
		"no events":    {SessionId: sid, Snapshot: &pb.ContextSnapshot{Key: "k", Body: "{}"}},
		"user event":   {SessionId: sid, Snapshot: &pb.ContextSnapshot{Key: "k", Body: "{}"}, Events: []*pb.NewEvent{{Key: "u", Type: "user.message"}}},
		"missing body": {SessionId: sid, Snapshot: &pb.ContextSnapshot{Key: "k"}, Events: compacted("x")},
	} {
		_, err := snaps.SaveContextSnapshot(ctx, req)
		wantCode(t, name, err, codes.InvalidArgument)
	}
	_, err = snaps.SaveContextSnapshot(ctx, &pb.SaveContextSnapshotRequest{SessionId: "sesn_missing", Snapshot: first, Events: compacted("x")})
	wantCode(t, "unknown session", err, codes.NotFound)
}

// GetRun with with_turn_context returns what GetContextSnapshot and
// ListSessionResources return, so a turn makes one call; without it, no
// turn context.
func TestGetRunTurnContext(t *testing.T) {
	t.Parallel()
	e := &env{store: dbtest.Store(t), reg: prometheus.NewRegistry(), clock: newClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	conn := dial(t, controlplane.Deps{Store: e.store, Token: token, Registry: e.reg, Now: e.clock.now})
	e.client = pb.NewControlPlaneClient(conn)
	snaps, resources := pb.NewContextSnapshotsClient(conn), pb.NewSessionResourcesClient(conn)
	ctx := authed(context.Background())
	sid, _ := e.session(t, false)

	turnContext := func() *pb.TurnContext {
		t.Helper()
		run, err := e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid, WithTurnContext: true})
		if err != nil {
			t.Fatal(err)
		}
		if run.GetTurnContext() == nil {
			t.Fatal("GetRun with_turn_context: no turn context")
		}
		return run.GetTurnContext()
	}
	if run, err := e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid}); err != nil || run.GetTurnContext() != nil {
		t.Fatalf("GetRun without with_turn_context: %v, %v; want no turn context", run.GetTurnContext(), err)
	}
	if tc := turnContext(); tc.GetContextSnapshot() != nil || len(tc.GetResources()) != 0 {
		t.Fatalf("turn context of a new session = %v; want no snapshot, no resources", tc)
	}

	snap := &pb.ContextSnapshot{Key: "context/4", Covered: 4, Body: `{"messages":[1]}`}
	if _, err := snaps.SaveContextSnapshot(ctx, &pb.SaveContextSnapshotRequest{SessionId: sid, Snapshot: snap,
		Events: []*pb.NewEvent{{Key: "context/4/compacted", Type: "agent.thread_context_compacted"}}}); err != nil {
		t.Fatal(err)
	}
	for _, rc := range []db.ResourceCreate{
		{ID: "sesrsc_repo", Type: db.ResourceRepository, MountPath: "/workspace/repo", URL: "https://example.com/o/r.git",
			Checkout: &db.Checkout{Type: "commit", SHA: "0123456789abcdef0123456789abcdef01234567"}, TokenSealed: []byte("sealed")},
		{ID: "sesrsc_other", Type: db.ResourceRepository, MountPath: "/workspace/other", URL: "https://example.com/o/other.git"},
	} {
		if _, err := e.store.ResourceAdd(context.Background(), sid, rc, e.clock.now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.ResourceMarkMaterialized(context.Background(), sid, "sesrsc_other", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.ResourceDelete(context.Background(), sid, "sesrsc_other", e.clock.now()); err != nil {
		t.Fatal(err)
	}

	tc := turnContext()
	if got := tc.GetContextSnapshot(); got.GetKey() != "context/4" || got.GetCovered() != 4 || !jsonEqual(got.GetBody(), snap.GetBody()) {
		t.Errorf("turn context snapshot = %v; want context/4 covering 4", got)
	}
	listed, err := resources.ListSessionResources(ctx, &pb.ListSessionResourcesRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed.GetResources()) != 2 {
		t.Fatalf("ListSessionResources = %v; want the repository and the deleted, materialized one", listed)
	}
	if !proto.Equal(&pb.TurnContext{Resources: listed.GetResources()}, &pb.TurnContext{Resources: tc.GetResources()}) {
		t.Errorf("turn context resources = %v; want what ListSessionResources lists: %v", tc.GetResources(), listed.GetResources())
	}
}
