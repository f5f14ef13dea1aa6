package sandboxdocker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker/dockertest"
	"github.com/mangohq/mango/internal/poll"
)

// TestReconcilerRemovesOrphanContainer: a container with Mango's labels
// that no binding references (the create-before-binding crash window, or
// a leftover) is removed by the reconciler; a bound one is kept.
func TestReconcilerRemovesOrphanContainer(t *testing.T) {
	t.Parallel()
	cli := daemon(t)
	srv := cptest.Start(t)
	cp, err := controlplane.Dial(srv.GRPCAddr, srv.WorkerToken)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Close() }()
	bindings := controlplane.NewBindings(cp)
	ctx := context.Background()
	p := isolatedProvider(t)

	session := srv.NewSession(t, "docker")
	kept, err := sandbox.NewSessionManager(p, bindings, "mango.docker.h1").Acquire(ctx, session, sandbox.Spec{})
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	_, orphan, err := p.Create(ctx, "sesn_orphan_container", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	r := &sandbox.Reconciler{Provider: p, Bindings: bindings, TaskQueue: "mango.docker.h1", Installation: testInstallation}
	res, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if len(res.Destroyed) != 1 || res.Destroyed[0] != orphan {
		t.Errorf("destroyed %v, want only %v", res.Destroyed, orphan)
	}
	waitGone(t, cli, orphan.ID)
	if _, err := cli.ContainerInspect(ctx, kept.Ref().ID, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("bound container: %v", err)
	}
}

// TestSessionManagerDockerRestartAndVanish: a restarted worker (new
// provider client, new manager) reaches the same container and sees the
// files written before; once the container is removed behind Mango's back,
// acquisition fails explicitly and no replacement container appears.
func TestSessionManagerDockerRestartAndVanish(t *testing.T) {
	t.Parallel()
	cli := daemon(t)
	srv := cptest.Start(t)
	cp, err := controlplane.Dial(srv.GRPCAddr, srv.WorkerToken)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Close() }()
	bindings := controlplane.NewBindings(cp)
	ctx := context.Background()
	session := srv.NewSession(t, "docker")

	first, err := sandbox.NewSessionManager(isolatedProvider(t), bindings, "mango.docker.h1").Acquire(ctx, session, sandbox.Spec{})
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	if _, err := first.Exec(ctx, sandbox.ExecRequest{Command: "echo before-restart > state.txt"}); err != nil {
		t.Fatal(err)
	}
	restarted := sandbox.NewSessionManager(isolatedProvider(t), bindings, "mango.docker.h2")
	second, err := restarted.Acquire(ctx, session, sandbox.Spec{})
	if err != nil {
		t.Fatalf("acquire after restart: %v", err)
	}
	res, err := second.Exec(ctx, sandbox.ExecRequest{Command: "cat state.txt"})
	if err != nil || string(res.Stdout) != "before-restart\n" || second.Ref() != first.Ref() {
		t.Fatalf("after restart: ref %v (want %v), stdout %q, err %v", second.Ref(), first.Ref(), res.Stdout, err)
	}

	if _, err := cli.ContainerRemove(ctx, first.Ref().ID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	third := sandbox.NewSessionManager(isolatedProvider(t), bindings, "mango.docker.h3")
	_, err = third.Acquire(ctx, session, sandbox.Spec{})
	var vanished *sandbox.VanishedError
	if !errors.As(err, &vanished) {
		t.Fatalf("acquire after removal = %v, want a VanishedError naming the container", err)
	}
	list, err := isolatedProvider(t).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list {
		if o.KeyHash == sandbox.KeyHash(session) {
			t.Errorf("a replacement container %s appeared", o.Ref.ID)
		}
	}
}

// isolatedProvider returns a provider client whose containers carry, on top
// of this process's test label, one of this test alone: reconciliation in
// one test must not see (and remove) containers of tests running beside it.
func isolatedProvider(t *testing.T) *sandboxdocker.Provider {
	t.Helper()
	daemon(t)
	p, err := sandboxdocker.New(context.Background(), sandboxdocker.Config{Labels: dockertest.CaseLabels(t), Installation: testInstallation})
	if err != nil {
		t.Fatalf("sandboxdocker.New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// waitGone waits up to 10s for a container to disappear.
func waitGone(t *testing.T, cli *client.Client, id string) {
	t.Helper()
	poll.Until(t, 10*time.Second, "container "+id+" to be removed", func() (bool, string) {
		_, err := cli.ContainerInspect(t.Context(), id, client.ContainerInspectOptions{})
		return err != nil, "it still exists"
	})
}
