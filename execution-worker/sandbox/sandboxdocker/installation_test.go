package sandboxdocker_test

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker/dockertest"
)

// installation is one Mango installation of a test: an api-server on its
// own database (so its own installation id) and a worker's provider.
type installation struct {
	name     string
	srv      *cptest.Server
	bindings *controlplane.Bindings
	id       string
}

func newInstallation(t *testing.T, name string) *installation {
	t.Helper()
	srv := cptest.Start(t)
	cp, err := controlplane.Dial(srv.GRPCAddr, srv.WorkerToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Close() })
	id, err := controlplane.Installation(t.Context(), cp)
	if err != nil {
		t.Fatal(err)
	}
	return &installation{name: name, srv: srv, bindings: controlplane.NewBindings(cp), id: id}
}

// provider returns a fresh provider client of the installation (a worker
// or a restart of one).
func (in *installation) provider(t *testing.T) *sandboxdocker.Provider {
	t.Helper()
	return newProvider(t, sandboxdocker.Config{Installation: in.id})
}

// legacyContainer creates, through the Engine API, the container a version
// before installation ids made for sessionKey: Mango's labels without
// mango.installation.
func legacyContainer(t *testing.T, cli *client.Client, sessionKey string) sandbox.Ref {
	t.Helper()
	labels := maps.Clone(dockertest.CaseLabels(t))
	labels[sandboxdocker.LabelManaged] = "true"
	labels[sandboxdocker.LabelKeyHash] = sandbox.KeyHash(sessionKey)
	labels[sandboxdocker.LabelCreatedAt] = time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)
	init := true
	res, err := cli.ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Name: sandboxdocker.ContainerName(sessionKey),
		Config: &container.Config{Image: dockertest.Image, Cmd: []string{"sleep", "infinity"},
			WorkingDir: sandboxdocker.Root, Labels: labels},
		HostConfig: &container.HostConfig{NetworkMode: "none", Init: &init},
	})
	if err != nil {
		t.Fatalf("create a legacy container: %v", err)
	}
	if _, err := cli.ContainerStart(t.Context(), res.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start the legacy container: %v", err)
	}
	return sandbox.Ref{Provider: sandboxdocker.Name, ID: res.ID}
}

// TestInstallationsShareDaemon: two installations (two api-servers, two
// databases, two installation ids) run sessions on one Docker daemon, with
// containers of the same test labels so that only the installation id
// tells them apart, beside two containers of a version before installation
// ids: one bound to a session of the first installation, one bound to
// none. Several reconciliation passes of both, sparing nothing for its
// age, destroy nothing: every session of both still runs commands in its
// own container afterwards (through a restarted worker), the first
// installation adopts its legacy container, the unbound legacy container
// is reported by both and still exists, and neither installation attaches
// or removes the other's containers.
func TestInstallationsShareDaemon(t *testing.T) {
	t.Parallel()
	cli := daemon(t)
	ctx := t.Context()
	a, b := newInstallation(t, "A"), newInstallation(t, "B")
	if a.id == b.id {
		t.Fatalf("two databases share the installation id %s", a.id)
	}

	const sessionsEach = 3
	sessions := map[*installation][]string{}
	refs := map[string]sandbox.Ref{}
	for _, in := range []*installation{a, b} {
		m := sandbox.NewSessionManager(in.provider(t), in.bindings, "mango.docker.shared")
		for range sessionsEach {
			sid := in.srv.NewSession(t, "docker")
			sb, err := m.Acquire(ctx, sid, sandbox.Spec{})
			if err != nil {
				t.Fatalf("installation %s: provision %s: %v", in.name, sid, err)
			}
			if err := sb.WriteFile(ctx, "owner.txt", []byte(in.name+" "+sid), 0o644); err != nil {
				t.Fatal(err)
			}
			sessions[in] = append(sessions[in], sid)
			refs[sid] = sb.Ref()
		}
	}
	// A legacy container whose session of A has an intent left by a crash
	// of an older worker, and one no binding of anyone references.
	legacySession := a.srv.NewSession(t, "docker")
	if _, err := a.bindings.PutIntent(ctx, sandbox.Binding{SessionID: legacySession, Provider: sandboxdocker.Name, SpecHash: "h", TaskQueue: "mango.docker.shared"}); err != nil {
		t.Fatal(err)
	}
	legacyRef := legacyContainer(t, cli, legacySession)
	looseRef := legacyContainer(t, cli, "sesn_legacy_unbound_"+a.id)

	reconcilers := map[*installation]*sandbox.Reconciler{}
	for _, in := range []*installation{a, b} {
		reconcilers[in] = &sandbox.Reconciler{Provider: in.provider(t), Bindings: in.bindings, Installation: in.id,
			TaskQueue: "mango.docker.shared"}
	}
	for pass := range 3 {
		for _, in := range []*installation{a, b} {
			res, err := reconcilers[in].RunOnce(ctx)
			if err != nil {
				t.Fatalf("installation %s, pass %d: %v", in.name, pass, err)
			}
			if len(res.Destroyed) != 0 {
				t.Errorf("installation %s, pass %d, destroyed %v; want nothing destroyed", in.name, pass, res.Destroyed)
			}
			if !slices.Contains(res.Unclaimed, looseRef) {
				t.Errorf("installation %s, pass %d: unclaimed %v, want the unbound legacy container %s reported", in.name, pass, res.Unclaimed, looseRef.ID)
			}
			adopted := in == a && pass == 0
			if got := slices.Contains(res.Bound, legacyRef); got != adopted {
				t.Errorf("installation %s, pass %d: bound %v; the legacy container of A's intent bound: %v, want %v", in.name, pass, res.Bound, got, adopted)
			}
		}
	}

	// Every session, through a restarted worker of its installation,
	// still runs commands in its own container.
	for _, in := range []*installation{a, b} {
		m := sandbox.NewSessionManager(in.provider(t), in.bindings, "mango.docker.shared")
		for _, sid := range sessions[in] {
			sb, err := m.Acquire(ctx, sid, sandbox.Spec{})
			if err != nil {
				t.Errorf("installation %s: session %s after the passes: %v", in.name, sid, err)
				continue
			}
			if got := mustExec(t, sb, "cat owner.txt"); got != in.name+" "+sid {
				t.Errorf("installation %s: session %s reads %q, want its own file", in.name, sid, got)
			}
		}
		other := map[*installation]*installation{a: b, b: a}[in]
		sid := sessions[other][0]
		if _, err := in.provider(t).Attach(ctx, sid, refs[sid]); !errors.Is(err, sandbox.ErrNotOwned) {
			t.Errorf("installation %s attaching installation %s's container = %v, want ErrNotOwned", in.name, other.name, err)
		}
		if err := in.provider(t).DestroyRef(ctx, refs[sid]); !errors.Is(err, sandbox.ErrNotOwned) {
			t.Errorf("installation %s removing installation %s's container = %v, want ErrNotOwned", in.name, other.name, err)
		}
	}
	sb, err := sandbox.NewSessionManager(a.provider(t), a.bindings, "mango.docker.shared").Acquire(ctx, legacySession, sandbox.Spec{})
	if err != nil {
		t.Fatalf("the adopted legacy container: %v", err)
	}
	if sb.Ref() != legacyRef || mustExec(t, sb, "echo adopted") != "adopted\n" {
		t.Errorf("the adopted legacy session runs in %v, want %v", sb.Ref(), legacyRef)
	}
	if _, err := cli.ContainerInspect(ctx, looseRef.ID, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("the unbound legacy container after the passes: %v, want it left alone", err)
	}
	if _, err := b.provider(t).Attach(ctx, legacySession, legacyRef); err != nil {
		// Attach accepts legacy containers whatever the installation: only
		// a binding of that installation leads there.
		t.Errorf("Attach of a legacy container = %v, want it accepted", err)
	}
}
