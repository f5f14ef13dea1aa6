package app_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker/dockertest"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal/localtest"
	"github.com/mangohq/mango/internal/poll"
)

// TestInstallationsShareOneRoot runs two installations as an operator
// would, each an api-server on its own database with its own local
// worker, both workers on one sandbox root and reconciling every 100ms
// with a 1ms grace, beside a workspace of a version before installation
// ids. Each installation's session takes a turn; then, twice, an orphan
// of each installation is planted and the test waits until that
// installation's reconciler has removed it (so passes of both ran while
// the other's sandbox existed). Both sessions then take another turn in
// the workspace of their first one, and the legacy workspace is still
// there.
func TestInstallationsShareOneRoot(t *testing.T) {
	t.Parallel()
	testInstallationsShare(t, "local")
}

// TestInstallationsShareOneDaemon is TestInstallationsShareOneRoot on the
// docker provider with the default configuration (no MANGO_DOCKER_LABELS):
// two installations' workers on one Docker daemon, reconciling every
// 100ms with a 1ms grace. Before installation ids, either reconciler
// destroyed the other's containers within one pass.
func TestInstallationsShareOneDaemon(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t) // skips without a daemon, or fails with MANGO_REQUIRE_SERVICES=1
	if err := dockertest.EnsureImage(t.Context(), cli, dockertest.Image, false); err != nil {
		t.Fatal(err)
	}
	testInstallationsShare(t, "docker")
}

func testInstallationsShare(t *testing.T, provider string) {
	type stack struct {
		name, session, installation string
		srv                         *cptest.Server
		env                         map[string]string
	}
	var stacks []*stack
	for _, name := range []string{"A", "B"} {
		srv, env := startStack(t)
		if len(stacks) > 0 {
			env["MANGO_LOCAL_SANDBOX_ROOT"] = stacks[0].env["MANGO_LOCAL_SANDBOX_ROOT"]
		}
		env["MANGO_SANDBOX"] = provider
		env["MANGO_RECONCILE_INTERVAL"] = "100ms"
		env["MANGO_RECONCILE_GRACE"] = "1ms"
		s := &stack{name: name, srv: srv, env: env, installation: serverInstallation(t, srv)}
		stacks = append(stacks, s)
		if provider == "docker" {
			t.Cleanup(func() { removeInstallationContainers(t, s.installation) })
		}
	}
	root := stacks[0].env["MANGO_LOCAL_SANDBOX_ROOT"]
	var legacy sandbox.Ref
	if provider == "local" {
		legacy = plantWorkspace(t, root, "legacy-version", "sesn_before_installation_ids")
		localtest.StripInstallation(t, legacy)
	}

	for _, s := range stacks {
		runWorker(t, s.env)
		s.session = s.srv.NewSession(t, provider)
		sendMessage(t, s.srv, s.session, `#tool bash {"command":"echo `+s.name+` > owner.txt"}`)
	}
	for _, s := range stacks {
		waitFor(t, s.srv, s.session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	}

	for round := range 2 {
		for _, s := range stacks {
			key := "sesn_orphan_" + s.name + "_" + string(rune('0'+round))
			if provider == "docker" {
				plantContainer(t, s.installation, key)
				waitGone(t, round, s.name, key, func() bool { return !containerExists(t, sandboxdocker.ContainerName(key)) })
				continue
			}
			ref := plantWorkspace(t, root, s.installation, key)
			waitGone(t, round, s.name, ref.ID, func() bool {
				_, err := os.Stat(ref.ID)
				return errors.Is(err, fs.ErrNotExist)
			})
		}
	}

	for _, s := range stacks {
		sendMessage(t, s.srv, s.session, `#tool bash {"command":"cat owner.txt"}`)
	}
	for _, s := range stacks {
		evs := waitFor(t, s.srv, s.session, func(e []listedEvent) bool { return idleCount(e) == 2 })
		r := lastOf(evs, "agent.tool_result")
		if r == nil || r.IsError || len(r.Content) == 0 || strings.TrimSpace(r.Content[0].Text) != s.name {
			t.Errorf("installation %s: second turn's tool result = %v (events %s), want %q from its first turn", s.name, r, types(evs), s.name)
		}
		if n := countType(evs, "session.error"); n != 0 {
			t.Errorf("installation %s: %d session errors, want none", s.name, n)
		}
	}
	if legacy.ID != "" {
		if _, err := os.Stat(legacy.ID); err != nil {
			t.Errorf("the legacy workspace after the passes: %v, want it left alone", err)
		}
	}
}

// waitGone waits until an installation's reconciler has removed its
// planted orphan.
func waitGone(t *testing.T, round int, installation, what string, gone func() bool) {
	t.Helper()
	poll.Until(t, 30*time.Second, fmt.Sprintf("round %d: installation %s's reconciler to remove its orphan %s", round, installation, what), func() (bool, string) {
		return gone(), "the orphan still exists: the reconciler does not run"
	})
}

// plantContainer creates the container of sessionKey as a docker provider
// of installation would, with no binding referencing it.
func plantContainer(t *testing.T, installation, sessionKey string) {
	t.Helper()
	p, err := sandboxdocker.New(t.Context(), sandboxdocker.Config{Installation: installation})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	if _, _, err := p.Create(t.Context(), sessionKey, sandbox.Spec{}); err != nil {
		// The reconciler (100ms interval, 1ms grace) may remove the
		// orphan between its creation and its start: "marked for
		// removal". Gone is what the caller waits for.
		if !strings.Contains(err.Error(), "marked for removal") && containerExists(t, sandboxdocker.ContainerName(sessionKey)) {
			t.Fatalf("plant the orphan container of %s: %v", sessionKey, err)
		}
		t.Logf("the orphan container of %s was removed while being created: %v", sessionKey, err)
	}
}

func containerExists(t *testing.T, name string) bool {
	t.Helper()
	return exec.Command("docker", "container", "inspect", name).Run() == nil
}

// removeInstallationContainers removes every container of installation
// (the test's own: its database, hence its id, is new).
func removeInstallationContainers(t *testing.T, installation string) {
	p, err := sandboxdocker.New(context.Background(), sandboxdocker.Config{Installation: installation})
	if err != nil {
		t.Errorf("clean up the containers of installation %s: %v", installation, err)
		return
	}
	defer func() { _ = p.Close() }()
	owned, err := p.List(context.Background())
	if err != nil {
		t.Errorf("clean up the containers of installation %s: %v", installation, err)
		return
	}
	for _, o := range owned {
		if o.Installation == installation {
			_ = p.DestroyRef(context.Background(), o.Ref)
		}
	}
}

// plantWorkspace creates, in root, the workspace of sessionKey as a local
// provider of installation would.
func plantWorkspace(t *testing.T, root, installation, sessionKey string) sandbox.Ref {
	t.Helper()
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: root, Installation: installation})
	if err != nil {
		t.Fatal(err)
	}
	_, ref, err := p.Create(t.Context(), sessionKey, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	return ref
}
