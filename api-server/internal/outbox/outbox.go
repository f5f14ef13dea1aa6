// Package outbox delivers the wake-ups the api-server owes Session
// Workflows. Admitting a runnable event writes an outbox row in the
// admitting transaction (db.Store.Append); after the commit the HTTP handler
// calls Relay.Wake, which hands the session to a few direct-delivery
// goroutines (coalescing wakes of one session) so the request does not
// wait for Temporal; they call Relay.Deliver, which signals the session's
// workflow at once (SignalWithStartWorkflow, starting it when none runs). Whatever that
// direct call misses — Temporal down, a crash between commit and signal —
// Relay.Run delivers later: it claims due rows in batches, signals, and
// deletes each row only after Temporal accepted its signal, rescheduling
// failures with capped exponential backoff and jitter. Rows are claimed
// under a lease taken with FOR UPDATE SKIP LOCKED (see db.Store), so any
// number of api-server replicas can run the relay side by side.
//
// Delivery is at least once: a replica that dies after Temporal accepted a
// signal but before deleting the row leaves it to be delivered again. The
// signal is a hint the workflow deduplicates by outbox id and answers by
// re-reading the session's pending work, so duplicates are harmless.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/internal/traceparent"
	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// Starter is the part of the Temporal client the relay uses.
type Starter interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, signalArg any,
		options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
}

// Options tune a Relay. Zero values take the defaults in brackets.
type Options struct {
	// PollInterval is how often Run looks for due rows [1s].
	PollInterval time.Duration
	// BatchSize is how many rows one claim takes [100].
	BatchSize int
	// Lease is how long a claimed row stays invisible to other claimers;
	// it must exceed SignalTimeout [30s].
	Lease time.Duration
	// SignalTimeout bounds one SignalWithStartWorkflow call of the relay
	// [5s].
	SignalTimeout time.Duration
	// DirectTimeout bounds all of Deliver, so a request never waits longer
	// for Temporal [2s].
	DirectTimeout time.Duration
	// DirectGrace is how long the poll leaves a row that was never
	// attempted to the direct delivery after its commit [3s]. Without it
	// the poll took fresh rows from under the direct path and signalled
	// them one after another: under load (64 busy sessions) a fifth of
	// the wake-ups went that way and waited seconds behind each other.
	// After an overflow of the direct path's queue the poll claims fresh
	// rows at once.
	DirectGrace time.Duration
	// BackoffBase is the delay after the first failed delivery; each
	// further failure doubles it [1s].
	BackoffBase time.Duration
	// BackoffMax caps the delay between attempts [30s].
	BackoffMax time.Duration
	// Cooldown is how long Deliver leaves rows to the relay after a
	// delivery found Temporal unreachable, so requests do not each wait
	// DirectTimeout while it is down [5s].
	Cooldown time.Duration
	// StatsInterval is how often Run refreshes the depth and age gauges
	// [5s].
	StatsInterval time.Duration
	// Logger receives delivery failures [slog.Default()].
	Logger *slog.Logger
	// Registerer, when set, receives the relay's metrics.
	Registerer prometheus.Registerer
	// HostGoneAfter is passed to new Session Workflows: how long a turn
	// waits on its sandbox's locality queue with no live worker there
	// before it fails explicitly [0: the workflow's default, 2m].
	HostGoneAfter time.Duration
	// Queues names the task queues workflows are started on.
	Queues sessionwf.Queues
	// Tracer makes the span of each row's delivery ("outbox.deliver
	// <kind>"), a child of the span of the request that wrote the row
	// [a no-op tracer].
	Tracer trace.Tracer
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.PollInterval, time.Second)
	def(&o.Lease, 30*time.Second)
	def(&o.SignalTimeout, 5*time.Second)
	def(&o.DirectTimeout, 2*time.Second)
	def(&o.DirectGrace, 3*time.Second)
	def(&o.BackoffBase, time.Second)
	def(&o.BackoffMax, 30*time.Second)
	def(&o.Cooldown, 5*time.Second)
	def(&o.StatsInterval, 5*time.Second)
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("")
	}
}

// Delivery paths, the "path" label of mango_outbox_deliveries_total.
const (
	pathDirect = "direct"
	pathRelay  = "relay"
)

// Relay delivers outbox rows to Temporal. Its methods are safe for
// concurrent use.
type Relay struct {
	store    *db.Store
	temporal Starter
	opts     Options
	log      *slog.Logger
	kick     chan struct{}

	// Direct deliveries waiting for a goroutine of Run: each session at
	// most once (a wake of a queued session is already covered, since
	// Deliver claims every due row of the session).
	wakeMu  sync.Mutex
	queued  map[string]bool
	wakes   chan string
	running atomic.Bool

	// downUntil is the UnixNano time until which Deliver skips Temporal,
	// set when a delivery finds it unreachable and cleared by a success.
	downUntil atomic.Int64

	depth      prometheus.Gauge
	oldestAge  prometheus.Gauge
	deliveries *prometheus.CounterVec
}

// New returns a relay over store that signals through temporal.
func New(store *db.Store, temporal Starter, opts Options) *Relay {
	opts.defaults()
	r := &Relay{
		store: store, temporal: temporal, opts: opts, log: opts.Logger.With("component", "outbox"),
		kick: make(chan struct{}, 1), queued: map[string]bool{}, wakes: make(chan string, wakeQueue),
		depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mango_outbox_depth",
			Help: "Outbox rows not yet delivered to Temporal.",
		}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mango_outbox_oldest_age_seconds",
			Help: "Age of the oldest undelivered outbox row (0 when empty).",
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mango_outbox_deliveries_total",
			Help: "Outbox deliveries by result (ok, error, dropped: the session no longer exists) and path (direct after the commit, relay).",
		}, []string{"result", "path"}),
	}
	for _, res := range []string{"ok", "error", "dropped"} {
		for _, p := range []string{pathDirect, pathRelay} {
			r.deliveries.WithLabelValues(res, p)
		}
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(r.depth, r.oldestAge, r.deliveries)
	}
	return r
}

// Direct delivery: goroutines and queue bound.
const (
	directWorkers = 16
	wakeQueue     = 4096
)

// Wake schedules the direct delivery of a session's due rows without
// waiting for it. Without Run (tests), it delivers synchronously. A full
// queue leaves the rows to the relay's poll. With tracing on, each row's
// delivery (the workflow's signal, and so the turn it wakes) joins the
// trace of the request that wrote the row, whichever path delivers it: a
// user.message request's trace runs through its turn.
func (r *Relay) Wake(ctx context.Context, sessionID string) {
	if !r.running.Load() {
		r.Deliver(ctx, sessionID)
		return
	}
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	if r.queued[sessionID] {
		return
	}
	select {
	case r.wakes <- sessionID:
		r.queued[sessionID] = true
	default:
		r.Kick()
	}
}

// direct delivers woken sessions until ctx ends.
func (r *Relay) direct(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case sessionID := <-r.wakes:
			// Unmark first: a wake arriving during the delivery queues the
			// session again, so rows committed after the claim go too.
			r.wakeMu.Lock()
			delete(r.queued, sessionID)
			r.wakeMu.Unlock()
			r.Deliver(ctx, sessionID)
		}
	}
}

// Kick makes Run claim due rows now instead of at its next poll, fresh
// ones included: the direct path's queue overflowed.
func (r *Relay) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run delivers due rows until ctx is cancelled, then returns nil once the
// batch in flight is settled. Rows it cannot settle stay leased and become
// due again when the lease ends.
func (r *Relay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range directWorkers {
		wg.Go(func() { r.direct(ctx) })
	}
	r.running.Store(true)
	defer func() {
		r.running.Store(false)
		wg.Wait()
	}()
	poll := time.NewTimer(0)
	defer poll.Stop()
	var statsAt time.Time
	for {
		fresh := r.opts.DirectGrace
		select {
		case <-ctx.Done():
			return nil
		case <-poll.C:
		case <-r.kick:
			fresh = 0 // the direct path's queue overflowed
		}
		for ctx.Err() == nil {
			n, err := r.relayBatch(ctx, fresh)
			if err != nil {
				if ctx.Err() == nil {
					r.log.WarnContext(ctx, "outbox relay pass failed", "err", err)
				}
				break
			}
			if n < r.opts.BatchSize {
				break
			}
		}
		if time.Since(statsAt) >= r.opts.StatsInterval && ctx.Err() == nil {
			statsAt = time.Now()
			r.refreshStats(ctx)
		}
		poll.Reset(r.opts.PollInterval)
	}
}

// Deliver signals the workflow of a session for its due rows right away:
// the direct path, called after the commit that wrote them. It returns
// within DirectTimeout whatever happens, leaving anything undelivered to
// the relay, and ignores the cancellation of ctx (a client that hangs up
// after its event was committed still gets it delivered).
func (r *Relay) Deliver(ctx context.Context, sessionID string) {
	if time.Now().UnixNano() < r.downUntil.Load() {
		// Temporal was unreachable moments ago: do not make the request
		// wait for it again. The rows are due; the relay polls them.
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.DirectTimeout)
	defer cancel()
	rows, err := r.store.OutboxClaimForSession(ctx, sessionID, r.opts.Lease)
	if err != nil {
		r.log.WarnContext(ctx, "claim outbox rows for direct delivery", "session_id", sessionID, "err", err)
		return
	}
	r.deliverAll(ctx, rows, pathDirect)
}

// relayBatch claims one batch of due rows (those never attempted only
// once due for fresh) and delivers it, returning how many rows it claimed.
func (r *Relay) relayBatch(ctx context.Context, fresh time.Duration) (int, error) {
	rows, err := r.store.OutboxClaimDue(ctx, r.opts.BatchSize, r.opts.Lease, fresh)
	if err != nil {
		return 0, err
	}
	r.deliverAll(ctx, rows, pathRelay)
	return len(rows), nil
}

// deliverAll delivers claimed rows in order. Once Temporal proves
// unreachable the remaining rows are rescheduled without trying, so a
// batch does not wait a timeout per row.
func (r *Relay) deliverAll(ctx context.Context, rows []db.OutboxRow, path string) {
	var down error
	for _, row := range rows {
		if down == nil && ctx.Err() != nil {
			down = ctx.Err()
		}
		if down != nil {
			r.fail(ctx, row, path, fmt.Errorf("not attempted: %w", down))
			continue
		}
		if err := r.deliver(ctx, row, path); err != nil && unreachable(err) {
			down = err
			r.downUntil.Store(time.Now().Add(r.opts.Cooldown).UnixNano())
		}
	}
}

// deliver signals the workflow for one claimed row and settles the row:
// deleted once Temporal accepted the signal, rescheduled otherwise. The
// delivery's span is a child of the row's writer (startDelivery), and the
// signal's span (Temporal's interceptor) a child of it.
func (r *Relay) deliver(ctx context.Context, row db.OutboxRow, path string) (err error) {
	ctx, span := r.startDelivery(ctx, row, path)
	result := "ok"
	defer func() { endDelivery(span, result, err) }()
	if row.Provider == "" {
		// The session is gone (its row deleted after teardown): there is
		// no workflow left to wake.
		r.log.InfoContext(ctx, "dropping outbox row of a deleted session", "session_id", row.SessionID, "outbox_id", row.ID, "kind", row.Kind)
		r.settle(ctx, row, nil)
		r.deliveries.WithLabelValues("dropped", path).Inc()
		result = "dropped"
		return nil
	}
	if err = r.signal(ctx, row); err != nil {
		r.fail(ctx, row, path, err)
		return err
	}
	r.downUntil.Store(0)
	r.settle(ctx, row, nil)
	r.deliveries.WithLabelValues("ok", path).Inc()
	return nil
}

// signal hands one row to Temporal: a wake-up signal to the session's
// workflow (started when none runs), or the start of its deletion
// workflow. A kind this replica does not know is an error.
func (r *Relay) signal(ctx context.Context, row db.OutboxRow) error {
	kind, ok := sessionwf.KindFromOutbox(row.Kind)
	if !ok {
		// Possibly written by a newer replica during a rolling upgrade:
		// keep it for a replica that knows the kind.
		return fmt.Errorf("unknown outbox kind %q, want one of this replica's (wakeup, interrupt, delete)", row.Kind)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.SignalTimeout)
	defer cancel()
	input := &sessionv1.SessionWorkflowInput{SessionId: row.SessionID, Provider: row.Provider,
		HostQueueTimeoutSeconds: int32(r.opts.HostGoneAfter / time.Second)} //nolint:gosec // validated at startup: at most a day
	if row.Kind == sessionwf.OutboxKindDelete {
		// Deletion runs in its own workflow (which cancels the session's).
		_, err := r.temporal.ExecuteWorkflow(ctx, DeletionStartOptions(r.opts.Queues, row.SessionID, row.Provider),
			sessionwf.DeletionWorkflowType, input)
		return err
	}
	_, err := r.temporal.SignalWithStartWorkflow(ctx, sessionwf.WorkflowID(row.SessionID), sessionwf.SignalWakeup,
		&sessionv1.WakeupSignal{Kind: kind, SessionId: row.SessionID, OutboxId: row.ID, EnqueuedAt: timestamppb.New(row.CreatedAt)},
		StartOptions(r.opts.Queues, row.SessionID, row.Provider), sessionwf.WorkflowType, input)
	return err
}

// Attribute keys of the delivery span.
const (
	attrSessionID = attribute.Key("mango.session.id")
	attrKind      = attribute.Key("mango.outbox.kind")
	attrPath      = attribute.Key("mango.outbox.path")
	attrAttempts  = attribute.Key("mango.outbox.attempts")
	attrAgeMillis = attribute.Key("mango.outbox.age_ms")
	attrOutboxID  = attribute.Key("mango.outbox.id")
	attrResult    = attribute.Key("mango.outbox.result")
)

// startDelivery starts the span of one row's delivery, "outbox.deliver
// <kind>". Its parent is the span of the request that wrote the row (its
// stored traceparent), on either path, so a row delivered by the relay
// after a crash or an outage continues its request's trace exactly as the
// direct delivery does; a row written without tracing starts a new trace.
func (r *Relay) startDelivery(ctx context.Context, row db.OutboxRow, path string) (context.Context, trace.Span) {
	ctx = traceparent.Join(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), row.TraceParent)
	return r.opts.Tracer.Start(ctx, "outbox.deliver "+row.Kind, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrSessionID.String(row.SessionID), attrKind.String(row.Kind), attrPath.String(path),
			attrAttempts.Int(row.Attempts), attrAgeMillis.Int64(max(time.Since(row.CreatedAt).Milliseconds(), 0)),
			attrOutboxID.Int64(row.ID)))
}

// endDelivery ends a delivery's span with its result (ok, dropped, or
// error with err as the span's status).
func endDelivery(span trace.Span, result string, err error) {
	if err != nil {
		result = "error"
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.SetAttributes(attrResult.String(result))
	span.End()
}

// StartOptions returns the options the api-server starts a session's
// workflow with: the session's workflow id on its provider's task queue.
// A running workflow is signalled (conflict policy USE_EXISTING); a closed
// one, whatever its outcome, is started afresh (reuse policy
// ALLOW_DUPLICATE), so a wake-up always reaches a live workflow.
func StartOptions(queues sessionwf.Queues, sessionID, provider string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       sessionwf.WorkflowID(sessionID),
		TaskQueue:                queues.Provider(provider),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
}

// DeletionStartOptions returns the options of a session's deletion
// workflow: one per session (a running one is reused), on the provider's
// queue.
func DeletionStartOptions(queues sessionwf.Queues, sessionID, provider string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       sessionwf.DeletionWorkflowID(sessionID),
		TaskQueue:                queues.Provider(provider),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
}

// fail records a failed delivery of row and reschedules it.
func (r *Relay) fail(ctx context.Context, row db.OutboxRow, path string, cause error) {
	r.deliveries.WithLabelValues("error", path).Inc()
	delay := Backoff(row.Attempts+1, r.opts.BackoffBase, r.opts.BackoffMax)
	r.log.WarnContext(ctx, "outbox delivery failed", "session_id", row.SessionID, "outbox_id", row.ID, "kind", row.Kind,
		"attempts", row.Attempts+1, "retry_in", delay, "path", path, "err", cause)
	r.settle(ctx, row, func(ctx context.Context) error {
		return r.store.OutboxReschedule(ctx, row.ID, truncate(cause.Error(), 1000), delay)
	})
}

// settle deletes row (reschedule nil) or reschedules it, on a context that
// survives the caller's cancellation so shutdown does not strand a row
// whose signal was accepted. A row it cannot settle is retried when its
// lease ends.
func (r *Relay) settle(ctx context.Context, row db.OutboxRow, reschedule func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var err error
	if reschedule != nil {
		err = reschedule(ctx)
	} else {
		err = r.store.OutboxDelete(ctx, row.ID)
	}
	if err != nil {
		r.log.WarnContext(ctx, "settle outbox row", "session_id", row.SessionID, "outbox_id", row.ID, "err", err)
	}
}

func (r *Relay) refreshStats(ctx context.Context) {
	st, err := r.store.OutboxStats(ctx)
	if err != nil {
		r.log.WarnContext(ctx, "read outbox stats", "err", err)
		return
	}
	r.depth.Set(float64(st.Depth))
	r.oldestAge.Set(st.OldestAge.Seconds())
}

// Backoff returns the delay before attempt number attempts+1 after
// attempts failures: base doubled per failure, capped at maxDelay, with
// "equal jitter" (uniform in [d/2, d]) so replicas retrying the same
// outage spread out.
func Backoff(attempts int, base, maxDelay time.Duration) time.Duration {
	d := base
	for i := 1; i < attempts && d < maxDelay; i++ {
		d *= 2
	}
	if d > maxDelay || d <= 0 {
		d = maxDelay
	}
	half := d / 2
	return half + rand.N(d-half+1) //nolint:gosec // jitter needs no cryptographic randomness
}

// unreachable reports whether err means Temporal could not be reached (as
// opposed to rejecting this one request), so trying more rows now is
// pointless.
func unreachable(err error) bool {
	var unavailable *serviceerror.Unavailable
	if errors.As(err, &unavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
