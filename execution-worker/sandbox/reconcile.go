package sandbox

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
)

// BindingLister lists the bindings and intents of one provider.
type BindingLister interface {
	ListBindings(ctx context.Context, provider string) ([]Binding, error)
	PutBinding(ctx context.Context, b Binding) (*Binding, error)
}

// Reconciler repairs what crashes leave between a provider and the
// bindings: a resource created for an intent that was never bound is bound
// (the create-before-binding window), and a resource of this installation
// that no binding or intent references is destroyed. It needs a provider
// that can list and destroy its resources; others are skipped.
//
// It touches only what belongs to its installation. Resources labelled
// for another installation (which a provider's List leaves out anyway)
// are skipped. A legacy resource, created before installation ids and
// labelled with none, is adopted when a binding or intent of this
// installation references it (bound or kept like any other) and
// otherwise left alone and reported in ReconcileResult.Unclaimed: it may
// belong to another installation sharing the backend, so it is never
// destroyed.
//
// Spares (a warm pool's ready resources, [Owned.Spare]) belong to no
// session: the provider trims them itself ([SpareTrimmer]).
//
// Host-bound providers only see their locality's resources, so every
// worker reconciles its own locality; for remote providers any worker may,
// and concurrent passes are harmless because every step is idempotent.
//
// With QueueLive set, a pass also re-points bindings: a resource this
// worker lists (so it reaches it) whose binding names another task queue
// that no live worker polls (a per-worker host queue of a version before
// locality queues, or a locality renamed) is bound to TaskQueue. The
// session's workflow follows the binding the next time a turn finds the
// old queue unserved (CheckLocality).
type Reconciler struct {
	Provider Provider
	Bindings BindingLister
	// Installation is the id the provider labels its resources with;
	// only resources carrying it are ever destroyed.
	Installation string
	// TaskQueue is recorded when binding a resource found for an intent
	// without a queue.
	TaskQueue string
	// QueueLive reports whether a worker polling queue is alive; nil
	// never re-points a binding (remote providers, whose bindings name
	// the shared queue).
	QueueLive func(ctx context.Context, queue string) (bool, error)
	// Grace spares resources younger than this, as a margin for clocks.
	Grace time.Duration
	// Interval spaces the passes of Run.
	Interval time.Duration
	Logger   *slog.Logger

	unclaimed atomic.Int64 // len(Unclaimed) of the last successful pass
}

// Unclaimed returns how many legacy resources the last successful pass
// left alone (ReconcileResult.Unclaimed), for metrics.
func (r *Reconciler) Unclaimed() int64 { return r.unclaimed.Load() }

// ReconcileResult counts what one pass did.
type ReconcileResult struct {
	Destroyed []Ref
	Bound     []Ref
	// Moved are sandboxes whose binding now names TaskQueue.
	Moved []Ref
	// Unclaimed are legacy resources (no installation label) that no
	// binding of this installation references: left alone, since they
	// may be another installation's.
	Unclaimed []Ref
	// Trimmed are spares the provider removed ([SpareTrimmer]).
	Trimmed []Ref
}

// RunOnce makes one pass.
func (r *Reconciler) RunOnce(ctx context.Context) (ReconcileResult, error) {
	var res ReconcileResult
	lister, ok1 := r.Provider.(Lister)
	destroyer, ok2 := r.Provider.(Destroyer)
	if !ok1 || !ok2 {
		return res, nil
	}
	// Resources first, bindings second: an intent is written before its
	// resource is created, so every listed resource that is not an orphan
	// is referenced in the (later) binding list.
	owned, err := lister.List(ctx)
	if err != nil {
		return res, fmt.Errorf("list %s sandboxes: %w", r.Provider.Name(), err)
	}
	bindings, err := r.Bindings.ListBindings(ctx, r.Provider.Name())
	if err != nil {
		return res, fmt.Errorf("list %s bindings: %w", r.Provider.Name(), err)
	}
	byHash := make(map[string]Binding, len(bindings))
	for _, b := range bindings {
		byHash[KeyHash(b.SessionID)] = b
	}
	now := time.Now()
	live := map[string]bool{} // per pass: queue -> a live worker polls it
	for _, o := range owned {
		if !OwnedBy(o.Installation, r.Installation) {
			continue // another installation's: never ours to touch
		}
		legacy := o.Installation == ""
		if o.Spare {
			continue // the provider's own: see TrimSpares below
		}
		b, referenced := byHash[o.KeyHash]
		switch {
		case referenced && b.ExternalID == "":
			// Created, then the worker died before binding: finish it.
			b.ExternalID = o.Ref.ID
			b.TaskQueue = cmp.Or(b.TaskQueue, r.TaskQueue)
			if _, err := r.Bindings.PutBinding(ctx, b); err != nil {
				return res, fmt.Errorf("bind sandbox %s to session %s: %w", o.Ref.ID, b.SessionID, err)
			}
			res.Bound = append(res.Bound, o.Ref)
		case referenced && b.ExternalID == o.Ref.ID:
			moved, err := r.relocate(ctx, b, live)
			if err != nil {
				return res, err
			}
			if moved {
				res.Moved = append(res.Moved, o.Ref)
			}
		case legacy:
			// Unreferenced, or a duplicate of a bound session's
			// resource: possibly another installation's.
			res.Unclaimed = append(res.Unclaimed, o.Ref)
		case referenced:
			// Bound, after a crash, to a duplicate resource: the binding
			// wins, this one is an orphan.
			if old(o, now, r.Grace) {
				if err := destroyer.DestroyRef(ctx, o.Ref); err != nil {
					return res, fmt.Errorf("destroy duplicate sandbox %s: %w", o.Ref.ID, err)
				}
				res.Destroyed = append(res.Destroyed, o.Ref)
			}
		case old(o, now, r.Grace):
			if err := destroyer.DestroyRef(ctx, o.Ref); err != nil {
				return res, fmt.Errorf("destroy orphaned sandbox %s: %w", o.Ref.ID, err)
			}
			res.Destroyed = append(res.Destroyed, o.Ref)
		}
	}
	if t, ok := r.Provider.(SpareTrimmer); ok {
		trimmed, err := t.TrimSpares(ctx)
		res.Trimmed = trimmed
		if err != nil {
			return res, fmt.Errorf("trim %s spares: %w", r.Provider.Name(), err)
		}
	}
	r.unclaimed.Store(int64(len(res.Unclaimed)))
	return res, nil
}

// relocate re-points b to r.TaskQueue when it names a queue no live
// worker polls; live caches answers for the pass.
func (r *Reconciler) relocate(ctx context.Context, b Binding, live map[string]bool) (bool, error) {
	if r.QueueLive == nil || b.TaskQueue == r.TaskQueue || r.TaskQueue == "" {
		return false, nil
	}
	alive, known := live[b.TaskQueue]
	if !known {
		var err error
		if alive, err = r.QueueLive(ctx, b.TaskQueue); err != nil {
			return false, fmt.Errorf("health of task queue %s: %w", b.TaskQueue, err)
		}
		live[b.TaskQueue] = alive
	}
	if alive {
		return false, nil
	}
	b.TaskQueue = r.TaskQueue
	if _, err := r.Bindings.PutBinding(ctx, b); err != nil {
		return false, fmt.Errorf("re-point the binding of session %s to %s: %w", b.SessionID, r.TaskQueue, err)
	}
	return true, nil
}

// maxLoggedRefs bounds the references one log line lists.
const maxLoggedRefs = 20

func old(o Owned, now time.Time, grace time.Duration) bool {
	return o.CreatedAt.IsZero() || now.Sub(o.CreatedAt) >= grace
}

// Run reconciles at startup and then every Interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context) {
	log := cmp.Or(r.Logger, slog.Default())
	interval := defaults.Positive(r.Interval, time.Minute)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := r.Unclaimed()
		res, err := r.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			log.WarnContext(ctx, "sandbox reconciliation failed", "provider", r.Provider.Name(), "err", err)
		case len(res.Destroyed)+len(res.Bound)+len(res.Moved)+len(res.Trimmed) > 0:
			log.InfoContext(ctx, "sandbox reconciliation", "provider", r.Provider.Name(), "destroyed", len(res.Destroyed), "bound", len(res.Bound),
				"moved_to", r.TaskQueue, "moved", len(res.Moved), "spares_trimmed", len(res.Trimmed))
		}
		if err == nil && int64(len(res.Unclaimed)) != before {
			log.InfoContext(ctx, "legacy sandboxes without an installation id are left alone: no binding of this installation references them",
				"provider", r.Provider.Name(), "installation", r.Installation, "unclaimed", len(res.Unclaimed),
				"refs", res.Unclaimed[:min(len(res.Unclaimed), maxLoggedRefs)])
		}
		t.Reset(interval)
	}
}
