package sandboxdocker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker/dockertest"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
	"github.com/mangohq/mango/internal/poll"
)

// noRefill is a refill interval no test waits for: pools refill after
// adoptions and when they start.
const noRefill = time.Hour

// warmProvider returns a provider keeping a pool of size containers.
func warmProvider(t *testing.T, size int, lease time.Duration, cfg sandboxdocker.Config) *sandboxdocker.Provider {
	t.Helper()
	cfg.WarmPool = size
	return newProvider(t, sandboxdocker.WithWarmTiming(cfg, lease, noRefill))
}

// warmContainers lists this test's warm containers no session adopted.
func warmContainers(t *testing.T, cli *client.Client) []container.Summary {
	t.Helper()
	filters := client.Filters{}.Add("label", sandboxdocker.LabelWarm).
		Add("label", dockertest.CaseLabel+"="+dockertest.CaseLabels(t)[dockertest.CaseLabel])
	res, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		t.Fatalf("list warm containers: %v", err)
	}
	var out []container.Summary
	for _, c := range res.Items {
		if strings.HasPrefix(c.Names[0], "/mango-warm-") {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Names[0] < out[j].Names[0] })
	return out
}

// ready keeps the paused containers of key.
func ready(list []container.Summary, key string) []container.Summary {
	var out []container.Summary
	for _, c := range list {
		if c.State == container.StatePaused && c.Labels[sandboxdocker.LabelWarm] == key {
			out = append(out, c)
		}
	}
	return out
}

// waitReady waits (up to a minute) until at least n ready containers of
// key exist, and returns them.
func waitReady(t *testing.T, cli *client.Client, key string, n int) []container.Summary {
	t.Helper()
	var r []container.Summary
	poll.Until(t, time.Minute, fmt.Sprintf("%d ready warm containers of key %s", n, key), func() (bool, string) {
		list := warmContainers(t, cli)
		r = ready(list, key)
		return len(r) >= n, fmt.Sprintf("%d ready (all warm: %d)", len(r), len(list))
	})
	return r
}

func ids(list []container.Summary) []string {
	out := make([]string, len(list))
	for i, c := range list {
		out[i] = c.ID
	}
	return out
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestWarmPoolAdoption: with a warm pool, Create returns one of the
// pool's containers, started before Create was called, renamed to the
// session's name and owned by the session like any other: Create again
// finds it, Attach accepts it for its session only, List reports it with
// the session's key hash. The pool refills, and adopting is faster than
// creating (measured against a provider without pool, same daemon).
func TestWarmPoolAdoption(t *testing.T) {
	cli := daemon(t)
	const size = 3
	p := warmProvider(t, size, time.Minute, sandboxdocker.Config{})
	pool := ids(waitReady(t, cli, p.WarmKey(), size))
	if len(pool) != size {
		t.Fatalf("%d ready warm containers, want the pool's size %d", len(pool), size)
	}

	cold := newProvider(t, sandboxdocker.Config{})
	var coldTook, warmTook []time.Duration
	for range size {
		start := time.Now()
		create(t, cold, newKey(t))
		coldTook = append(coldTook, time.Since(start))
	}
	var keys []string
	var refs []sandbox.Ref
	for range size {
		key := newKey(t)
		start := time.Now()
		sb, ref := create(t, p, key)
		warmTook = append(warmTook, time.Since(start))
		keys, refs = append(keys, key), append(refs, ref)
		checkAdopted(t, cli, sb, ref, key, pool, start)
	}
	if w, c := median(warmTook), median(coldTook); 2*w >= c {
		t.Errorf("Create from the warm pool took %v (median of %v), creating took %v (%v): want adoption at least twice as fast", w, warmTook, c, coldTook)
	} else {
		t.Logf("Create: adopting %v (median of %v), creating %v (%v)", w, warmTook, c, coldTook)
	}

	if _, again, err := newProvider(t, sandboxdocker.Config{}).Create(t.Context(), keys[0], sandbox.Spec{}); err != nil || again != refs[0] {
		t.Errorf("Create again (another client, no pool) = %v, %v; want the adopted %v", again, err, refs[0])
	}
	if _, err := p.Attach(t.Context(), keys[0], refs[0]); err != nil {
		t.Errorf("Attach with the adopting session's key: %v", err)
	}
	if _, err := p.Attach(t.Context(), keys[1], refs[0]); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach with another session's key = %v, want ErrNotOwned", err)
	}
	owned, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i, ref := range refs {
		o, found := findOwned(owned, ref)
		if !found || o.KeyHash != sandbox.KeyHash(keys[i]) || o.Spare {
			t.Errorf("List entry of adopted %v = %+v (found %v), want the session's key hash, not spare", ref, o, found)
		}
	}

	checkRefilled(t, cli, p, pool, size)

	// A session the pool does not fit (environment variables set at
	// creation) gets a container of its own.
	_, ref, err := p.Create(t.Context(), newKey(t), sandbox.Spec{Env: map[string]string{"A": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if l := inspect(t, cli, ref.ID).Container.Config.Labels; l[sandboxdocker.LabelWarm] != "" {
		t.Errorf("a session with environment variables adopted warm container %s (labels %v)", ref.ID, l)
	}
}

// checkAdopted checks the container sb (ref) that Create for key, called
// at start, adopted: one of pool, started before, running, renamed to the
// session's name, its shells started by the pool, and usable.
func checkAdopted(t *testing.T, cli *client.Client, sb sandbox.Sandbox, ref sandbox.Ref, key string, pool []string, start time.Time) {
	t.Helper()
	if !slices.Contains(pool, ref.ID) {
		t.Fatalf("Create returned container %s, not one of the pool's %v", ref.ID, pool)
	}
	c := inspect(t, cli, ref.ID).Container
	started, err := time.Parse(time.RFC3339Nano, c.State.StartedAt)
	if err != nil || !started.Before(start) || !c.State.Running || c.State.Paused {
		t.Errorf("adopted container: started %v (Create called %v), running %v, paused %v; want started before, running, not paused",
			started, start, c.State.Running, c.State.Paused)
	}
	if c.Name != "/"+sandboxdocker.ContainerName(key) {
		t.Errorf("adopted container name %q, want %q", c.Name, "/"+sandboxdocker.ContainerName(key))
	}
	// Its shells were started before the pause, by the pool: the
	// session's first command costs no exec.
	top, err := cli.ContainerTop(t.Context(), ref.ID, client.ContainerTopOptions{Arguments: []string{"-o", "pid,args"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := shellProcesses(top.Processes); n < 2 {
		t.Errorf("adopted container runs %d shells before its first command (%v), want the pool's persistent and pooled shells", n, top.Processes)
	}
	if res, err := sb.(sandbox.Shell).ShellExec(t.Context(), sandbox.ExecRequest{Command: "cd /tmp && echo $PWD"}); err != nil || string(res.Stdout) != "/tmp\n" || res.NewShell {
		t.Errorf("first command in the adopted container's shell: %+v, %v", res, err)
	}
	if got := mustExec(t, sb, "echo adopted > f && cat f"); got != "adopted\n" {
		t.Errorf("Exec in the adopted container: %q", got)
	}
}

// checkRefilled waits until p's pool is refilled to size with containers
// other than the adopted pool, each listed as a spare of no session.
func checkRefilled(t *testing.T, cli *client.Client, p *sandboxdocker.Provider, pool []string, size int) {
	t.Helper()
	refilled := waitReady(t, cli, p.WarmKey(), size)
	if len(refilled) != size {
		t.Errorf("%d ready warm containers after refilling, want %d", len(refilled), size)
	}
	for _, c := range refilled {
		if slices.Contains(pool, c.ID) {
			t.Errorf("container %s adopted but still in the pool", c.ID)
		}
	}
	owned, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range refilled {
		if o, found := findOwned(owned, sandbox.Ref{Provider: sandboxdocker.Name, ID: c.ID}); !found || !o.Spare || o.KeyHash != "" {
			t.Errorf("List entry of ready %s = %+v (found %v), want a spare of no session", c.ID, o, found)
		}
	}
}

// exists reports whether container id exists.
func exists(t *testing.T, cli *client.Client, id string) bool {
	t.Helper()
	_, err := cli.ContainerInspect(t.Context(), id, client.ContainerInspectOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return err == nil
}

func findOwned(owned []sandbox.Owned, ref sandbox.Ref) (sandbox.Owned, bool) {
	for _, o := range owned {
		if o.Ref == ref {
			return o, true
		}
	}
	return sandbox.Owned{}, false
}

// TestWarmPoolConcurrentCreates: two workers (provider clients) sharing a
// pool on one daemon. Concurrent Creates for one key end with one
// container; concurrent Creates for different keys never share one.
func TestWarmPoolConcurrentCreates(t *testing.T) {
	cli := daemon(t)
	const size = 2
	workers := []*sandboxdocker.Provider{
		warmProvider(t, size, time.Minute, sandboxdocker.Config{}),
		warmProvider(t, size, time.Minute, sandboxdocker.Config{}),
	}
	waitReady(t, cli, workers[0].WarmKey(), size)

	createAll := func(keys []string) []sandbox.Ref {
		refs := make([]sandbox.Ref, len(keys))
		errs := make([]error, len(keys))
		var wg sync.WaitGroup
		for i, key := range keys {
			wg.Go(func() { _, refs[i], errs[i] = workers[i%2].Create(t.Context(), key, sandbox.Spec{}) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("concurrent Creates: %v", err)
		}
		return refs
	}

	key := newKey(t)
	refs := createAll([]string{key, key, key, key})
	for _, ref := range refs[1:] {
		if ref != refs[0] {
			t.Fatalf("concurrent Creates for one key returned %v, want one container", refs)
		}
	}
	owned, err := workers[0].List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := countHash(owned, sandbox.KeyHash(key)); n != 1 {
		t.Errorf("%d containers of the key after concurrent Creates, want 1", n)
	}

	waitReady(t, cli, workers[0].WarmKey(), size)
	var keys []string
	for i := range 6 {
		keys = append(keys, fmt.Sprintf("%s_%d", newKey(t), i))
	}
	refs = createAll(keys)
	seen := map[string]string{}
	for i, ref := range refs {
		if other, dup := seen[ref.ID]; dup {
			t.Fatalf("sessions %s and %s got the same container %s", other, keys[i], ref.ID)
		}
		seen[ref.ID] = keys[i]
		if name := inspect(t, cli, ref.ID).Container.Name; name != "/"+sandboxdocker.ContainerName(keys[i]) {
			t.Errorf("container of %s is named %s, want %s", keys[i], name, sandboxdocker.ContainerName(keys[i]))
		}
	}
}

func countHash(owned []sandbox.Owned, hash string) int {
	n := 0
	for _, o := range owned {
		if o.KeyHash == hash {
			n++
		}
	}
	return n
}

// bindingList lists fixed bindings.
type bindingList []sandbox.Binding

func (b bindingList) ListBindings(context.Context, string) ([]sandbox.Binding, error) { return b, nil }

func (b bindingList) PutBinding(_ context.Context, v sandbox.Binding) (*sandbox.Binding, error) {
	return &v, nil
}

// TestReconcilerTrimsWarmPool: a reconciliation pass leaves the pool's
// ready containers alone, removes surplus ones (made by a worker with a
// larger pool) and those made with other settings, and treats adopted
// containers like any sandbox: a bound one stays, an unbound one is an
// orphan.
func TestReconcilerTrimsWarmPool(t *testing.T) {
	cli := daemon(t)
	p := warmProvider(t, 1, time.Minute, sandboxdocker.Config{})
	waitReady(t, cli, p.WarmKey(), 1)
	boundKey, orphanKey := newKey(t)+"_bound", newKey(t)+"_orphan"
	_, bound := create(t, p, boundKey)
	waitReady(t, cli, p.WarmKey(), 1)
	_, orphan := create(t, p, orphanKey)
	waitReady(t, cli, p.WarmKey(), 1)

	larger := warmProvider(t, 2, time.Minute, sandboxdocker.Config{})
	waitReady(t, cli, p.WarmKey(), 2)
	_ = larger.Close()
	other := warmProvider(t, 1, time.Minute, sandboxdocker.Config{Memory: 256 << 20})
	if other.WarmKey() == p.WarmKey() {
		t.Fatal("a provider with another memory limit has the same warm key")
	}
	otherReady := waitReady(t, cli, other.WarmKey(), 1)
	_ = other.Close()
	before := ready(warmContainers(t, cli), p.WarmKey())

	r := &sandbox.Reconciler{Provider: p, TaskQueue: "mango.docker.h1", Installation: testInstallation,
		Bindings: bindingList{{SessionID: boundKey, Provider: sandboxdocker.Name, ExternalID: bound.ID, TaskQueue: "mango.docker.h1"}}}
	res, err := r.RunOnce(t.Context())
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if len(res.Destroyed) != 1 || res.Destroyed[0] != orphan {
		t.Errorf("destroyed %v, want only the unbound adopted container %v", res.Destroyed, orphan)
	}
	wantTrimmed := []sandbox.Ref{{Provider: sandboxdocker.Name, ID: before[1].ID}, {Provider: sandboxdocker.Name, ID: otherReady[0].ID}}
	slices.SortFunc(wantTrimmed, func(a, b sandbox.Ref) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(res.Trimmed, func(a, b sandbox.Ref) int { return strings.Compare(a.ID, b.ID) })
	if !slices.Equal(res.Trimmed, wantTrimmed) {
		t.Errorf("trimmed %v, want the surplus ready container and the one of other settings %v", res.Trimmed, wantTrimmed)
	}
	after := warmContainers(t, cli)
	if len(after) != 1 || after[0].ID != before[0].ID || after[0].State != container.StatePaused {
		t.Errorf("warm containers after the pass: %v, want only the ready %s", ids(after), before[0].ID)
	}
	if _, err := p.Attach(t.Context(), boundKey, bound); err != nil {
		t.Errorf("the bound adopted container after the pass: %v", err)
	}
	if res, err := r.RunOnce(t.Context()); err != nil || len(res.Destroyed)+len(res.Trimmed) != 0 {
		t.Errorf("second pass = %+v, %v; want nothing to do", res, err)
	}
}

// TestWarmPoolCrashMidAdoption: a worker dying between the steps of an
// adoption leaves nothing a session could have twice and nothing lost.
// Claimed but not renamed: no Create takes it, and TrimSpares removes it
// once it stayed so for the lease (not at first sight: it may be in
// flight). Renamed: it is the session's container, which the next Create
// finds. A rename that finds the session's name taken puts the container
// back in the pool. A container created but never started is removed
// like a stale claim.
func TestWarmPoolCrashMidAdoption(t *testing.T) {
	cli := daemon(t)
	maker := warmProvider(t, 3, time.Minute, sandboxdocker.Config{})
	pool := waitReady(t, cli, maker.WarmKey(), 3)
	_ = maker.Close()
	// The lease leaves room for a pause on a busy daemon: pause retries
	// for half of it.
	const lease = 4 * time.Second
	w := warmProvider(t, 0, lease, sandboxdocker.Config{}) // a worker without a pool of its own
	ctx := t.Context()

	// Claimed, then the worker died.
	claimed := pool[0]
	if err := w.ClaimWarm(ctx, claimed.ID); err != nil {
		t.Fatal(err)
	}
	if err := w.ClaimWarm(ctx, claimed.ID); err == nil {
		t.Fatal("a second claim of one container succeeded")
	}
	key1 := newKey(t) + "_1"
	_, ref1 := create(t, w, key1)

	// Renamed, then the worker died: the session's container.
	key2 := newKey(t) + "_2"
	renamed := pool[1]
	if err := w.ClaimWarm(ctx, renamed.ID); err != nil {
		t.Fatal(err)
	}
	if ok, err := w.BindWarm(ctx, renamed.ID, strings.TrimPrefix(renamed.Names[0], "/"), sandboxdocker.ContainerName(key2)); !ok || err != nil {
		t.Fatalf("BindWarm = %v, %v", ok, err)
	}
	restarted := newProvider(t, sandboxdocker.Config{})
	_, ref2 := create(t, restarted, key2)
	if ref2.ID != renamed.ID {
		t.Errorf("Create after a crash past the rename = %v, want the renamed container %s", ref2, renamed.ID)
	}
	if _, err := restarted.Attach(ctx, key1, ref2); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach of the renamed container with another key = %v, want ErrNotOwned", err)
	}

	// Claimed, renamed onto a name that is taken: back in the pool.
	back := pool[2]
	if err := w.ClaimWarm(ctx, back.ID); err != nil {
		t.Fatal(err)
	}
	if ok, err := w.BindWarm(ctx, back.ID, strings.TrimPrefix(back.Names[0], "/"), sandboxdocker.ContainerName(key2)); ok || err != nil {
		t.Fatalf("BindWarm onto a taken name = %v, %v; want not adopted, no error", ok, err)
	}
	if c := inspect(t, cli, back.ID).Container; !c.State.Paused || c.Name != back.Names[0] {
		t.Errorf("container after a refused rename: name %s, paused %v; want %s, paused", c.Name, c.State.Paused, back.Names[0])
	}

	// Created, never started (a refill cut short).
	labels := inspect(t, cli, back.ID).Container.Config.Labels
	half, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: "mango-warm-halfmade" + fmt.Sprint(time.Now().UnixNano()),
		Config: &container.Config{Image: dockertest.Image, Cmd: []string{"sleep", "infinity"}, Labels: labels}})
	if err != nil {
		t.Fatal(err)
	}

	owned, err := w.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int{key1: 1, key2: 1} {
		if n := countHash(owned, sandbox.KeyHash(key)); n != want {
			t.Errorf("%d containers of %s, want %d", n, key, want)
		}
	}

	first, err := w.TrimSpares(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range first {
		if r.ID == claimed.ID || r.ID == half.ID {
			t.Errorf("the first trim removed %s, seen unready once: it may be in flight", r.ID)
		}
	}
	if !slices.ContainsFunc(first, func(r sandbox.Ref) bool { return r.ID == back.ID }) {
		t.Errorf("first trim = %v; want the ready %s removed (the pool of this worker is empty)", first, back.ID)
	}
	poll.Until(t, 30*time.Second, fmt.Sprintf("the stale claim %s and the half-made %s to be trimmed (lease %v)", claimed.ID, half.ID, lease), func() (bool, string) {
		c, h := exists(t, cli, claimed.ID), exists(t, cli, half.ID)
		if !c && !h {
			return true, ""
		}
		if _, err := w.TrimSpares(ctx); err != nil {
			t.Fatal(err)
		}
		return false, fmt.Sprintf("claim exists %v, half-made exists %v", c, h)
	})
	for _, ref := range []sandbox.Ref{ref1, ref2} {
		if _, err := cli.ContainerInspect(ctx, ref.ID, client.ContainerInspectOptions{}); err != nil {
			t.Errorf("session container %s after trimming: %v", ref.ID, err)
		}
	}
}

// TestConformanceWarmPool runs the conformance suite on sandboxes adopted
// from a warm pool.
func TestConformanceWarmPool(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider {
			return warmProvider(t, 1, time.Minute, sandboxdocker.Config{Installation: installation})
		},
	})
}

// shellProcesses counts the shells of ContainerTop's rows (pid, args).
func shellProcesses(rows [][]string) int {
	n := 0
	for _, r := range rows {
		if len(r) > 1 && (r[1] == "/bin/sh" || strings.HasPrefix(r[1], "bash")) {
			n++
		}
	}
	return n
}
