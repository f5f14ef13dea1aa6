package sandboxdocker_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
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

// TestMain removes every container this test process created, whatever
// the outcome.
func TestMain(m *testing.M) {
	code := m.Run()
	if cli, err := client.New(client.FromEnv); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := dockertest.Cleanup(ctx, cli); err != nil {
			fmt.Fprintln(os.Stderr, "cleanup of test containers:", err)
			if code == 0 {
				code = 1
			}
		}
		cancel()
		_ = cli.Close()
	}
	os.Exit(code)
}

var (
	imageOnce sync.Once
	imageErr  error
)

// daemon returns a client of the test daemon with the sandbox image built,
// or skips tb (fails it with MANGO_REQUIRE_SERVICES=1).
func daemon(tb testing.TB) *client.Client {
	tb.Helper()
	cli := dockertest.Client(tb)
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		imageErr = dockertest.EnsureImage(ctx, cli, dockertest.Image, false)
	})
	if imageErr != nil {
		tb.Fatalf("build sandbox image: %v", imageErr)
	}
	tb.Cleanup(func() {
		// Only this test's containers: others run in parallel.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dockertest.CleanupCase(ctx, cli, tb); err != nil {
			tb.Errorf("cleanup of test containers: %v", err)
		}
	})
	return cli
}

// testInstallation is the installation id of the tests' providers unless
// they set their own.
const testInstallation = "test-installation"

// newProvider returns a fresh provider client (a "worker restart") whose
// containers carry this test's labels, of cfg.Installation or else
// testInstallation.
func newProvider(tb testing.TB, cfg sandboxdocker.Config) *sandboxdocker.Provider {
	tb.Helper()
	daemon(tb)
	cfg.Labels = dockertest.CaseLabels(tb)
	cfg.Installation = cmp.Or(cfg.Installation, testInstallation)
	p, err := sandboxdocker.New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("sandboxdocker.New: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider {
			return newProvider(t, sandboxdocker.Config{Installation: installation})
		},
		Spec: sandbox.Spec{Env: map[string]string{"MANGO_SPEC_VAR": "from the spec"}},
	})
}

func newKey(t *testing.T) string {
	return fmt.Sprintf("sesn_docker_%s_%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
}

func create(t *testing.T, p *sandboxdocker.Provider, key string) (sandbox.Sandbox, sandbox.Ref) {
	t.Helper()
	sb, ref, err := p.Create(t.Context(), key, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return sb, ref
}

func inspect(t *testing.T, cli *client.Client, id string) client.ContainerInspectResult {
	t.Helper()
	res, err := cli.ContainerInspect(t.Context(), id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("ContainerInspect(%s): %v", id, err)
	}
	return res
}

func mustExec(t *testing.T, sb sandbox.Sandbox, cmd string) string {
	t.Helper()
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: cmd})
	if err != nil {
		t.Fatalf("Exec(%q): %v", cmd, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("Exec(%q): exit %d, stderr %q", cmd, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

func TestLabelsCarryKeyHashNotRawKey(t *testing.T) {
	cli := daemon(t)
	p := newProvider(t, sandboxdocker.Config{})
	key := newKey(t)
	_, ref := create(t, p, key)

	res := inspect(t, cli, ref.ID)
	c := res.Container
	if got, want := c.Name, "/"+sandboxdocker.ContainerName(key); got != want {
		t.Errorf("container name = %q, want %q", got, want)
	}
	labels := c.Config.Labels
	if labels[sandboxdocker.LabelManaged] != "true" {
		t.Errorf("label %s = %q, want true", sandboxdocker.LabelManaged, labels[sandboxdocker.LabelManaged])
	}
	if got, want := labels[sandboxdocker.LabelKeyHash], sandbox.KeyHash(key); got != want {
		t.Errorf("label %s = %q, want KeyHash %q", sandboxdocker.LabelKeyHash, got, want)
	}
	if got := labels[sandboxdocker.LabelInstallation]; got != testInstallation {
		t.Errorf("label %s = %q, want the installation %q", sandboxdocker.LabelInstallation, got, testInstallation)
	}
	if _, err := time.Parse(time.RFC3339, labels[sandboxdocker.LabelCreatedAt]); err != nil {
		t.Errorf("label %s = %q, want RFC 3339: %v", sandboxdocker.LabelCreatedAt, labels[sandboxdocker.LabelCreatedAt], err)
	}
	if strings.Contains(string(res.Raw), key) {
		t.Errorf("the container's inspect document contains the raw session key %q", key)
	}
	if c.Config.WorkingDir != sandboxdocker.Root {
		t.Errorf("WorkingDir = %q, want %q", c.Config.WorkingDir, sandboxdocker.Root)
	}
}

func TestDefaultsNetworkNoneAndLimits(t *testing.T) {
	cli := daemon(t)
	p := newProvider(t, sandboxdocker.Config{})
	sb, ref := create(t, p, newKey(t))

	hc := inspect(t, cli, ref.ID).Container.HostConfig
	if hc.NetworkMode != "none" {
		t.Errorf("NetworkMode = %q, want none", hc.NetworkMode)
	}
	if hc.Memory != sandboxdocker.DefaultMemory || hc.MemorySwap != sandboxdocker.DefaultMemory {
		t.Errorf("Memory, MemorySwap = %d, %d; want %d for both", hc.Memory, hc.MemorySwap, int64(sandboxdocker.DefaultMemory))
	}
	if hc.NanoCPUs != int64(sandboxdocker.DefaultCPUs*1e9) {
		t.Errorf("NanoCPUs = %d, want %d", hc.NanoCPUs, int64(sandboxdocker.DefaultCPUs*1e9))
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != sandboxdocker.DefaultPids {
		t.Errorf("PidsLimit = %v, want %d", hc.PidsLimit, sandboxdocker.DefaultPids)
	}
	if hc.Privileged || hc.AutoRemove {
		t.Errorf("Privileged, AutoRemove = %v, %v; want false, false", hc.Privileged, hc.AutoRemove)
	}
	if len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" {
		t.Errorf("CapDrop = %v, want [ALL]", hc.CapDrop)
	}
	if !strings.Contains(strings.Join(hc.SecurityOpt, ","), "no-new-privileges") {
		t.Errorf("SecurityOpt = %v, want no-new-privileges", hc.SecurityOpt)
	}
	// Only the loopback interface exists.
	devs := mustExec(t, sb, "cat /proc/net/dev")
	if !strings.Contains(devs, "lo:") || strings.Contains(devs, "eth0") {
		t.Errorf("/proc/net/dev = %q, want lo only", devs)
	}
}

func TestConfiguredLimitsAndBridge(t *testing.T) {
	cli := daemon(t)
	p := newProvider(t, sandboxdocker.Config{CPUs: 0.5, Memory: 256 << 20, Pids: 64, Network: "bridge"})
	sb, ref := create(t, p, newKey(t))

	hc := inspect(t, cli, ref.ID).Container.HostConfig
	if hc.Memory != 256<<20 || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 64 {
		t.Errorf("Memory, NanoCPUs, PidsLimit = %d, %d, %v; want %d, %d, 64", hc.Memory, hc.NanoCPUs, hc.PidsLimit, 256<<20, int64(5e8))
	}
	if hc.NetworkMode != "bridge" {
		t.Errorf("NetworkMode = %q, want bridge", hc.NetworkMode)
	}
	if devs := mustExec(t, sb, "cat /proc/net/dev"); !strings.Contains(devs, "eth0") {
		t.Errorf("/proc/net/dev = %q, want an eth0 with bridge networking", devs)
	}
	// The pids limit is enforced: 100 sleeping processes do not fit in 64
	// (the shell fails to fork and gives up).
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{
		Command: "i=0; while [ $i -lt 100 ]; do sleep 2 & i=$((i+1)); done; echo all-started",
		Timeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatalf("fork loop: %v", err)
	}
	if res.ExitCode == 0 || string(res.Stdout) == "all-started\n" {
		t.Errorf("fork loop under a pids limit of 64: exit %d, stdout %q, want a failure to fork", res.ExitCode, res.Stdout)
	}
}

func TestAttachRestartsStoppedContainer(t *testing.T) {
	cli := daemon(t)
	key := newKey(t)
	sb, ref := create(t, newProvider(t, sandboxdocker.Config{}), key)
	if err := sb.WriteFile(t.Context(), "kept.txt", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	timeout := 2
	if _, err := cli.ContainerStop(t.Context(), ref.ID, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatalf("ContainerStop: %v", err)
	}
	if st := inspect(t, cli, ref.ID).Container.State; st.Running {
		t.Fatal("container still running after ContainerStop")
	}
	att, err := newProvider(t, sandboxdocker.Config{}).Attach(t.Context(), key, ref)
	if err != nil {
		t.Fatalf("Attach to a stopped container: %v", err)
	}
	if st := inspect(t, cli, ref.ID).Container.State; !st.Running {
		t.Errorf("container state after Attach = %q, want running", st.Status)
	}
	if got := mustExec(t, att, "cat kept.txt"); got != "kept" {
		t.Errorf("after restart, cat kept.txt = %q, want kept", got)
	}

	// Create restarts it too, and an Exec on a sandbox whose container was
	// stopped behind its back starts it again.
	if _, err := cli.ContainerStop(t.Context(), ref.ID, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatalf("ContainerStop: %v", err)
	}
	if got := mustExec(t, att, "cat kept.txt"); got != "kept" {
		t.Errorf("Exec after a stop: cat kept.txt = %q, want kept", got)
	}
	if _, err := cli.ContainerStop(t.Context(), ref.ID, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatalf("ContainerStop: %v", err)
	}
	sb2, ref2 := create(t, newProvider(t, sandboxdocker.Config{}), key)
	if ref2 != ref {
		t.Errorf("Create after a stop: Ref = %v, want %v", ref2, ref)
	}
	if got := mustExec(t, sb2, "cat kept.txt"); got != "kept" {
		t.Errorf("Create after a stop: cat kept.txt = %q, want kept", got)
	}
}

func TestAttachRemovedBehindOurBack(t *testing.T) {
	cli := daemon(t)
	key := newKey(t)
	sb, ref := create(t, newProvider(t, sandboxdocker.Config{}), key)
	if _, err := cli.ContainerRemove(t.Context(), ref.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatalf("ContainerRemove: %v", err)
	}
	if _, err := newProvider(t, sandboxdocker.Config{}).Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to a removed container = %v, want ErrNotFound", err)
	}
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Exec in a removed container = %v, want ErrNotFound", err)
	}
	if _, err := sb.ReadFile(t.Context(), "x"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("ReadFile in a removed container = %v, want ErrNotFound", err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Errorf("Destroy of a removed container = %v, want nil", err)
	}
}

func TestForeignContainers(t *testing.T) {
	cli := daemon(t)
	p := newProvider(t, sandboxdocker.Config{})
	key := newKey(t)
	// A container squatting the session's name without Mango's labels.
	res, err := cli.ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Name:       sandboxdocker.ContainerName(key),
		Config:     &container.Config{Image: dockertest.Image, Cmd: []string{"true"}, Labels: dockertest.CaseLabels(t)},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatalf("ContainerCreate: %v", err)
	}
	if _, _, err := p.Create(t.Context(), key, sandbox.Spec{}); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Create over a foreign container with the session's name = %v, want ErrNotOwned", err)
	}
	ref := sandbox.Ref{Provider: sandboxdocker.Name, ID: res.ID}
	if _, err := p.Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach to a foreign container = %v, want ErrNotOwned", err)
	}
	if err := p.DestroyRef(t.Context(), ref); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("DestroyRef of a foreign container = %v, want ErrNotOwned", err)
	}
	if _, err := cli.ContainerInspect(t.Context(), res.ID, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("the foreign container is gone after a refused DestroyRef: %v", err)
	}
	owned, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owned {
		if o.Ref.ID == res.ID {
			t.Errorf("List() includes the foreign container %s", res.ID)
		}
	}
}

func TestExecKillsChildrenOnTimeoutAndSurvivesEscapes(t *testing.T) {
	daemon(t)
	sb, _ := create(t, newProvider(t, sandboxdocker.Config{}), newKey(t))
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{
		Command: "sh -c 'sleep 60' & echo $! > bg.pid; (sleep 61 &) ; sleep 62",
		Timeout: 300 * time.Millisecond,
	})
	if err != nil || !res.TimedOut || res.ExitCode != -1 {
		t.Fatalf("Exec past its timeout = %+v, %v; want TimedOut, exit -1", res, err)
	}
	// Every sleep of the group is gone, and no zombie stays behind (the
	// init process reaps orphans).
	poll.Until(t, 2*time.Second, "no sleep or zombie process left after the timeout", func() (bool, string) {
		ps := mustExec(t, sb, "ps -o pid,stat,args | grep -E 'sleep 6[012]|Z ' | grep -v grep; true")
		return ps == "", "processes left:\n" + ps
	})
	// No bookkeeping files are left behind.
	// The pid file of the listing command itself holds its own pid ($$).
	list := `for f in /tmp/.mango-exec/*; do [ -e "$f" ] || continue; [ "$(cat "$f")" = "$$" ] || echo "$f"; done`
	if got := mustExec(t, sb, list); got != "" {
		t.Errorf("/tmp/.mango-exec holds %q after the command ended, want nothing", got)
	}
	// The killed command's stderr carries no message of the wrapper shell.
	if len(res.Stderr) != 0 {
		t.Errorf("stderr of the killed command = %q, want nothing", res.Stderr)
	}
}

func TestFilesThroughSymlinksInsideWorkspace(t *testing.T) {
	daemon(t)
	sb, _ := create(t, newProvider(t, sandboxdocker.Config{}), newKey(t))
	mustExec(t, sb, "mkdir -p real/dir && ln -s real/dir link && ln -s link/f.txt flink && ln -s nowhere/x dangling")
	if err := sb.WriteFile(t.Context(), "link/sub/a.txt", []byte("A"), 0o600); err != nil {
		t.Fatalf("WriteFile through a link inside the workspace: %v", err)
	}
	if got := mustExec(t, sb, "cat real/dir/sub/a.txt; stat -c %a real/dir/sub/a.txt; test -L link && echo still-link"); got != "A600\nstill-link\n" {
		t.Errorf("after WriteFile(link/sub/a.txt): %q, want the file under real/dir with mode 600 and the link kept", got)
	}
	if err := sb.WriteFile(t.Context(), "flink", []byte("via file link"), 0o644); err != nil {
		t.Fatalf("WriteFile to a link to a missing file: %v", err)
	}
	if got, err := sb.ReadFile(t.Context(), "real/dir/f.txt"); err != nil || string(got) != "via file link" {
		t.Errorf("ReadFile(real/dir/f.txt) = %q, %v; want the content written through flink", got, err)
	}
	if err := sb.WriteFile(t.Context(), "dangling", []byte("d"), 0o644); err != nil {
		t.Fatalf("WriteFile to a dangling link inside the workspace: %v", err)
	}
	if got := mustExec(t, sb, "cat nowhere/x"); got != "d" {
		t.Errorf("cat nowhere/x = %q, want d", got)
	}
	if err := sb.WriteFile(t.Context(), "real", []byte("x"), 0o644); err == nil {
		t.Error("WriteFile over a directory succeeded, want an error")
	}
	if _, err := sb.ReadFile(t.Context(), "real"); err == nil {
		t.Error("ReadFile of a directory succeeded, want an error")
	}
}

func TestNewFailsWithUnreachableDaemon(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := sandboxdocker.New(ctx, sandboxdocker.Config{Installation: testInstallation})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/docker.sock") {
		t.Errorf("New with an unreachable DOCKER_HOST = %v, want an error naming the host", err)
	}
}

func TestDestroyConcurrent(t *testing.T) {
	cli := daemon(t)
	key := newKey(t)
	p := newProvider(t, sandboxdocker.Config{})
	sb, ref := create(t, p, key)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = sb.Destroy(t.Context()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Destroy #%d = %v, want nil", i, err)
		}
	}
	if _, err := cli.ContainerInspect(t.Context(), ref.ID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("container after Destroy: inspect = %v, want not found", err)
	}
}

// TestCapabilities: packages install only where containers have a network.
func TestCapabilities(t *testing.T) {
	if caps := newProvider(t, sandboxdocker.Config{}).Capabilities(); len(caps) != 0 {
		t.Errorf("network none: Capabilities = %v, want none", caps)
	}
	caps := newProvider(t, sandboxdocker.Config{Network: "bridge"}).Capabilities()
	if !slices.Equal(caps, []string{sandbox.CapabilityPackages}) {
		t.Errorf("bridge: Capabilities = %v, want packages only", caps)
	}
}

// TestLocalityIsTheDaemon: the locality is the daemon's own ID, the same
// for every provider (every worker) talking to that daemon.
func TestLocalityIsTheDaemon(t *testing.T) {
	t.Parallel()
	cli := daemon(t)
	info, err := cli.Info(context.Background(), client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := newProvider(t, sandboxdocker.Config{}).Locality(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := newProvider(t, sandboxdocker.Config{}).Locality(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := sandbox.SanitizeLocality(info.Info.ID, sandbox.MaxLocalityLen); a != want || b != want {
		t.Errorf("localities %q, %q; want both %q from daemon ID %q", a, b, want, info.Info.ID)
	}
}

// BenchmarkExecPaths compares a command run through the sandbox's shells (a
// write and a read on an attached stream) with one run in an exec of its
// own (a command with input takes that path): the second is what every
// tool call cost before the shells.
func BenchmarkExecPaths(b *testing.B) {
	daemon(b)
	p := newProvider(b, sandboxdocker.Config{})
	key := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	sb, _, err := p.Create(b.Context(), key, sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	shell := sb.(sandbox.Shell)
	if err := sb.WriteFile(b.Context(), "sub/dir/f.txt", []byte("ok\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		run  func() (*sandbox.ExecResult, error)
	}{
		{"persistent-shell", func() (*sandbox.ExecResult, error) {
			res, err := shell.ShellExec(b.Context(), sandbox.ExecRequest{Command: "echo ok"})
			if err != nil {
				return nil, err
			}
			return &res.ExecResult, nil
		}},
		{"exec-via-shell-pool", func() (*sandbox.ExecResult, error) {
			return sb.Exec(b.Context(), sandbox.ExecRequest{Command: "echo ok"})
		}},
		{"exec-of-its-own", func() (*sandbox.ExecResult, error) {
			return sb.Exec(b.Context(), sandbox.ExecRequest{Command: "echo ok", Stdin: []byte{}})
		}},
		{"write-file", func() (*sandbox.ExecResult, error) {
			err := sb.WriteFile(b.Context(), "sub/dir/w.txt", []byte("ok\n"), 0o644)
			return &sandbox.ExecResult{Stdout: []byte("ok\n")}, err
		}},
		{"read-file", func() (*sandbox.ExecResult, error) {
			data, err := sb.ReadFile(b.Context(), "sub/dir/f.txt")
			return &sandbox.ExecResult{Stdout: data}, err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				res, err := bc.run()
				if err != nil || string(res.Stdout) != "ok\n" {
					b.Fatalf("%+v, %v", res, err)
				}
			}
		})
	}
}

// TestPutTreeOfDirectories: a tree of directories only (the session
// directories) is made without an archive, with the archive's modes.
func TestPutTreeOfDirectories(t *testing.T) {
	daemon(t)
	sb, _ := create(t, newProvider(t, sandboxdocker.Config{}), newKey(t))
	tree := fstest.MapFS{
		"uploads":   &fstest.MapFile{Mode: fs.ModeDir | 0o755},
		"outputs/a": &fstest.MapFile{Mode: fs.ModeDir | 0o755},
	}
	if err := sb.(sandbox.TreePutter).PutTree(t.Context(), "/mnt/session/new", tree); err != nil {
		t.Fatalf("PutTree: %v", err)
	}
	got := mustExec(t, sb, "cd /mnt/session/new && stat -c '%n %a %F' uploads outputs outputs/a")
	want := "uploads 755 directory\noutputs 755 directory\noutputs/a 755 directory\n"
	if got != want {
		t.Errorf("made:\n%s\nwant:\n%s", got, want)
	}
	if err := sb.(sandbox.TreePutter).PutTree(t.Context(), "/etc/x", tree); !errors.Is(err, sandbox.ErrPathEscape) {
		t.Errorf("PutTree outside the session paths = %v, want ErrPathEscape", err)
	}
}
