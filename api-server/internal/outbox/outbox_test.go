package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mangohq/mango/api-server/internal/outbox"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/temporaltest"
	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

func TestConverterRoundTrip(t *testing.T) {
	t.Parallel()
	dc := converter.GetDefaultDataConverter()
	tests := []struct {
		in  proto.Message
		out proto.Message
	}{
		{&sessionv1.SessionWorkflowInput{SessionId: "sesn_1", Provider: "local"}, &sessionv1.SessionWorkflowInput{}},
		{&sessionv1.WakeupSignal{Kind: sessionv1.WakeupKind_WAKEUP_KIND_INTERRUPT, SessionId: "sesn_1", OutboxId: 42,
			EnqueuedAt: timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC))}, &sessionv1.WakeupSignal{}},
	}
	for _, tt := range tests {
		p, err := dc.ToPayload(tt.in)
		if err != nil {
			t.Fatalf("ToPayload(%T): %v", tt.in, err)
		}
		if enc := string(p.Metadata[converter.MetadataEncoding]); enc != converter.MetadataEncodingProtoJSON {
			t.Errorf("%T encoded as %q, want %q", tt.in, enc, converter.MetadataEncodingProtoJSON)
		}
		if err := dc.FromPayload(p, tt.out); err != nil {
			t.Fatalf("FromPayload(%T): %v", tt.out, err)
		}
		if !proto.Equal(tt.in, tt.out) {
			t.Errorf("round trip of %T = %v, want %v", tt.in, tt.out, tt.in)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	base, maxDelay := 100*time.Millisecond, 2*time.Second
	tests := []struct {
		attempts int
		want     time.Duration // before jitter
	}{
		{0, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, 1600 * time.Millisecond},
		{6, 2 * time.Second},
		{1000, 2 * time.Second},
	}
	for _, tt := range tests {
		for range 50 {
			got := outbox.Backoff(tt.attempts, base, maxDelay)
			if got < tt.want/2 || got > tt.want {
				t.Fatalf("Backoff(%d) = %v, want within [%v, %v]", tt.attempts, got, tt.want/2, tt.want)
			}
		}
	}
}

func TestStartOptions(t *testing.T) {
	t.Parallel()
	o := outbox.StartOptions(sessionwf.Queues{}, "sesn_x", "docker")
	if o.ID != "sesn_x" || o.TaskQueue != "mango.docker" ||
		o.WorkflowIDReusePolicy != enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE ||
		o.WorkflowIDConflictPolicy != enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING {
		t.Errorf("StartOptions() = %+v; want id sesn_x on mango.docker, ALLOW_DUPLICATE, USE_EXISTING", o)
	}
}

// TestDeliveryAfterTemporalOutage is the acceptance test: with
// Temporal stopped a user.message is admitted and listed, the direct
// delivery fails and leaves the outbox row; once Temporal is up the relay
// starts the workflow on the session's task queue with the signal, and the
// outbox drains.
func TestDeliveryAfterTemporalOutage(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	dev := temporaltest.Reserve(t)
	hostPort := dev.HostPort

	tc, err := client.NewLazyClient(client.Options{HostPort: hostPort, Logger: temporaltest.Quiet{}})
	if err != nil {
		t.Fatalf("lazy Temporal client: %v", err)
	}
	t.Cleanup(tc.Close)
	reg := prometheus.NewRegistry()
	opts := fastOptions(reg)
	opts.Cooldown = time.Minute
	relay := outbox.New(store, tc, opts)

	ctx := context.Background()
	id := newSessionID(t)
	createSession(t, store, id)
	eventID := admitUserMessage(t, store, id)

	// The API lists the event although Temporal is down.
	events, _, err := store.EventList(ctx, id, db.EventListParams{Limit: 10})
	if err != nil || len(events) != 2 || events[0].ID != eventID || events[1].Type != "session.status_running" {
		t.Fatalf("EventList() = %+v, %v; want the user.message then session.status_running", events, err)
	}

	rows := checkDirectDeliveryDown(t, ctx, store, relay, reg, id)
	runRelay(t, ctx, relay)
	// The relay tries too, fails against the stopped server and keeps the
	// row.
	waitFor(t, 30*time.Second, "a relay delivery to fail against the stopped server", func() bool {
		return testutil.ToFloat64(deliveries(t, reg, "error", "relay")) >= 1
	})
	if rows := outboxRows(t, store); len(rows) != 1 {
		t.Fatalf("outbox while Temporal is down = %+v; want the row kept", rows)
	}

	dev.Start(t)
	up := time.Now()

	waitFor(t, 60*time.Second, "the outbox to drain", func() bool { return len(outboxRows(t, store)) == 0 })
	t.Logf("outbox drained %v after Temporal came up", time.Since(up))

	checkRelayStartedWorkflow(t, ctx, temporaltest.Dial(t, hostPort), id, rows[0].id)
	if got := testutil.ToFloat64(deliveries(t, reg, "ok", "relay")); got != 1 {
		t.Errorf("relay ok deliveries = %v, want 1", got)
	}
	waitFor(t, 5*time.Second, "the depth gauge to read 0", func() bool {
		return gauge(t, reg, "mango_outbox_depth") == 0 && gauge(t, reg, "mango_outbox_oldest_age_seconds") == 0
	})
}

// checkDirectDeliveryDown: with Temporal down, the direct delivery of
// session id fails and leaves the row, with the attempt counted; within
// the cooldown a second one leaves the row alone. It returns the outbox
// rows after the first.
func checkDirectDeliveryDown(t *testing.T, ctx context.Context, store *db.Store, relay *outbox.Relay, reg *prometheus.Registry, id string) []outboxRow {
	t.Helper()
	start := time.Now()
	relay.Deliver(ctx, id)
	t.Logf("direct delivery with Temporal down returned after %v", time.Since(start))
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Deliver with Temporal down took %v, want at most about DirectTimeout", d)
	}
	rows := outboxRows(t, store)
	if len(rows) != 1 || rows[0].attempts < 1 || rows[0].lastError == "" {
		t.Fatalf("outbox after a failed direct delivery = %+v; want one row with attempts > 0 and an error", rows)
	}
	if got := testutil.ToFloat64(deliveries(t, reg, "error", "direct")); got != 1 {
		t.Errorf("direct error deliveries = %v, want 1", got)
	}
	// Within the cooldown the direct path leaves the rows to the relay
	// instead of making another request wait for Temporal.
	relay.Deliver(ctx, id)
	if again := outboxRows(t, store); len(again) != 1 || again[0].attempts != rows[0].attempts {
		t.Fatalf("outbox after a Deliver within the cooldown = %+v; want %+v untouched", again, rows)
	}
	return rows
}

// runRelay runs relay until the test ends, then checks that it returns
// nil soon after cancellation.
func runRelay(t *testing.T, ctx context.Context, relay *outbox.Relay) {
	t.Helper()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run() = %v, want nil after cancellation", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancellation")
		}
	})
}

// checkRelayStartedWorkflow: the workflow of session id runs on
// mango.local with the session's input, signalled once with a WAKEUP for
// outbox row outboxID.
func checkRelayStartedWorkflow(t *testing.T, ctx context.Context, admin client.Client, id string, outboxID int64) {
	t.Helper()
	desc, err := admin.DescribeWorkflow(ctx, sessionwf.WorkflowID(id), "")
	if err != nil {
		t.Fatalf("DescribeWorkflow(%s): %v", id, err)
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	if got := info.GetTaskQueue(); got != "mango.local" {
		t.Errorf("workflow task queue = %q, want mango.local", got)
	}
	if got := info.GetType().GetName(); got != sessionwf.WorkflowType {
		t.Errorf("workflow type = %q, want %q", got, sessionwf.WorkflowType)
	}
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("workflow status = %v, want running", info.GetStatus())
	}
	input, signals := readHistory(t, admin, id)
	if input.GetSessionId() != id || input.GetProvider() != "local" {
		t.Errorf("workflow input = %v, want session %s on local", input, id)
	}
	if len(signals) != 1 {
		t.Fatalf("wakeup signals in history = %d, want 1", len(signals))
	}
	if s := signals[0]; s.GetSessionId() != id || s.GetKind() != sessionv1.WakeupKind_WAKEUP_KIND_WAKEUP || s.GetOutboxId() != outboxID {
		t.Errorf("signal = %v, want a WAKEUP for session %s, outbox row %d", s, id, outboxID)
	}
}

// TestDirectDelivery checks the path taken when Temporal is up: the
// workflow is started and signalled before Deliver returns, a second
// wake-up signals the running workflow, and the outbox is empty.
func TestDirectDelivery(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	hostPort := temporaltest.HostPort(t)
	tc := temporaltest.Dial(t, hostPort)
	reg := prometheus.NewRegistry()
	relay := outbox.New(store, tc, fastOptions(reg))
	ctx := context.Background()
	id := newSessionID(t)
	createSession(t, store, id)
	admitUserMessage(t, store, id)
	relay.Deliver(ctx, id)
	wake(t, store, id, "interrupt")
	relay.Deliver(ctx, id)
	if rows := outboxRows(t, store); len(rows) != 0 {
		t.Fatalf("outbox after direct deliveries = %+v, want empty", rows)
	}
	_, signals := readHistory(t, tc, id)
	if len(signals) != 2 || signals[0].GetKind() != sessionv1.WakeupKind_WAKEUP_KIND_WAKEUP ||
		signals[1].GetKind() != sessionv1.WakeupKind_WAKEUP_KIND_INTERRUPT {
		t.Errorf("signals = %v, want WAKEUP then INTERRUPT in one workflow run", signals)
	}
	if got := testutil.ToFloat64(deliveries(t, reg, "ok", "direct")); got != 2 {
		t.Errorf("direct ok deliveries = %v, want 2", got)
	}
}

// TestPollLeavesFreshRowsToTheDirectPath: the relay's poll does not claim
// a row the direct delivery after its commit is about to send (it used to,
// and under load then signalled such rows one after another, seconds
// late); after an overflow of the direct queue (Kick) it claims it at once.
func TestPollLeavesFreshRowsToTheDirectPath(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	tc := temporaltest.Dial(t, temporaltest.HostPort(t))
	reg := prometheus.NewRegistry()
	opts := fastOptions(reg)
	opts.DirectGrace = time.Hour
	relay := outbox.New(store, tc, opts)
	id := newSessionID(t)
	createSession(t, store, id)
	wake(t, store, id, "wakeup") // committed, not delivered directly

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = relay.Run(ctx); close(done) }()
	defer func() { stop(); <-done }()
	// A pass refreshes the depth gauge after its claim: the row was seen.
	waitFor(t, 5*time.Second, "a poll pass that leaves the row", func() bool { return gauge(t, reg, "mango_outbox_depth") == 1 })
	if rows := outboxRows(t, store); len(rows) != 1 || rows[0].attempts != 0 {
		t.Fatalf("outbox after a poll = %+v; want the fresh row untouched", rows)
	}
	if got := testutil.ToFloat64(deliveries(t, reg, "ok", "relay")); got != 0 {
		t.Fatalf("relay deliveries = %v; want 0 while the row is fresh", got)
	}
	relay.Kick()
	// The row goes with the delivery's commit; the counter moves just after.
	waitFor(t, 10*time.Second, "the kicked relay to deliver the row", func() bool {
		return len(outboxRows(t, store)) == 0 && testutil.ToFloat64(deliveries(t, reg, "ok", "relay")) >= 1
	})
	if got := testutil.ToFloat64(deliveries(t, reg, "ok", "relay")); got != 1 {
		t.Errorf("relay deliveries = %v; want 1", got)
	}
}

// TestRelaysDoNotDoubleDeliver runs two relays (two replicas) on one
// database: every row is signalled exactly once.
func TestRelaysDoNotDoubleDeliver(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	hostPort := temporaltest.HostPort(t)
	tc := temporaltest.Dial(t, hostPort)
	const sessions, perSession = 6, 5
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = newSessionID(t)
		createSession(t, store, ids[i])
		for range perSession {
			wake(t, store, ids[i], "wakeup")
		}
	}
	want := map[int64]bool{}
	for _, r := range outboxRows(t, store) {
		want[r.id] = true
	}
	if len(want) != sessions*perSession {
		t.Fatalf("outbox holds %d rows, want %d", len(want), sessions*perSession)
	}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		opts := fastOptions(nil)
		opts.BatchSize = 4 // several claims per relay, interleaved
		relay := outbox.New(store, tc, opts)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = relay.Run(ctx)
		}()
	}
	waitFor(t, 30*time.Second, "the outbox to drain", func() bool { return len(outboxRows(t, store)) == 0 })
	stop()
	wg.Wait()

	got := map[int64]int{}
	for _, id := range ids {
		_, signals := readHistory(t, tc, id)
		for _, s := range signals {
			got[s.GetOutboxId()]++
		}
	}
	for oid := range want {
		if got[oid] != 1 {
			t.Errorf("outbox row %d signalled %d times, want once", oid, got[oid])
		}
	}
	if len(got) != len(want) {
		t.Errorf("signalled %d distinct rows, want %d", len(got), len(want))
	}
}

// TestRelayDropsRowsOfDeletedSessions checks that a row whose session no
// longer exists is removed without starting a workflow.
func TestRelayDropsRowsOfDeletedSessions(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	id := newSessionID(t)
	if _, err := store.Pool().Exec(ctx, `INSERT INTO outbox (session_id, kind) VALUES ($1, 'wakeup')`, id); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	relay := outbox.New(store, failingStarter{}, fastOptions(reg))
	relay.Deliver(ctx, id)
	if rows := outboxRows(t, store); len(rows) != 0 {
		t.Errorf("outbox = %+v, want the orphan row dropped", rows)
	}
	if got := testutil.ToFloat64(deliveries(t, reg, "dropped", "direct")); got != 1 {
		t.Errorf("dropped deliveries = %v, want 1", got)
	}
}

type failingStarter struct{}

func (failingStarter) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, errors.New("must not be called")
}

func (failingStarter) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, errors.New("must not be called")
}

// --- helpers ---

func fastOptions(reg prometheus.Registerer) outbox.Options {
	return outbox.Options{
		PollInterval:  20 * time.Millisecond,
		Lease:         10 * time.Second,
		SignalTimeout: time.Second,
		DirectTimeout: time.Second,
		DirectGrace:   time.Millisecond,
		BackoffBase:   50 * time.Millisecond,
		BackoffMax:    300 * time.Millisecond,
		Cooldown:      100 * time.Millisecond,
		StatsInterval: 20 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer:    reg,
	}
}

func newSessionID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return "sesn_test" + hex.EncodeToString(b)
}

func createSession(t *testing.T, store *db.Store, id string) {
	t.Helper()
	_, _, err := store.SessionCreate(context.Background(), db.SessionCreateParams{
		ID: id, AgentID: "agent_test", AgentVersion: 1, Agent: json.RawMessage(`{"name":"test","model":"fake"}`),
		Provider: "local", Metadata: map[string]string{}, Now: time.Now().UTC(),
	}, nil)
	if err != nil {
		t.Fatalf("create session %s: %v", id, err)
	}
}

// admitUserMessage appends a user.message as the API does, moving the
// session to running with a wake-up, and returns the event's id.
func admitUserMessage(t *testing.T, store *db.Store, id string) string {
	t.Helper()
	eventID := "sevt_" + id
	_, _, err := store.Append(context.Background(), id, &db.AppendRequest{
		Events: []db.NewEvent{{ID: eventID, Type: "user.message", Pending: true,
			Body: json.RawMessage(`{"content":[{"type":"text","text":"hi"}]}`)}},
		Decide: func(*db.Session) (*db.Change, error) {
			return &db.Change{To: db.StatusRunning, Wake: true, EventID: "sevt_running_" + id}, nil
		},
		Now: time.Now().UTC(),
	})
	if err != nil {
		t.Fatalf("append user.message to %s: %v", id, err)
	}
	return eventID
}

// wake writes one outbox row of the given kind through Append.
func wake(t *testing.T, store *db.Store, id, kind string) {
	t.Helper()
	wakeIn(t, context.Background(), store, id, kind)
}

// wakeIn is wake with the writing request's context ctx.
func wakeIn(t *testing.T, ctx context.Context, store *db.Store, id, kind string) {
	t.Helper()
	_, _, err := store.Append(ctx, id, &db.AppendRequest{
		Decide: func(*db.Session) (*db.Change, error) { return &db.Change{Wake: true, WakeKind: kind}, nil },
		Now:    time.Now().UTC(),
	})
	if err != nil {
		t.Fatalf("wake %s: %v", id, err)
	}
}

type outboxRow struct {
	id        int64
	attempts  int
	lastError string
}

func outboxRows(t *testing.T, store *db.Store) []outboxRow {
	t.Helper()
	rows, err := store.Pool().Query(context.Background(), `SELECT id, attempts, coalesce(last_error, '') FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		if err := rows.Scan(&r.id, &r.attempts, &r.lastError); err != nil {
			t.Fatalf("read outbox: %v", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	return out
}

// readHistory returns the workflow's input and its wakeup signals, in
// order, decoded with the default data converter.
func readHistory(t *testing.T, c client.Client, id string) (*sessionv1.SessionWorkflowInput, []*sessionv1.WakeupSignal) {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	it := c.GetWorkflowHistory(context.Background(), sessionwf.WorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var input *sessionv1.SessionWorkflowInput
	var signals []*sessionv1.WakeupSignal
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("read history of %s: %v", id, err)
		}
		switch a := ev.GetAttributes().(type) {
		case *historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes:
			input = &sessionv1.SessionWorkflowInput{}
			if err := dc.FromPayloads(a.WorkflowExecutionStartedEventAttributes.GetInput(), &input); err != nil {
				t.Fatalf("decode workflow input: %v", err)
			}
		case *historypb.HistoryEvent_WorkflowExecutionSignaledEventAttributes:
			attrs := a.WorkflowExecutionSignaledEventAttributes
			if attrs.GetSignalName() != sessionwf.SignalWakeup {
				t.Errorf("signal name = %q, want %q", attrs.GetSignalName(), sessionwf.SignalWakeup)
				continue
			}
			s := &sessionv1.WakeupSignal{}
			if err := dc.FromPayloads(attrs.GetInput(), &s); err != nil {
				t.Fatalf("decode wakeup signal: %v", err)
			}
			signals = append(signals, s)
		}
	}
	return input, signals
}

func deliveries(t *testing.T, reg *prometheus.Registry, result, path string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mango_outbox_deliveries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["result"] == result && labels["path"] == path {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no mango_outbox_deliveries_total{result=%q,path=%q}", result, path)
	return nil
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, timeout, what, func() (bool, string) { return cond(), "not yet" })
}

// slowStarter delays every signal until released, counting calls.
type slowStarter struct {
	release chan struct{}
	calls   atomic.Int32
	next    outbox.Starter
}

func (s *slowStarter) SignalWithStartWorkflow(ctx context.Context, id, signal string, arg any, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	s.calls.Add(1)
	<-s.release
	return s.next.SignalWithStartWorkflow(ctx, id, signal, arg, opts, wf, args...)
}

func (s *slowStarter) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	return s.next.ExecuteWorkflow(ctx, opts, wf, args...)
}

// TestWakeIsAsynchronous: with Run going, Wake returns without waiting
// for Temporal, and every row is still delivered, once.
func TestWakeIsAsynchronous(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	tc := temporaltest.Dial(t, temporaltest.HostPort(t))
	slow := &slowStarter{release: make(chan struct{}), next: tc}
	var once sync.Once
	release := func() { once.Do(func() { close(slow.release) }) }
	defer release()
	opts := fastOptions(nil)
	opts.PollInterval = time.Hour // only the direct path
	relay := outbox.New(store, slow, opts)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = relay.Run(ctx); close(done) }()
	defer func() { release(); stop(); <-done }()
	// Before Run is up, Wake delivers synchronously (and would block).
	waitFor(t, 5*time.Second, "Run to start", relay.Running)

	id := newSessionID(t)
	createSession(t, store, id)
	admitUserMessage(t, store, id)
	wakeAll := func() {
		returned := make(chan struct{})
		go func() {
			for range 5 {
				relay.Wake(ctx, id)
			}
			close(returned)
		}()
		select {
		case <-returned:
		case <-time.After(2 * time.Second):
			t.Fatal("Wake blocked while Temporal was not answering")
		}
	}
	wakeAll()
	waitFor(t, 5*time.Second, "the direct delivery to start", func() bool { return slow.calls.Load() == 1 })
	wake(t, store, id, "wakeup") // a second row while the first delivery waits
	wakeAll()
	release()
	waitFor(t, 10*time.Second, "the outbox to drain", func() bool { return len(outboxRows(t, store)) == 0 })
	if n := slow.calls.Load(); n != 2 {
		t.Errorf("signals sent = %d, want 2 (each row once)", n)
	}
}
