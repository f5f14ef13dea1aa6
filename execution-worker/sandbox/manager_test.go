package sandbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
)

// managerEnv is a real ControlPlane (api-server process on PostgreSQL) and
// a local provider root shared by the "workers" of one test.
type managerEnv struct {
	server   *cptest.Server
	bindings *controlplane.Bindings
	root     string
	// installation is the server's installation id.
	installation string
}

func newManagerEnv(t *testing.T) *managerEnv {
	t.Helper()
	srv := cptest.Start(t)
	client, err := controlplane.Dial(srv.GRPCAddr, srv.WorkerToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	installation, err := controlplane.Installation(t.Context(), client)
	if err != nil {
		t.Fatal(err)
	}
	return &managerEnv{server: srv, bindings: controlplane.NewBindings(client), root: t.TempDir(), installation: installation}
}

// worker returns a new SessionManager with its own provider client, as a
// (re)started worker would have.
func (e *managerEnv) worker(t *testing.T, queue string) (*sandbox.SessionManager, sandbox.Provider) {
	t.Helper()
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: e.root, Installation: e.installation})
	if err != nil {
		t.Fatal(err)
	}
	return sandbox.NewSessionManager(p, e.bindings, queue), p
}

func TestSessionManagerLifecycle(t *testing.T) {
	t.Parallel()
	env := newManagerEnv(t)
	ctx := context.Background()
	session := env.server.NewSession(t, "")
	other := env.server.NewSession(t, "")
	const queue = "mango.local.worker-a"

	m, _ := env.worker(t, queue)
	sb, err := m.Acquire(ctx, session, sandbox.Spec{})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	b, err := env.bindings.GetBinding(ctx, session)
	if err != nil {
		t.Fatalf("binding after provisioning: %v", err)
	}
	if b.Provider != "local" || b.ExternalID != sb.Ref().ID || b.TaskQueue != queue || b.SpecHash != sandbox.SpecHash(sandbox.Spec{}) {
		t.Errorf("binding = %+v, want local %s on %s", b, sb.Ref().ID, queue)
	}
	if err := sb.WriteFile(ctx, "notes/a.txt", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := m.Acquire(ctx, session, sandbox.Spec{})
	if err != nil || again != sb {
		t.Errorf("second acquire = %v (%v), want the cached sandbox", again, err)
	}
	otherSB, err := m.Acquire(ctx, other, sandbox.Spec{})
	if err != nil {
		t.Fatalf("acquire other: %v", err)
	}
	if otherSB.Ref() == sb.Ref() {
		t.Fatalf("two sessions share sandbox %v", sb.Ref())
	}
	if _, err := otherSB.ReadFile(ctx, "notes/a.txt"); err == nil {
		t.Errorf("another session sees this session's file")
	}

	// A restarted worker re-attaches through the binding.
	restarted, _ := env.worker(t, "mango.local.worker-b")
	sb2, err := restarted.Acquire(ctx, session, sandbox.Spec{})
	if err != nil {
		t.Fatalf("acquire after restart: %v", err)
	}
	if sb2.Ref() != sb.Ref() {
		t.Errorf("restart attached %v, want %v", sb2.Ref(), sb.Ref())
	}
	if data, err := sb2.ReadFile(ctx, "notes/a.txt"); err != nil || string(data) != "kept" {
		t.Errorf("file after restart = %q, %v", data, err)
	}
	if b, _ := env.bindings.GetBinding(ctx, session); b.TaskQueue != queue {
		t.Errorf("restart changed the binding's queue to %q", b.TaskQueue)
	}

	// Teardown is idempotent and leaves nothing.
	for range 2 {
		if err := restarted.Teardown(ctx, session); err != nil {
			t.Fatalf("teardown: %v", err)
		}
	}
	if _, err := env.bindings.GetBinding(ctx, session); !errors.Is(err, sandbox.ErrNoBinding) {
		t.Errorf("binding after teardown: %v, want ErrNoBinding", err)
	}
	fresh, p := env.worker(t, queue)
	_ = fresh
	if _, err := p.Attach(ctx, session, sb.Ref()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("attach after teardown: %v, want ErrNotFound", err)
	}
}

func TestSessionManagerVanishedSandbox(t *testing.T) {
	t.Parallel()
	env := newManagerEnv(t)
	ctx := context.Background()
	session := env.server.NewSession(t, "")
	m, _ := env.worker(t, "mango.local.a")
	sb, err := m.Acquire(ctx, session, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	// Removed behind Mango's back.
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	restarted, p := env.worker(t, "mango.local.b")
	_, err = restarted.Acquire(ctx, session, sandbox.Spec{})
	var vanished *sandbox.VanishedError
	if !errors.As(err, &vanished) || !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("acquire of a vanished sandbox = %v, want VanishedError", err)
	}
	if vanished.Ref != sb.Ref() {
		t.Errorf("error names %v, want %v", vanished.Ref, sb.Ref())
	}
	// Nothing was silently re-created.
	if lister, ok := p.(sandbox.Lister); ok {
		owned, err := lister.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range owned {
			if o.KeyHash == sandbox.KeyHash(session) {
				t.Errorf("a replacement sandbox %v was created", o.Ref)
			}
		}
	}
	if b, err := env.bindings.GetBinding(ctx, session); err != nil || b.ExternalID != sb.Ref().ID {
		t.Errorf("binding after failure = %+v, %v; want it unchanged", b, err)
	}
}

func TestSessionManagerTeardownFinishesIntent(t *testing.T) {
	t.Parallel()
	env := newManagerEnv(t)
	ctx := context.Background()
	session := env.server.NewSession(t, "")
	m, p := env.worker(t, "mango.local.a")
	// A worker crashed between Create and PutBinding: intent + resource.
	if _, err := env.bindings.PutIntent(ctx, sandbox.Binding{SessionID: session, Provider: "local", SpecHash: "h", TaskQueue: "mango.local.a"}); err != nil {
		t.Fatal(err)
	}
	_, ref, err := p.Create(ctx, session, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Teardown(ctx, session); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if _, err := p.Attach(ctx, session, ref); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("orphan of the crash window survived teardown: %v", err)
	}
	if _, err := env.bindings.GetBinding(ctx, session); !errors.Is(err, sandbox.ErrNoBinding) {
		t.Errorf("intent after teardown: %v", err)
	}
}

// TestAcquireReportsProvisioning: AcquireProvisioned reports the
// acquisition that created the sandbox and the one that re-attached it
// through its binding (a restarted worker) as provisioned, and one that
// reused the sandbox the manager holds as not.
func TestAcquireReportsProvisioning(t *testing.T) {
	t.Parallel()
	bindings, root := sandboxtest.NewBindings(), t.TempDir()
	worker := func() *sandbox.SessionManager {
		p, err := sandboxlocal.New(sandboxlocal.Config{Root: root, Installation: "provisioning-test"})
		if err != nil {
			t.Fatal(err)
		}
		return sandbox.NewSessionManager(p, bindings, "mango.local.h1")
	}
	first := worker()
	for i, c := range []struct {
		m    *sandbox.SessionManager
		want bool
		what string
	}{{first, true, "created"}, {first, false, "held by the manager"}, {worker(), true, "re-attached after a restart"}} {
		sb, provisioned, err := c.m.AcquireProvisioned(t.Context(), "sesn_1", sandbox.Spec{})
		if err != nil || sb == nil {
			t.Fatalf("acquisition %d: %v, %v", i, sb, err)
		}
		if provisioned != c.want {
			t.Errorf("acquisition %d (%s): provisioned %v, want %v", i, c.what, provisioned, c.want)
		}
	}
}
