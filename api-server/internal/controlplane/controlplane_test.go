package controlplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/api-server/internal/controlplane"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

const token = "test-worker-token"

type env struct {
	store  *db.Store
	client pb.ControlPlaneClient
	reg    *prometheus.Registry
	clock  *clock
}

// clock is a settable test clock.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock(t time.Time) *clock    { c := &clock{}; c.ns.Store(t.UnixNano()); return c }
func authed(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// start serves the ControlPlane with serverToken on 127.0.0.1 over a fresh
// database and returns a client stub.
func start(t *testing.T, serverToken string) *env {
	t.Helper()
	e := &env{store: dbtest.Store(t), reg: prometheus.NewRegistry(), clock: newClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	e.client = serve(t, controlplane.Deps{Store: e.store, Token: serverToken, Registry: e.reg, Now: e.clock.now})
	return e
}

// serve serves the ControlPlane built from d on 127.0.0.1 and returns a
// client stub.
func serve(t *testing.T, d controlplane.Deps) pb.ControlPlaneClient {
	t.Helper()
	return pb.NewControlPlaneClient(dial(t, d))
}

// dial serves the ControlPlane built from d on 127.0.0.1 and returns a
// connection to it (for the stubs of every service it serves).
func dial(t *testing.T, d controlplane.Deps) *grpc.ClientConn {
	t.Helper()
	srv, err := controlplane.NewGRPCServer(d)
	if err != nil {
		t.Fatalf("NewGRPCServer: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// session creates a session; with trigger, a pending user.message moves it
// to running, as the HTTP API does.
func (e *env) session(t *testing.T, trigger bool) (string, string) {
	t.Helper()
	ctx := context.Background()
	id := ids.New(ids.Session)
	_, _, err := e.store.SessionCreate(ctx, db.SessionCreateParams{
		ID: id, AgentID: ids.New(ids.Agent), AgentVersion: 1, Provider: "local", Now: e.clock.now(),
		Agent: json.RawMessage(`{"name":"a","model":{"id":"m"},"tools":[{"type":"custom","name":"lookup"}]}`),
	}, nil)
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	if !trigger {
		return id, ""
	}
	_, evs, err := e.store.Append(ctx, id, &db.AppendRequest{
		Events: []db.NewEvent{{ID: ids.New(ids.Event), Type: "user.message", Body: json.RawMessage(`{"content":[{"type":"text","text":"hi"}]}`), Pending: true}},
		Decide: func(*db.Session) (*db.Change, error) {
			return &db.Change{To: db.StatusRunning, Wake: true, EventID: ids.New(ids.Event)}, nil
		},
		Now: e.clock.now(),
	})
	if err != nil {
		t.Fatalf("append trigger: %v", err)
	}
	return id, evs[0].ID
}

func (e *env) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	return scalar[int](t, e, query, args...)
}

func (e *env) text(t *testing.T, query string, args ...any) string {
	t.Helper()
	return scalar[string](t, e, query, args...)
}

// scalar is the one value query returns.
func scalar[T any](t *testing.T, e *env, query string, args ...any) T {
	t.Helper()
	var v T
	if err := e.store.Pool().QueryRow(context.Background(), query, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return v
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

func TestTokenRequired(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := context.Background()
	cases := []struct {
		name string
		md   []string
		want codes.Code
	}{
		{"missing", nil, codes.Unauthenticated},
		{"wrong token", []string{"authorization", "Bearer nope"}, codes.Unauthenticated},
		{"wrong scheme", []string{"authorization", "Basic " + token}, codes.Unauthenticated},
		{"token without scheme", []string{"authorization", token}, codes.Unauthenticated},
		{"right token", []string{"authorization", "Bearer " + token}, codes.OK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cctx := ctx
			if tc.md != nil {
				cctx = metadata.AppendToOutgoingContext(ctx, tc.md...)
			}
			_, err := e.client.RecordWorkerHeartbeat(cctx, &pb.RecordWorkerHeartbeatRequest{WorkerId: "w1", Provider: "local"})
			wantCode(t, "RecordWorkerHeartbeat", err, tc.want)

			stream, err := e.client.StreamPreviews(cctx)
			if err != nil {
				t.Fatalf("open StreamPreviews: %v", err)
			}
			_ = stream.Send(&pb.StreamPreviewsRequest{Frames: []*pb.PreviewFrame{{EventId: "sevt_x", Kind: pb.PreviewFrameKind_PREVIEW_FRAME_KIND_START}}})
			resp, err := stream.CloseAndRecv()
			wantCode(t, "StreamPreviews", err, tc.want)
			if tc.want == codes.OK && resp.GetFramesReceived() != 1 {
				t.Errorf("StreamPreviews received %d frames, want 1", resp.GetFramesReceived())
			}
		})
	}
	// Refused calls are not executed: only the authenticated heartbeat
	// reached the database.
	if n := e.count(t, `SELECT count(*) FROM workers`); n != 1 {
		t.Errorf("workers rows = %d, want 1", n)
	}
	if got := metricValue(t, e.reg, "mango_controlplane_requests_total", map[string]string{"method": "RecordWorkerHeartbeat", "code": "Unauthenticated"}); got != 4 {
		t.Errorf("unauthenticated heartbeat requests metric = %v, want 4", got)
	}
}

// metricValue returns the value of the counter name with the given labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func TestUnsetTokenRefusesEverything(t *testing.T) {
	t.Parallel()
	e := start(t, "")
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer ")
	_, err := e.client.RecordWorkerHeartbeat(ctx, &pb.RecordWorkerHeartbeatRequest{WorkerId: "w1", Provider: "local"})
	wantCode(t, "RecordWorkerHeartbeat with empty server token", err, codes.Unauthenticated)
	_, err = e.client.RecordWorkerHeartbeat(authed(context.Background()), &pb.RecordWorkerHeartbeatRequest{WorkerId: "w1", Provider: "local"})
	wantCode(t, "RecordWorkerHeartbeat with empty server token", err, codes.Unauthenticated)
}

func newEvents(keys ...string) []*pb.NewEvent {
	out := make([]*pb.NewEvent, 0, len(keys))
	for _, k := range keys {
		out = append(out, &pb.NewEvent{Key: k, Type: "agent.message", Body: fmt.Sprintf(`{"content":[{"type":"text","text":%q}]}`, k)})
	}
	return out
}

func TestAppendEventsIdempotent(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	sid, _ := e.session(t, true) // seq 1 user.message, seq 2 status_running

	first, err := e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid, Events: newEvents("t1/a", "t1/b")})
	if err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
	second, err := e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid, Events: newEvents("t1/a", "t1/b")})
	if err != nil {
		t.Fatalf("AppendEvents again: %v", err)
	}
	if len(first.Events) != 2 || len(second.Events) != 2 {
		t.Fatalf("got %d and %d events, want 2 and 2", len(first.Events), len(second.Events))
	}
	for i := range first.Events {
		f, s := first.Events[i], second.Events[i]
		if f.Id != s.Id || f.Seq != s.Seq || f.Key != s.Key {
			t.Errorf("event %d: first (%s, %d, %s), retry (%s, %d, %s); want identical", i, f.Id, f.Seq, f.Key, s.Id, s.Seq, s.Key)
		}
		if f.Existed || !s.Existed {
			t.Errorf("event %d: existed first %v, retry %v; want false then true", i, f.Existed, s.Existed)
		}
		if !strings.HasPrefix(f.Id, ids.Event) || f.ProcessedAt == nil {
			t.Errorf("event %d: id %q processed_at %v, want sevt_ id and processed_at set", i, f.Id, f.ProcessedAt)
		}
	}
	if first.Events[0].Seq != 3 || first.Events[1].Seq != 4 {
		t.Errorf("seqs %d,%d, want 3,4", first.Events[0].Seq, first.Events[1].Seq)
	}
	if n := e.count(t, `SELECT count(*) FROM events WHERE session_id = $1`, sid); n != 4 {
		t.Errorf("events stored = %d, want 4 (2 initial + 2 appended once)", n)
	}

	// A retry mixing a stored key and a new one returns the stored event
	// in request order and appends only the new one.
	mixed, err := e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid, Events: newEvents("t1/c", "t1/b")})
	if err != nil {
		t.Fatalf("AppendEvents mixed: %v", err)
	}
	if got := mixed.Events; got[0].Key != "t1/c" || got[0].Seq != 5 || got[1].Id != first.Events[1].Id || got[1].Key != "t1/b" {
		t.Errorf("mixed = [%s %d %s] [%s %d %s], want [t1/c 5 new] [t1/b 4 %s]", got[0].Key, got[0].Seq, got[0].Id, got[1].Key, got[1].Seq, got[1].Id, first.Events[1].Id)
	}
	sess, err := e.store.SessionGet(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	if sess.LastSeq != 5 {
		t.Errorf("last_seq = %d, want 5", sess.LastSeq)
	}
	if got := metricValue(t, e.reg, "mango_events_appended_total", map[string]string{"source": "controlplane"}); got != 3 {
		t.Errorf("mango_events_appended_total{source=controlplane} = %v, want 3", got)
	}
}

func TestAppendEventsConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	sid, _ := e.session(t, true)
	const n = 8
	var wg sync.WaitGroup
	results := make([]*pb.AppendEventsResponse, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid, Events: newEvents("k1", "k2")})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		for j, ev := range results[i].Events {
			if ev.Id != results[0].Events[j].Id || ev.Seq != results[0].Events[j].Seq {
				t.Errorf("call %d event %d = (%s,%d), want (%s,%d)", i, j, ev.Id, ev.Seq, results[0].Events[j].Id, results[0].Events[j].Seq)
			}
		}
	}
	if c := e.count(t, `SELECT count(*) FROM events WHERE session_id = $1 AND event_key IS NOT NULL`, sid); c != 2 {
		t.Errorf("keyed events stored = %d, want 2", c)
	}
	if c := e.count(t, `SELECT last_seq FROM sessions WHERE id = $1`, sid); c != 4 {
		t.Errorf("last_seq = %d, want 4 (gapless)", c)
	}
}

func TestAppendEventsRefusals(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	sid, _ := e.session(t, false)
	deleting, _ := e.session(t, false)
	if _, _, err := e.store.SessionFence(context.Background(), deleting, e.clock.now()); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		sid       string
		events    []*pb.NewEvent
		want      codes.Code
		wantField string
	}{
		{"no session id", "", newEvents("a"), codes.InvalidArgument, "session_id"},
		{"no events", sid, nil, codes.InvalidArgument, "events"},
		{"no key", sid, []*pb.NewEvent{{Type: "agent.message"}}, codes.InvalidArgument, "events[0].key"},
		{"duplicate key", sid, newEvents("a", "a"), codes.InvalidArgument, "events[1].key"},
		{"no type", sid, []*pb.NewEvent{{Key: "a"}}, codes.InvalidArgument, "events[0].type"},
		{"user event", sid, []*pb.NewEvent{{Key: "a", Type: "user.message"}}, codes.InvalidArgument, "events[0].type"},
		{"status event", sid, []*pb.NewEvent{{Key: "a", Type: "session.status_idle"}}, codes.InvalidArgument, "events[0].type"},
		{"body not json", sid, []*pb.NewEvent{{Key: "a", Type: "agent.message", Body: "{"}}, codes.InvalidArgument, "events[0].body"},
		{"body an array", sid, []*pb.NewEvent{{Key: "a", Type: "agent.message", Body: "[]"}}, codes.InvalidArgument, "events[0].body"},
		{"unknown session", ids.New(ids.Session), newEvents("a"), codes.NotFound, ""},
		{"deleting session", deleting, newEvents("a"), codes.FailedPrecondition, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: tc.sid, Events: tc.events})
			wantCode(t, "AppendEvents", err, tc.want)
			if tc.wantField != "" && !strings.HasPrefix(status.Convert(err).Message(), tc.wantField+":") {
				t.Errorf("message %q does not name %s", status.Convert(err).Message(), tc.wantField)
			}
		})
	}
	if c := e.count(t, `SELECT count(*) FROM events`); c != 0 {
		t.Errorf("events stored after refusals = %d, want 0", c)
	}
}

func TestParkTurn(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	sid, _ := e.session(t, true)
	req := &pb.ParkTurnRequest{
		SessionId: sid,
		Events: []*pb.NewEvent{
			{Key: "t1/msg", Type: "agent.message", Body: `{"content":[]}`},
			{Key: "t1/tool", Type: "agent.custom_tool_use", Body: `{"name":"lookup","input":{}}`},
		},
		RequiredActionEventKeys: []string{"t1/tool"},
	}
	resp, err := e.client.ParkTurn(ctx, req)
	if err != nil {
		t.Fatalf("ParkTurn: %v", err)
	}
	toolID := resp.Events[1].Id
	wantReason := fmt.Sprintf(`{"event_ids":[%q],"type":"requires_action"}`, toolID)
	if resp.Status != pb.SessionStatus_SESSION_STATUS_IDLE || !jsonEqual(resp.StopReason, wantReason) {
		t.Errorf("ParkTurn -> %v %s, want IDLE %s", resp.Status, resp.StopReason, wantReason)
	}
	sess, err := e.store.SessionGet(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Status != db.StatusIdle || !jsonEqual(string(sess.StopReason), wantReason) {
		t.Errorf("stored session %s %s, want idle %s", sess.Status, sess.StopReason, wantReason)
	}
	var body string
	if err := e.store.Pool().QueryRow(context.Background(),
		`SELECT body::text FROM events WHERE session_id = $1 AND type = 'session.status_idle'`, sid).Scan(&body); err != nil {
		t.Fatalf("session.status_idle event: %v", err)
	}
	if !jsonEqual(body, `{"stop_reason":`+wantReason+`}`) {
		t.Errorf("status_idle body %s, want stop_reason %s", body, wantReason)
	}
	// The parked events, the turn's session.usage snapshot and the status
	// event follow each other directly (atomic commit).
	if c := e.count(t, `SELECT seq FROM events WHERE session_id = $1 AND type = 'session.usage'`, sid); c != 5 {
		t.Errorf("session.usage seq = %d, want 5", c)
	}
	if c := e.count(t, `SELECT seq FROM events WHERE session_id = $1 AND type = 'session.status_idle'`, sid); c != 6 {
		t.Errorf("status_idle seq = %d, want 6", c)
	}

	retry, err := e.client.ParkTurn(ctx, req)
	if err != nil {
		t.Fatalf("ParkTurn retry: %v", err)
	}
	if retry.Events[1].Id != toolID || retry.Status != pb.SessionStatus_SESSION_STATUS_IDLE {
		t.Errorf("retry -> %s %v, want %s IDLE", retry.Events[1].Id, retry.Status, toolID)
	}
	if c := e.count(t, `SELECT count(*) FROM events WHERE session_id = $1`, sid); c != 6 {
		t.Errorf("events after retry = %d, want 6", c)
	}

	_, err = e.client.ParkTurn(ctx, &pb.ParkTurnRequest{SessionId: sid, RequiredActionEventKeys: []string{"nope"}})
	wantCode(t, "ParkTurn with unknown key", err, codes.InvalidArgument)
	_, err = e.client.ParkTurn(ctx, &pb.ParkTurnRequest{SessionId: sid, Events: newEvents("x")})
	wantCode(t, "ParkTurn without required action", err, codes.InvalidArgument)
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func TestCompleteTurn(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	sid, _ := e.session(t, true)
	statusEvents := func() int {
		return e.count(t, `SELECT count(*) FROM events WHERE session_id = $1 AND type LIKE 'session.status_%'`, sid)
	}

	resched := &pb.CompleteTurnRequest{SessionId: sid, Outcome: pb.TurnOutcome_TURN_OUTCOME_RESCHEDULING,
		Events: []*pb.NewEvent{{Key: "t1/err", Type: "session.error", Body: `{"error":{"type":"overloaded","retry_status":"retrying"}}`}}}
	resp, err := e.client.CompleteTurn(ctx, resched)
	if err != nil {
		t.Fatalf("CompleteTurn rescheduling: %v", err)
	}
	if resp.Status != pb.SessionStatus_SESSION_STATUS_RESCHEDULING || len(resp.Events) != 1 || resp.Events[0].Type != "session.error" {
		t.Errorf("rescheduling -> %v %v, want RESCHEDULING with the session.error event", resp.Status, resp.Events)
	}
	before := statusEvents()
	if _, err := e.client.CompleteTurn(ctx, resched); err != nil {
		t.Fatalf("CompleteTurn rescheduling retry: %v", err)
	}
	if got := statusEvents(); got != before {
		t.Errorf("retry added status events: %d -> %d", before, got)
	}

	end := &pb.CompleteTurnRequest{SessionId: sid, Outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN}
	resp, err = e.client.CompleteTurn(ctx, end)
	if err != nil {
		t.Fatalf("CompleteTurn end_turn: %v", err)
	}
	if resp.Status != pb.SessionStatus_SESSION_STATUS_IDLE || !jsonEqual(resp.StopReason, `{"type":"end_turn"}`) {
		t.Errorf("end_turn -> %v %s, want IDLE end_turn", resp.Status, resp.StopReason)
	}
	before = statusEvents()
	if _, err := e.client.CompleteTurn(ctx, end); err != nil {
		t.Fatalf("CompleteTurn end_turn retry: %v", err)
	}
	if got := statusEvents(); got != before {
		t.Errorf("end_turn retry added status events: %d -> %d", before, got)
	}

	resp, err = e.client.CompleteTurn(ctx, &pb.CompleteTurnRequest{SessionId: sid, Outcome: pb.TurnOutcome_TURN_OUTCOME_TERMINATED})
	if err != nil || resp.Status != pb.SessionStatus_SESSION_STATUS_TERMINATED {
		t.Fatalf("CompleteTurn terminated -> %v, %v; want TERMINATED", resp.GetStatus(), err)
	}
	_, err = e.client.CompleteTurn(ctx, &pb.CompleteTurnRequest{SessionId: sid, Outcome: pb.TurnOutcome_TURN_OUTCOME_RETRIES_EXHAUSTED})
	wantCode(t, "CompleteTurn after terminated", err, codes.FailedPrecondition)
	_, err = e.client.CompleteTurn(ctx, &pb.CompleteTurnRequest{SessionId: sid})
	wantCode(t, "CompleteTurn without outcome", err, codes.InvalidArgument)

	// retries_exhausted on a fresh running session, consuming its trigger
	// in the same call.
	sid2, trigger := e.session(t, true)
	resp, err = e.client.CompleteTurn(ctx, &pb.CompleteTurnRequest{SessionId: sid2, Outcome: pb.TurnOutcome_TURN_OUTCOME_RETRIES_EXHAUSTED,
		ProcessedEventIds: []string{trigger}})
	if err != nil || !jsonEqual(resp.GetStopReason(), `{"type":"retries_exhausted"}`) {
		t.Errorf("retries_exhausted -> %s, %v", resp.GetStopReason(), err)
	}
	run, err := e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid2})
	if err != nil || len(run.PendingTriggers) != 0 {
		t.Errorf("pending triggers after CompleteTurn with processed_event_ids = %v, %v; want none", run.GetPendingTriggers(), err)
	}
}

// TestCompleteTurnWithLastResponse: a turn's last response (transcript
// message and events) commits with its end in one call: the events, the
// usage snapshot and the idle status in that order, the transcript entry
// stored; a retry of the call changes nothing; GetRun announces the field.
func TestCompleteTurnWithLastResponse(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	sid, trigger := e.session(t, true)
	run, err := e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid})
	if err != nil || !run.GetCompleteTurnTranscript() {
		t.Fatalf("GetRun -> complete_turn_transcript %v, %v; want true", run.GetCompleteTurnTranscript(), err)
	}
	req := &pb.CompleteTurnRequest{SessionId: sid, Outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN, TurnKey: trigger,
		ProcessedEventIds: []string{trigger},
		Events: []*pb.NewEvent{
			{Key: trigger + "/1/message", Type: "agent.message", Body: `{"content":[{"type":"text","text":"done"}]}`},
			{Key: trigger + "/1/span_end", Type: "span.model_request_end", Body: `{"is_error":false}`},
		},
		Transcript: []*pb.TranscriptEntry{{Key: trigger + "/1", Body: `{"role":"assistant","content":[{"type":"text","text":"done"}]}`}}}
	resp, err := e.client.CompleteTurn(ctx, req)
	if err != nil {
		t.Fatalf("CompleteTurn with the last response: %v", err)
	}
	if resp.Status != pb.SessionStatus_SESSION_STATUS_IDLE || len(resp.Events) != 2 {
		t.Errorf("-> %v with %d events, want IDLE with the 2 events", resp.Status, len(resp.Events))
	}
	order := func() string {
		return e.text(t, `SELECT string_agg(type, ' ' ORDER BY seq) FROM events WHERE session_id = $1 AND type NOT IN ('user.message', 'session.status_running')`, sid)
	}
	want := "agent.message span.model_request_end session.usage session.status_idle"
	if got := order(); got != want {
		t.Errorf("log %q, want %q", got, want)
	}
	if _, err := e.client.CompleteTurn(ctx, req); err != nil {
		t.Fatalf("CompleteTurn retry: %v", err)
	}
	if got := order(); got != want {
		t.Errorf("log after a retry %q, want %q (unchanged)", got, want)
	}
	run, err = e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Transcript) != 1 || run.Transcript[0].Key != trigger+"/1" || len(run.PendingTriggers) != 0 {
		t.Errorf("after: transcript %v, pending %v; want the one entry and no pending trigger", run.Transcript, run.PendingTriggers)
	}
	_, err = e.client.CompleteTurn(ctx, &pb.CompleteTurnRequest{SessionId: sid, Outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN,
		Transcript: []*pb.TranscriptEntry{{Key: "x", Body: "{"}}})
	wantCode(t, "CompleteTurn with an invalid transcript entry", err, codes.InvalidArgument)
}

func TestGetRunAndTriggers(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	sid, trigger := e.session(t, true)

	run, err := e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid})
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	if run.Provider != "local" || run.Status != pb.SessionStatus_SESSION_STATUS_RUNNING || run.EnvironmentConfig != "" ||
		!jsonEqual(run.Tools, `[{"type":"custom","name":"lookup"}]`) || run.McpServers != "[]" || !strings.Contains(run.Agent, `"lookup"`) {
		t.Errorf("GetRun = provider %q status %v env %q tools %s mcp %s agent %s", run.Provider, run.Status, run.EnvironmentConfig, run.Tools, run.McpServers, run.Agent)
	}
	// In the log since it was sent to the idle session: processed_at is
	// that time; taking it (marking) does not move it.
	if len(run.PendingTriggers) != 1 || run.PendingTriggers[0].Id != trigger || run.PendingTriggers[0].Type != "user.message" || run.PendingTriggers[0].ProcessedAt == nil {
		t.Fatalf("pending triggers = %v, want the user.message %s, processed when it entered the log", run.PendingTriggers, trigger)
	}
	sent := run.PendingTriggers[0].ProcessedAt.AsTime()

	e.clock.add(time.Second)
	marked, err := e.client.MarkTriggersProcessed(ctx, &pb.MarkTriggersProcessedRequest{SessionId: sid, EventIds: []string{trigger}})
	if err != nil {
		t.Fatalf("MarkTriggersProcessed: %v", err)
	}
	if len(marked.Events) != 1 || marked.Events[0].ProcessedAt == nil || !marked.Events[0].ProcessedAt.AsTime().Equal(sent) {
		t.Fatalf("marked = %v, want processed at %v", marked.Events, sent)
	}
	first := marked.Events[0].ProcessedAt.AsTime()
	e.clock.add(time.Second)
	again, err := e.client.MarkTriggersProcessed(ctx, &pb.MarkTriggersProcessedRequest{SessionId: sid, EventIds: []string{trigger}})
	if err != nil {
		t.Fatalf("MarkTriggersProcessed again: %v", err)
	}
	if got := again.Events[0].ProcessedAt.AsTime(); !got.Equal(first) {
		t.Errorf("second mark moved processed_at %v -> %v", first, got)
	}
	run, err = e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid})
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	if len(run.PendingTriggers) != 0 {
		t.Errorf("pending triggers after mark = %v, want none", run.PendingTriggers)
	}

	_, err = e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: ids.New(ids.Session)})
	wantCode(t, "GetRun unknown session", err, codes.NotFound)
}

func TestTranscriptAndToolJournal(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	sid, _ := e.session(t, false)

	tr, err := e.client.AppendTranscript(ctx, &pb.AppendTranscriptRequest{SessionId: sid, Entries: []*pb.TranscriptEntry{
		{Key: "m1", Body: `{"role":"user"}`}, {Key: "m2", Body: `{"role":"assistant"}`},
	}})
	if err != nil || tr.Inserted != 2 {
		t.Fatalf("AppendTranscript -> %v, %v; want 2 inserted", tr, err)
	}
	tr, err = e.client.AppendTranscript(ctx, &pb.AppendTranscriptRequest{SessionId: sid, Entries: []*pb.TranscriptEntry{
		{Key: "m2", Body: `{"role":"changed"}`}, {Key: "m3", Body: `{"role":"user","n":3}`},
	}})
	if err != nil || tr.Inserted != 1 {
		t.Fatalf("AppendTranscript retry -> %v, %v; want 1 inserted", tr, err)
	}
	// Transcript entries committed with events: together, keys already
	// stored skipped; a refused append stores neither.
	if _, err := e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid,
		Events:     []*pb.NewEvent{{Key: "m4/span_start", Type: "span.model_request_start", Body: "{}"}},
		Transcript: []*pb.TranscriptEntry{{Key: "m3", Body: `{"role":"again"}`}, {Key: "m4", Body: `{"role":"assistant","n":4}`}},
	}); err != nil {
		t.Fatalf("AppendEvents with transcript: %v", err)
	}
	_, err = e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid,
		Events:     []*pb.NewEvent{{Key: "bad", Type: "user.message", Body: "{}"}},
		Transcript: []*pb.TranscriptEntry{{Key: "m5", Body: `{}`}},
	})
	wantCode(t, "AppendEvents with a refused event", err, codes.InvalidArgument)
	_, err = e.client.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sid,
		Events:     []*pb.NewEvent{{Key: "m6/span_start", Type: "span.model_request_start", Body: "{}"}},
		Transcript: []*pb.TranscriptEntry{{Key: "m6", Body: `{`}},
	})
	wantCode(t, "AppendEvents with an invalid transcript entry", err, codes.InvalidArgument)
	run, err := e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range run.Transcript {
		got = append(got, en.Key+"="+en.Body)
	}
	if want := `m1={"role":"user"} m2={"role":"assistant"} m3={"role":"user","n":3} m4={"role":"assistant","n":4}`; strings.Join(got, " ") != want {
		t.Errorf("transcript = %s, want %s", strings.Join(got, " "), want)
	}
	// The entries after the second's position: the third and fourth.
	if run.TranscriptAfterSeq != 0 || len(run.Transcript) != 4 || run.Transcript[1].Seq <= run.Transcript[0].Seq {
		t.Fatalf("whole transcript: after %d, %d entries at %v; want after 0, 4 at increasing positions", run.TranscriptAfterSeq, len(run.Transcript), run.Transcript)
	}
	tail, err := e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid, TranscriptAfterSeq: run.Transcript[1].Seq})
	if err != nil {
		t.Fatal(err)
	}
	if tail.TranscriptAfterSeq != run.Transcript[1].Seq || len(tail.Transcript) != 2 || tail.Transcript[0].Key != "m3" || tail.Transcript[1].Seq != run.Transcript[3].Seq {
		t.Errorf("transcript after %d = after %d, %v; want m3 and m4", run.Transcript[1].Seq, tail.TranscriptAfterSeq, tail.Transcript)
	}
	_, err = e.client.AppendTranscript(ctx, &pb.AppendTranscriptRequest{SessionId: ids.New(ids.Session), Entries: []*pb.TranscriptEntry{{Key: "a", Body: "{}"}}})
	wantCode(t, "AppendTranscript unknown session", err, codes.NotFound)
	_, err = e.client.AppendTranscript(ctx, &pb.AppendTranscriptRequest{SessionId: sid, Entries: []*pb.TranscriptEntry{{Key: "a", Body: "{"}}})
	wantCode(t, "AppendTranscript invalid JSON", err, codes.InvalidArgument)

	j1, err := e.client.RecordToolJournal(ctx, &pb.RecordToolJournalRequest{SessionId: sid, ToolUseId: "toolu_1", Body: `{"exit":0}`})
	if err != nil || !j1.Created || j1.Entry.Body != `{"exit":0}` {
		t.Fatalf("RecordToolJournal -> %v, %v", j1, err)
	}
	j2, err := e.client.RecordToolJournal(ctx, &pb.RecordToolJournalRequest{SessionId: sid, ToolUseId: "toolu_1", Body: `{"exit":1}`})
	if err != nil || j2.Created || j2.Entry.Body != `{"exit":0}` {
		t.Fatalf("RecordToolJournal second write -> %v, %v; want the first entry, not created", j2, err)
	}
	g, err := e.client.GetToolJournal(ctx, &pb.GetToolJournalRequest{SessionId: sid, ToolUseId: "toolu_1"})
	if err != nil || g.Entry.GetBody() != `{"exit":0}` {
		t.Errorf("GetToolJournal -> %v, %v", g, err)
	}
	g, err = e.client.GetToolJournal(ctx, &pb.GetToolJournalRequest{SessionId: sid, ToolUseId: "toolu_2"})
	if err != nil || g.Entry != nil {
		t.Errorf("GetToolJournal unknown -> %v, %v; want no entry", g, err)
	}
}

func TestSandboxBindings(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	sid, _ := e.session(t, false)

	intent, err := e.client.PutProvisioningIntent(ctx, &pb.PutProvisioningIntentRequest{SessionId: sid, Provider: "docker", SpecHash: "h1", TaskQueue: "mango.docker"})
	if err != nil || intent.Binding.ExternalId != "" || intent.Binding.SpecHash != "h1" {
		t.Fatalf("PutProvisioningIntent -> %v, %v", intent, err)
	}
	list, err := e.client.ListBindings(ctx, &pb.ListBindingsRequest{Provider: "docker", OnlyIntents: true})
	if err != nil || len(list.Bindings) != 1 || list.Bindings[0].SessionId != sid {
		t.Fatalf("ListBindings intents -> %v, %v; want the intent", list, err)
	}
	bound, err := e.client.PutBinding(ctx, &pb.PutBindingRequest{SessionId: sid, Provider: "docker", ExternalId: "c1", SpecHash: "h1", TaskQueue: "mango.docker.w1"})
	if err != nil || bound.Binding.ExternalId != "c1" || bound.Binding.TaskQueue != "mango.docker.w1" {
		t.Fatalf("PutBinding -> %v, %v", bound, err)
	}
	if c := e.count(t, `SELECT count(*) FROM sandbox_bindings WHERE session_id = $1`, sid); c != 1 {
		t.Errorf("rows for session = %d, want 1 (intent replaced)", c)
	}
	list, err = e.client.ListBindings(ctx, &pb.ListBindingsRequest{OnlyIntents: true})
	if err != nil || len(list.Bindings) != 0 {
		t.Errorf("ListBindings intents after binding -> %v, %v; want none", list, err)
	}
	again, err := e.client.PutProvisioningIntent(ctx, &pb.PutProvisioningIntentRequest{SessionId: sid, Provider: "docker", SpecHash: "h2", TaskQueue: "mango.docker"})
	if err != nil || again.Binding.ExternalId != "c1" || again.Binding.SpecHash != "h1" {
		t.Errorf("PutProvisioningIntent over a binding -> %v, %v; want the binding unchanged", again, err)
	}
	if _, err := e.client.PutBinding(ctx, &pb.PutBindingRequest{SessionId: sid, Provider: "docker", ExternalId: "c1", SpecHash: "h1", TaskQueue: "mango.docker.w1"}); err != nil {
		t.Errorf("PutBinding same external id: %v", err)
	}
	_, err = e.client.PutBinding(ctx, &pb.PutBindingRequest{SessionId: sid, Provider: "docker", ExternalId: "c2", SpecHash: "h1", TaskQueue: "mango.docker.w1"})
	wantCode(t, "PutBinding different external id", err, codes.AlreadyExists)
	got, err := e.client.GetBinding(ctx, &pb.GetBindingRequest{SessionId: sid})
	if err != nil || got.Binding.GetExternalId() != "c1" {
		t.Errorf("GetBinding -> %v, %v; want c1", got, err)
	}
	for i, want := range []bool{true, false} {
		d, err := e.client.DeleteBinding(ctx, &pb.DeleteBindingRequest{SessionId: sid})
		if err != nil || d.Deleted != want {
			t.Errorf("DeleteBinding #%d -> %v, %v; want deleted=%v", i+1, d, err, want)
		}
	}
	got, err = e.client.GetBinding(ctx, &pb.GetBindingRequest{SessionId: sid})
	if err != nil || got.Binding != nil {
		t.Errorf("GetBinding after delete -> %v, %v; want none", got, err)
	}

	_, err = e.client.PutProvisioningIntent(ctx, &pb.PutProvisioningIntentRequest{SessionId: ids.New(ids.Session), Provider: "docker", SpecHash: "h", TaskQueue: "q"})
	wantCode(t, "PutProvisioningIntent unknown session", err, codes.NotFound)
	if _, _, err := e.store.SessionFence(context.Background(), sid, e.clock.now()); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.PutProvisioningIntent(ctx, &pb.PutProvisioningIntentRequest{SessionId: sid, Provider: "docker", SpecHash: "h", TaskQueue: "q"})
	wantCode(t, "PutProvisioningIntent deleting session", err, codes.FailedPrecondition)
	// A binding is still recorded while the session is being deleted, so
	// that teardown can find the resource.
	if _, err := e.client.PutBinding(ctx, &pb.PutBindingRequest{SessionId: sid, Provider: "docker", ExternalId: "c3", SpecHash: "h", TaskQueue: "q"}); err != nil {
		t.Errorf("PutBinding deleting session: %v", err)
	}
	_, err = e.client.PutBinding(ctx, &pb.PutBindingRequest{SessionId: sid, Provider: "docker", SpecHash: "h", TaskQueue: "q"})
	wantCode(t, "PutBinding without external_id", err, codes.InvalidArgument)
}

func TestWorkerHeartbeat(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	first := e.clock.now()
	req := &pb.RecordWorkerHeartbeatRequest{WorkerId: "w1", Provider: "docker", TaskQueues: []string{"mango.docker", "mango.docker.w1"}, Version: "v1"}
	resp, err := e.client.RecordWorkerHeartbeat(ctx, req)
	if err != nil || !resp.ServerTime.AsTime().Equal(first) {
		t.Fatalf("RecordWorkerHeartbeat -> %v, %v", resp, err)
	}
	e.clock.add(5 * time.Second)
	req.Version, req.Capabilities = "v2", []string{"limited_networking"}
	if _, err := e.client.RecordWorkerHeartbeat(ctx, req); err != nil {
		t.Fatal(err)
	}
	w, err := e.store.WorkerGet(context.Background(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	if !w.FirstSeenAt.Equal(first) || !w.LastSeenAt.Equal(e.clock.now()) || w.Version != "v2" ||
		strings.Join(w.TaskQueues, ",") != "mango.docker,mango.docker.w1" || strings.Join(w.Capabilities, ",") != "limited_networking" {
		t.Errorf("worker = %+v, want first seen %v, last seen %v, version v2", w, first, e.clock.now())
	}
	if c := e.count(t, `SELECT count(*) FROM workers`); c != 1 {
		t.Errorf("workers rows = %d, want 1", c)
	}
	_, err = e.client.RecordWorkerHeartbeat(ctx, &pb.RecordWorkerHeartbeatRequest{Provider: "docker"})
	wantCode(t, "heartbeat without worker_id", err, codes.InvalidArgument)
}

// TestGetInstallation: the ControlPlane answers the installation id of its
// database, the same on every call and on every replica of that database,
// and only to an authenticated worker.
func TestGetInstallation(t *testing.T) {
	t.Parallel()
	e := start(t, token)
	ctx := authed(context.Background())
	want := e.text(t, `SELECT id FROM installation`)
	resp, err := e.client.GetInstallation(ctx, &pb.GetInstallationRequest{})
	if err != nil || resp.GetInstallationId() != want {
		t.Fatalf("GetInstallation = %v, %v; want %q", resp, err, want)
	}
	replica := serve(t, controlplane.Deps{Store: e.store, Token: token})
	if again, err := replica.GetInstallation(ctx, &pb.GetInstallationRequest{}); err != nil || again.GetInstallationId() != want {
		t.Errorf("GetInstallation on another replica = %v, %v; want %q", again, err, want)
	}
	other := start(t, token)
	if o, err := other.client.GetInstallation(ctx, &pb.GetInstallationRequest{}); err != nil || o.GetInstallationId() == want {
		t.Errorf("GetInstallation of another database = %v, %v; want an id other than %q", o, err, want)
	}
	_, err = e.client.GetInstallation(context.Background(), &pb.GetInstallationRequest{})
	wantCode(t, "GetInstallation without the token", err, codes.Unauthenticated)
}
