package sandbox_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal/localtest"
)

// TestReconcilerLocal runs a reconciliation pass over the three cases a
// crash can leave: a bound sandbox (kept), a sandbox created for an intent
// that was never bound (bound now), and a Mango-owned sandbox nothing
// references (destroyed).
func TestReconcilerLocal(t *testing.T) {
	t.Parallel()
	env := newManagerEnv(t)
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: env.root, Installation: env.installation})
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

	r := &sandbox.Reconciler{Provider: p, Bindings: env.bindings, TaskQueue: queue, Installation: env.installation}
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
	moved := &sandbox.Reconciler{Provider: p, Bindings: env.bindings, TaskQueue: "mango.test.locality-2", Installation: env.installation,
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

// TestInstallationsShareLocalRoot: two installations (two api-servers on
// their own databases) whose local workers share one sandbox root, beside
// a workspace of a version before installation ids that no binding
// references. Several reconciliation passes of both, sparing nothing for
// its age, destroy nothing; every session of both still runs commands in
// its own workspace through a restarted worker, neither attaches or
// removes the other's workspaces, and the legacy workspace is reported and
// kept.
func TestInstallationsShareLocalRoot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := newManagerEnv(t), newManagerEnv(t)
	b.root = a.root
	if a.installation == b.installation {
		t.Fatalf("two databases share the installation id %s", a.installation)
	}
	legacy, err := sandboxlocal.New(sandboxlocal.Config{Root: a.root, Installation: "legacy"})
	if err != nil {
		t.Fatal(err)
	}
	_, looseRef, err := legacy.Create(ctx, "sesn_legacy_unbound", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	localtest.StripInstallation(t, looseRef)

	const queue = "mango.local.shared"
	sessions := map[*managerEnv][]string{}
	refs := map[string]sandbox.Ref{}
	name := map[*managerEnv]string{a: "A", b: "B"}
	for _, env := range []*managerEnv{a, b} {
		m, _ := env.worker(t, queue)
		for range 3 {
			sid := env.server.NewSession(t, "")
			sb, err := m.Acquire(ctx, sid, sandbox.Spec{})
			if err != nil {
				t.Fatalf("installation %s: provision %s: %v", name[env], sid, err)
			}
			if err := sb.WriteFile(ctx, "owner.txt", []byte(name[env]+" "+sid), 0o644); err != nil {
				t.Fatal(err)
			}
			sessions[env] = append(sessions[env], sid)
			refs[sid] = sb.Ref()
		}
	}
	for pass := range 3 {
		for _, env := range []*managerEnv{a, b} {
			_, p := env.worker(t, queue)
			r := &sandbox.Reconciler{Provider: p, Bindings: env.bindings, TaskQueue: queue, Installation: env.installation}
			res, err := r.RunOnce(ctx)
			if err != nil {
				t.Fatalf("installation %s, pass %d: %v", name[env], pass, err)
			}
			if len(res.Destroyed)+len(res.Bound) != 0 || len(res.Unclaimed) != 1 || res.Unclaimed[0] != looseRef {
				t.Errorf("installation %s, pass %d = %+v; want nothing destroyed or bound and the legacy workspace %s reported",
					name[env], pass, res, looseRef.ID)
			}
		}
	}
	for _, env := range []*managerEnv{a, b} {
		m, p := env.worker(t, queue)
		for _, sid := range sessions[env] {
			sb, err := m.Acquire(ctx, sid, sandbox.Spec{})
			if err != nil {
				t.Errorf("installation %s: session %s after the passes: %v", name[env], sid, err)
				continue
			}
			res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "cat owner.txt"})
			if err != nil || string(res.Stdout) != name[env]+" "+sid {
				t.Errorf("installation %s: session %s reads %q (%v), want its own file", name[env], sid, res.Stdout, err)
			}
		}
		other := map[*managerEnv]*managerEnv{a: b, b: a}[env]
		sid := sessions[other][0]
		if _, err := p.Attach(ctx, sid, refs[sid]); !errors.Is(err, sandbox.ErrNotOwned) {
			t.Errorf("installation %s attaching installation %s's workspace = %v, want ErrNotOwned", name[env], name[other], err)
		}
		if err := p.(sandbox.Destroyer).DestroyRef(ctx, refs[sid]); !errors.Is(err, sandbox.ErrNotOwned) {
			t.Errorf("installation %s removing installation %s's workspace = %v, want ErrNotOwned", name[env], name[other], err)
		}
	}
	if _, err := os.Stat(looseRef.ID); err != nil {
		t.Errorf("the legacy workspace after the passes: %v, want it kept", err)
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
	local, err := sandboxlocal.New(sandboxlocal.Config{Root: env.root, Installation: env.installation})
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
	r := &sandbox.Reconciler{Provider: p, Bindings: env.bindings, TaskQueue: "mango.test.host-1", Installation: env.installation}
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
