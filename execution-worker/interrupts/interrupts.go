// Package interrupts stops a worker's running turns as soon as the
// api-server pushes their interrupts, instead of when Temporal delivers the
// activity's cancellation in a heartbeat response (one heartbeat round trip
// later, about 0.75 s).
//
// A [Registry] holds the turns running on this worker: RunTurn registers
// each turn with [Registry.Start], which returns the context the turn's
// work runs under, and unregisters it with [Turn.Done]. A [Watcher] keeps
// the worker's ControlPlane WatchInterrupts stream open (reconnecting with
// capped backoff) and hands every interrupt to the registry, which cancels
// the context of the turn it is meant for with the cause [ErrInterrupted].
//
// Which turn an interrupt is meant for. Every replica pushes every
// interrupt to every worker, and a push may arrive late: after the turn it
// was sent against ended and the next turn of the session started. An
// interrupt must never stop a later turn. The rule compares the
// interrupt's position in the session's log (seq) with what the turn loaded
// when it started (GetRun: last_seq and the pending triggers):
//
//   - seq > last_seq: the interrupt was committed after the turn loaded
//     its run, so while this turn was the session's current one: it is
//     meant for this turn;
//   - the interrupt is among the turn's pending triggers: it was committed
//     before the turn loaded, behind the trigger(s) the turn runs, and
//     nothing consumed it yet: it is meant for this turn too;
//   - otherwise (seq <= last_seq and not pending) an earlier turn, or the
//     workflow, already consumed it: it is stale and ignored.
//
// Because the rule needs no timing, the registry also remembers the last
// [Recent] interrupts it received, and a turn registering checks them: an
// interrupt pushed between the turn's GetRun and its registration still
// stops it.
//
// The push is an accelerator; the Session Workflow's cancellation of the
// activity remains the fallback (stream down, interrupt dropped).
package interrupts

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// ErrInterrupted is the cause of a turn context cancelled by a pushed
// interrupt.
var ErrInterrupted = errors.New("turn interrupted by a pushed user.interrupt")

// Recent is how many received interrupts the registry remembers for turns
// that register after the push arrived.
const Recent = 64

// Interrupt is one interrupt pushed by the api-server.
type Interrupt struct {
	SessionID string
	EventID   string
	Seq       int64
	// OutboxID names the Session Workflow signal of the same interrupt
	// (WakeupSignal.outbox_id).
	OutboxID int64
}

// Registry holds the turns running on this worker. The zero value is not
// usable; create one with NewRegistry. It is safe for concurrent use.
type Registry struct {
	mu     sync.Mutex
	turns  map[string]map[*Turn]struct{} // by session id
	recent []Interrupt                   // ring of the last Recent received, oldest first

	received atomic.Int64
	applied  atomic.Int64
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{turns: map[string]map[*Turn]struct{}{}}
}

// Received counts the interrupts delivered to the registry.
func (r *Registry) Received() int64 { return r.received.Load() }

// Applied counts the turns a pushed interrupt cancelled.
func (r *Registry) Applied() int64 { return r.applied.Load() }

// Turn is one registered turn.
type Turn struct {
	r         *Registry
	sessionID string
	lastSeq   int64
	pending   map[string]bool
	cancel    context.CancelCauseFunc

	mu  sync.Mutex
	by  Interrupt // the interrupt that cancelled the turn
	hit bool
}

// Start registers a turn of sessionID that loaded its run at lastSeq with
// the given pending trigger ids, and returns the context its work runs
// under: ctx, cancelled with cause ErrInterrupted when an interrupt meant
// for the turn arrives (see the package comment), at once if one already
// did. Call Done when the turn ends. A nil Registry returns ctx and a Turn
// that is never interrupted.
func (r *Registry) Start(ctx context.Context, sessionID string, lastSeq int64, pending []string) (context.Context, *Turn) {
	if r == nil {
		return ctx, &Turn{}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := &Turn{r: r, sessionID: sessionID, lastSeq: lastSeq, pending: make(map[string]bool, len(pending)), cancel: cancel}
	for _, id := range pending {
		t.pending[id] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.turns[sessionID] == nil {
		r.turns[sessionID] = map[*Turn]struct{}{}
	}
	r.turns[sessionID][t] = struct{}{}
	for _, in := range r.recent {
		if in.SessionID == sessionID && t.meant(in) {
			r.interrupt(t, in)
			break
		}
	}
	return ctx, t
}

// Done unregisters the turn and releases its context. It is idempotent.
func (t *Turn) Done() {
	if t.r == nil {
		return
	}
	t.r.mu.Lock()
	if set := t.r.turns[t.sessionID]; set != nil {
		delete(set, t)
		if len(set) == 0 {
			delete(t.r.turns, t.sessionID)
		}
	}
	t.r.mu.Unlock()
	t.cancel(context.Canceled)
}

// Interrupted returns the pushed interrupt that cancelled the turn, if one
// did.
func (t *Turn) Interrupted() (Interrupt, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.by, t.hit
}

// meant reports whether in is meant for t (the package comment's rule).
func (t *Turn) meant(in Interrupt) bool {
	return in.Seq > t.lastSeq || t.pending[in.EventID]
}

// Deliver hands a pushed interrupt to the turns of its session it is meant
// for, cancelling them, and remembers it for turns registering later. It
// reports whether it cancelled a turn.
func (r *Registry) Deliver(in Interrupt) bool {
	r.received.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recent) == Recent {
		r.recent = append(r.recent[:0], r.recent[1:]...)
	}
	r.recent = append(r.recent, in)
	hit := false
	for t := range r.turns[in.SessionID] {
		if t.meant(in) {
			r.interrupt(t, in)
			hit = true
		}
	}
	return hit
}

// interrupt cancels t for in, once; r.mu is held.
func (r *Registry) interrupt(t *Turn, in Interrupt) {
	t.mu.Lock()
	first := !t.hit
	if first {
		t.by, t.hit = in, true
	}
	t.mu.Unlock()
	if first {
		r.applied.Add(1)
		t.cancel(ErrInterrupted)
	}
}

// Watcher keeps the worker's interrupt stream open and feeds a Registry.
type Watcher struct {
	client   pb.ControlPlaneClient
	workerID string
	reg      *Registry
	log      *slog.Logger

	connected atomic.Bool
	oldServer bool // Run's goroutine only: the api-server answered Unimplemented
}

// NewWatcher returns a watcher for the worker workerID.
func NewWatcher(client pb.ControlPlaneClient, workerID string, reg *Registry, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{client: client, workerID: workerID, reg: reg, log: log}
}

// Connected reports whether the stream is open.
func (w *Watcher) Connected() bool { return w.connected.Load() }

// Received counts the interrupts received on the stream.
func (w *Watcher) Received() int64 { return w.reg.Received() }

// Applied counts the turns pushed interrupts stopped.
func (w *Watcher) Applied() int64 { return w.reg.Applied() }

// Backoff between stream attempts: MinBackoff after a stream that broke,
// doubling up to MaxBackoff while attempts keep failing.
const (
	MinBackoff = 100 * time.Millisecond
	MaxBackoff = 5 * time.Second
)

// Run keeps the stream open until ctx ends, reconnecting with capped
// exponential backoff.
func (w *Watcher) Run(ctx context.Context) {
	b := &backoff.ExponentialBackOff{InitialInterval: MinBackoff, Multiplier: 2, MaxInterval: MaxBackoff}
	_, _ = backoff.Retry(ctx, func() (struct{}, error) {
		start := time.Now()
		err := w.watch(ctx)
		w.connected.Store(false)
		if time.Since(start) > 10*time.Second {
			b.Reset() // it worked for a while
		}
		if status.Code(err) == codes.Unimplemented {
			// An api-server older than the push: ask again now and then.
			waitFrom(b, MaxBackoff)
		}
		if err == nil {
			err = errStreamEnded
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, wait time.Duration) {
		w.logLost(ctx, err, wait)
	}))
}

// errStreamEnded stands for a stream that ended without an error: it is
// opened again all the same.
var errStreamEnded = errors.New("interrupt stream ended")

// waitFrom makes the next wait of b d, doubling from there.
func waitFrom(b *backoff.ExponentialBackOff, d time.Duration) {
	initial := b.InitialInterval
	b.InitialInterval = d
	b.Reset()
	b.InitialInterval = initial
}

// logLost logs a lost stream and the wait before the next.
func (w *Watcher) logLost(ctx context.Context, err error, wait time.Duration) {
	level := slog.LevelWarn
	switch status.Code(err) {
	case codes.Unavailable:
		level = slog.LevelInfo // an api-server restarting or draining
	case codes.Unimplemented:
		// An api-server older than the push: say so once.
		level = slog.LevelDebug
		if !w.oldServer {
			w.oldServer = true
			level = slog.LevelInfo
		}
	}
	w.log.Log(ctx, level, "interrupt stream to the ControlPlane lost; interrupts wait for Temporal's cancellation until it reconnects",
		"err", err, "backoff", wait)
}

// watch opens one stream and delivers its interrupts until it breaks or
// ctx ends.
func (w *Watcher) watch(ctx context.Context) error {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := w.client.WatchInterrupts(streamCtx, &pb.WatchInterruptsRequest{WorkerId: w.workerID})
	if err != nil {
		return err
	}
	// The server sends its headers once it has subscribed: from then on
	// no committed interrupt is missed.
	if _, err := st.Header(); err != nil {
		return err
	}
	w.connected.Store(true)
	for {
		msg, err := st.Recv()
		if err != nil {
			return err
		}
		w.reg.Deliver(Interrupt{SessionID: msg.GetSessionId(), EventID: msg.GetEventId(), Seq: msg.GetSeq(), OutboxID: msg.GetOutboxId()})
	}
}
