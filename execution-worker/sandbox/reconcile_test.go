package sandbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
)

// TestReconcilerLocal runs a reconciliation pass over the three cases a
// crash can leave: a bound sandbox (kept), a sandbox created for an intent
// that was never bound (bound now), and a Mango-owned sandbox nothing
// references (destroyed).
func TestReconcilerLocal(t *testing.T) {
	t.Parallel()
	env := newManagerEnv(t)
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: env.root})
	if err != nil {
		t.Fatal(err)
	}
	testReconciler(t, env, p)
}

func testReconciler(t *testing.T, env *managerEnv, p sandbox.Provider) {
	t.Helper()
	ctx := context.Background()
	const queue = "mango.test.host-1"
	bound := env.server.NewSession(t, "")
	unbound := env.server.NewSession(t, "")
	orphanKey := "sesn_orphan_" + t.Name()

	m := sandbox.NewSessionManager(p, env.bindings, queue)
	kept, err := m.Acquire(ctx, bound, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kept.Destroy(context.Background()) })
	if _, err := env.bindings.PutIntent(ctx, sandbox.Binding{SessionID: unbound, Provider: p.Name(), SpecHash: "h", TaskQueue: queue}); err != nil {
		t.Fatal(err)
	}
	_, crashRef, err := p.Create(ctx, unbound, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	orphan, orphanRef, err := p.Create(ctx, orphanKey, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = orphan.Destroy(context.Background()) })

	r := &sandbox.Reconciler{Provider: p, Bindings: env.bindings, TaskQueue: queue}
	res, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if len(res.Destroyed) != 1 || res.Destroyed[0] != orphanRef {
		t.Errorf("destroyed %v, want only the orphan %v", res.Destroyed, orphanRef)
	}
	if len(res.Bound) != 1 || res.Bound[0] != crashRef {
		t.Errorf("bound %v, want only the crash-window sandbox %v", res.Bound, crashRef)
	}
	if _, err := p.Attach(ctx, orphanKey, orphanRef); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("orphan after reconciliation: %v, want ErrNotFound", err)
	}
	if _, err := p.Attach(ctx, bound, kept.Ref()); err != nil {
		t.Errorf("bound sandbox after reconciliation: %v", err)
	}
	b, err := env.bindings.GetBinding(ctx, unbound)
	if err != nil || b.ExternalID != crashRef.ID || b.TaskQueue != queue {
		t.Errorf("binding of the crash-window session = %+v, %v; want %s on %s", b, err, crashRef.ID, queue)
	}
	// A second pass changes nothing.
	if res, err := r.RunOnce(ctx); err != nil || len(res.Destroyed)+len(res.Bound)+len(res.Moved) != 0 {
		t.Errorf("second pass = %+v, %v; want nothing to do", res, err)
	}

	// A worker of a new locality that reaches these sandboxes re-points
	// bindings whose queue nobody serves any more, and only those.
	liveQueues := map[string]bool{queue: true}
	moved := &sandbox.Reconciler{Provider: p, Bindings: env.bindings, TaskQueue: "mango.test.locality-2",
		QueueLive: func(_ context.Context, q string) (bool, error) { return liveQueues[q], nil }}
	if res, err := moved.RunOnce(ctx); err != nil || len(res.Moved) != 0 {
		t.Errorf("pass with the old queue live = %+v, %v; want nothing moved", res, err)
	}
	liveQueues[queue] = false
	res, err = moved.RunOnce(ctx)
	if err != nil || len(res.Moved) != 2 {
		t.Fatalf("pass with the old queue dead = %+v, %v; want both bound sandboxes moved", res, err)
	}
	for _, sid := range []string{bound, unbound} {
		if b, err := env.bindings.GetBinding(ctx, sid); err != nil || b.TaskQueue != "mango.test.locality-2" {
			t.Errorf("binding of %s = %+v, %v; want it on mango.test.locality-2", sid, b, err)
		}
	}
	if _, err := p.Attach(ctx, bound, kept.Ref()); err != nil {
		t.Errorf("the moved sandbox is still attachable: %v", err)
	}
}

// spareProvider is a local provider that reports one of its sandboxes as
// a spare and trims trimmed when asked.
type spareProvider struct {
	*sandboxlocal.Provider
	spare   sandbox.Ref
	trimmed []sandbox.Ref
	trims   int
}

func (p *spareProvider) List(ctx context.Context) ([]sandbox.Owned, error) {
	owned, err := p.Provider.List(ctx)
	for i, o := range owned {
		if o.Ref == p.spare {
			owned[i].KeyHash, owned[i].Spare = "", true
		}
	}
	return owned, err
}

func (p *spareProvider) TrimSpares(context.Context) ([]sandbox.Ref, error) {
	p.trims++
	return p.trimmed, nil
}

// TestReconcilerLeavesSparesToTheProvider: a spare (a warm pool's ready
// resource, referenced by no binding) is not destroyed as an orphan; the
// provider trims its spares itself, once per pass.
func TestReconcilerLeavesSparesToTheProvider(t *testing.T) {
	t.Parallel()
	env := newManagerEnv(t)
	local, err := sandboxlocal.New(sandboxlocal.Config{Root: env.root})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, spare, err := local.Create(ctx, "sesn_spare_"+t.Name(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	surplus := sandbox.Ref{Provider: local.Name(), ID: "surplus"}
	p := &spareProvider{Provider: local, spare: spare, trimmed: []sandbox.Ref{surplus}}
	r := &sandbox.Reconciler{Provider: p, Bindings: env.bindings, TaskQueue: "mango.test.host-1"}
	res, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if len(res.Destroyed) != 0 || p.trims != 1 || len(res.Trimmed) != 1 || res.Trimmed[0] != surplus {
		t.Errorf("pass = %+v after %d trims; want nothing destroyed, one trim reporting %v", res, p.trims, surplus)
	}
	if _, err := local.Attach(ctx, "sesn_spare_"+t.Name(), spare); err != nil {
		t.Errorf("the spare after reconciliation: %v, want it kept", err)
	}
}
