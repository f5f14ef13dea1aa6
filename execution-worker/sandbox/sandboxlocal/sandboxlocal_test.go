package sandboxlocal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal/localtest"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/testenv"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	cfg := sandboxlocal.Config{Root: filepath.Join(t.TempDir(), "sandboxes")}
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider {
			t.Helper()
			cfg := cfg
			cfg.Installation = installation
			p, err := sandboxlocal.New(cfg)
			if err != nil {
				t.Fatalf("New(%+v) = %v", cfg, err)
			}
			return p
		},
		Unlabel: localtest.StripInstallation,
		Spec:    sandbox.Spec{Env: map[string]string{"MANGO_SPEC_VAR": "from the spec"}},
		SessionDirHidden: func(p sandbox.Provider) string {
			return sandboxlocal.SessionPathsUnavailable(p.(*sandboxlocal.Provider))
		},
	})
}

// testInstallation is the installation id of the tests' providers.
const testInstallation = "test-installation"

// newProvider returns a provider over a fresh root.
func newProvider(t *testing.T) *sandboxlocal.Provider {
	t.Helper()
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: filepath.Join(t.TempDir(), "sandboxes"), Installation: testInstallation})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return p
}

func create(t *testing.T, p *sandboxlocal.Provider, key string) (sandbox.Sandbox, sandbox.Ref) {
	t.Helper()
	sb, ref, err := p.Create(t.Context(), key, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create(%q) = %v", key, err)
	}
	t.Cleanup(func() { _ = p.DestroyRef(context.Background(), ref) })
	return sb, ref
}

func TestLayoutAndModes(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb, ref := create(t, p, "sesn_modes")
	want := filepath.Join(p.Root(), sandbox.KeyHash("sesn_modes"))
	if ref.ID != want || sb.Root() != want {
		t.Errorf("Ref.ID = %q, Root() = %q; want both %q", ref.ID, sb.Root(), want)
	}
	for path, mode := range map[string]os.FileMode{
		p.Root():         0o700,
		ref.ID:           0o700,
		ref.ID + ".json": 0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("Stat(%s) = %v", path, err)
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("mode of %s = %v, want %v", path, got, mode)
		}
	}
	data, err := os.ReadFile(ref.ID + ".json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "sesn_modes") {
		t.Errorf("ownership marker %s contains the raw session key: %s", ref.ID+".json", data)
	}
}

func TestEnvironmentCleared(t *testing.T) {
	const canary = "MANGO_TEST_CANARY_7f3a"
	t.Setenv(canary, "leaked") // no t.Parallel: Setenv
	p := newProvider(t)
	sb, _ := create(t, p, "sesn_env")
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "env", Env: map[string]string{"EXTRA": "1"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(env) = %+v, %v", res, err)
	}
	vars := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSuffix(string(res.Stdout), "\n"), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = v
	}
	if _, ok := vars[canary]; ok {
		t.Errorf("the command sees the worker's %s; env =\n%s", canary, res.Stdout)
	}
	want := map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": sb.Root(), "LANG": "C.UTF-8", "EXTRA": "1"}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("command sees %s=%q, want %q", k, vars[k], v)
		}
	}
	// Only what the provider sets, plus what the shell itself exports.
	shellOwn := []string{"PWD", "OLDPWD", "SHLVL", "_"}
	for k := range vars {
		if _, ok := want[k]; !ok && !slices.Contains(shellOwn, k) {
			t.Errorf("command sees unexpected variable %s=%q", k, vars[k])
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    sandboxlocal.Config
		wantErr []string // variable names the error must mention
	}{
		{
			name: "defaults",
			want: sandboxlocal.Config{Root: sandboxlocal.DefaultRoot(), ExecTimeout: 2 * time.Minute, MaxOutput: 1 << 20},
		},
		{
			name: "all set",
			env:  map[string]string{sandboxlocal.EnvRoot: "/srv/mango", sandboxlocal.EnvExecTimeout: "30s", sandboxlocal.EnvMaxOutput: "4096"},
			want: sandboxlocal.Config{Root: "/srv/mango", ExecTimeout: 30 * time.Second, MaxOutput: 4096},
		},
		{name: "relative root", env: map[string]string{sandboxlocal.EnvRoot: "rel/dir"}, wantErr: []string{sandboxlocal.EnvRoot}},
		{name: "bad timeout", env: map[string]string{sandboxlocal.EnvExecTimeout: "soon"}, wantErr: []string{sandboxlocal.EnvExecTimeout}},
		{name: "zero timeout", env: map[string]string{sandboxlocal.EnvExecTimeout: "0s"}, wantErr: []string{sandboxlocal.EnvExecTimeout}},
		{name: "negative timeout", env: map[string]string{sandboxlocal.EnvExecTimeout: "-1m"}, wantErr: []string{sandboxlocal.EnvExecTimeout}},
		{name: "bad size", env: map[string]string{sandboxlocal.EnvMaxOutput: "1MiB"}, wantErr: []string{sandboxlocal.EnvMaxOutput}},
		{name: "zero size", env: map[string]string{sandboxlocal.EnvMaxOutput: "0"}, wantErr: []string{sandboxlocal.EnvMaxOutput}},
		{
			name:    "every bad variable reported",
			env:     map[string]string{sandboxlocal.EnvExecTimeout: "x", sandboxlocal.EnvMaxOutput: "-1"},
			wantErr: []string{sandboxlocal.EnvExecTimeout, sandboxlocal.EnvMaxOutput},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := sandboxlocal.ConfigFromEnv(func(k string) string { return tt.env[k] })
			if len(tt.wantErr) == 0 {
				if err != nil || got != tt.want {
					t.Errorf("ConfigFromEnv() = %+v, %v; want %+v, nil", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ConfigFromEnv() = %+v, nil; want an error naming %v", got, tt.wantErr)
			}
			for _, name := range tt.wantErr {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("ConfigFromEnv() error %q does not name %s", err, name)
				}
			}
		})
	}
}

func TestFactory(t *testing.T) {
	root := filepath.Join(t.TempDir(), "from-env")
	t.Setenv(sandboxlocal.EnvRoot, root) // no t.Parallel: Setenv
	p, err := sandboxlocal.Factory.New(t.Context(), testInstallation, os.Getenv)
	if err != nil {
		t.Fatalf("Factory.New() = %v", err)
	}
	if got := p.(*sandboxlocal.Provider).Root(); got != root {
		t.Errorf("Root() = %q, want %q from %s", got, root, sandboxlocal.EnvRoot)
	}

	t.Setenv(sandboxlocal.EnvMaxOutput, "lots")
	if _, err := sandboxlocal.Factory.New(t.Context(), testInstallation, os.Getenv); err == nil || !strings.Contains(err.Error(), sandboxlocal.EnvMaxOutput) {
		t.Errorf("Factory.New() with a bad %s = %v, want an error naming it", sandboxlocal.EnvMaxOutput, err)
	}

	t.Setenv(sandboxlocal.EnvMaxOutput, "")
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(sandboxlocal.EnvRoot, file)
	if _, err := sandboxlocal.Factory.New(t.Context(), testInstallation, os.Getenv); err == nil || !strings.Contains(err.Error(), sandboxlocal.EnvRoot) {
		t.Errorf("Factory.New() with a file as root = %v, want an error naming %s", err, sandboxlocal.EnvRoot)
	}
}

func TestRootMustBePrivate(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := sandboxlocal.New(sandboxlocal.Config{Root: root, Installation: testInstallation}); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("New() with a world-writable root = %v, want an error", err)
	}
}

func TestAttachRejectsForeignPaths(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	_, ref := create(t, p, "sesn_owner")
	other := newProvider(t) // another root
	outside := filepath.Join(t.TempDir(), sandbox.KeyHash("sesn_owner"))
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		p    *sandboxlocal.Provider
		ref  sandbox.Ref
	}{
		{"another root", other, ref},
		{"path outside the root", p, sandbox.Ref{Provider: "local", ID: outside}},
		{"not a key hash", p, sandbox.Ref{Provider: "local", ID: p.Root()}},
		{"dot-dot", p, sandbox.Ref{Provider: "local", ID: p.Root() + "/../" + filepath.Base(p.Root()) + "/" + sandbox.KeyHash("sesn_owner")}},
		{"other provider", p, sandbox.Ref{Provider: "docker", ID: ref.ID}},
	}
	for _, tt := range tests {
		if _, err := tt.p.Attach(t.Context(), "sesn_owner", tt.ref); !errors.Is(err, sandbox.ErrNotOwned) {
			t.Errorf("%s: Attach(%v) = %v, want ErrNotOwned", tt.name, tt.ref, err)
		}
		if err := tt.p.DestroyRef(t.Context(), tt.ref); !errors.Is(err, sandbox.ErrNotOwned) {
			t.Errorf("%s: DestroyRef(%v) = %v, want ErrNotOwned", tt.name, tt.ref, err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a rejected DestroyRef removed %s: %v", outside, err)
	}

	// A workspace whose marker is missing proves no ownership.
	if err := os.Remove(ref.ID + ".json"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Attach(t.Context(), "sesn_owner", ref); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach without a marker = %v, want ErrNotOwned", err)
	}
}

func TestBackgroundProcessesDoNotOutliveExec(t *testing.T) {
	t.Parallel()
	sb, _ := create(t, newProvider(t), "sesn_background")
	start := time.Now()
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "sleep 30 & echo $!"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Exec with a background child holding stdout took %v, want it to return when the shell exits", elapsed)
	}
	pid := strings.TrimSpace(string(res.Stdout))
	poll.Until(t, 2*time.Second, "background process "+pid+" to end after Exec returned", func() (bool, string) {
		state, err := os.ReadFile("/proc/" + pid + "/stat")
		return err != nil || strings.Contains(string(state), ") Z "), "running: " + string(state)
	})
}

func TestDestroyKillsRunningCommand(t *testing.T) {
	t.Parallel()
	sb, _ := create(t, newProvider(t), "sesn_destroy_running")
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), sandbox.ExecRequest{Command: "touch started; sleep 30"})
		done <- err
	}()
	poll.Until(t, 5*time.Second, "the command to start", func() (bool, string) {
		_, err := os.Stat(filepath.Join(sb.Root(), "started"))
		return err == nil, fmt.Sprint(err)
	})
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, sandbox.ErrDestroyed) {
			t.Errorf("Exec interrupted by Destroy = %v, want ErrDestroyed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Exec still running 5s after Destroy")
	}
	if _, err := os.Stat(sb.Root()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat(workspace) after Destroy = %v, want not exist", err)
	}
}

func TestListReportsMarkerWithoutWorkspace(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	_, ref := create(t, p, "sesn_half")
	// Simulate a crash between the marker and the workspace.
	if err := os.Remove(ref.ID); err != nil {
		t.Fatal(err)
	}
	owned, err := p.List(t.Context())
	if err != nil || len(owned) != 1 || owned[0].Ref != ref || owned[0].KeyHash != sandbox.KeyHash("sesn_half") || owned[0].CreatedAt.IsZero() {
		t.Fatalf("List() = %+v, %v; want exactly %v with its key hash and creation time", owned, err, ref)
	}
	if err := p.DestroyRef(t.Context(), ref); err != nil {
		t.Fatalf("DestroyRef() = %v", err)
	}
	if owned, err := p.List(t.Context()); err != nil || len(owned) != 0 {
		t.Errorf("List() after DestroyRef = %+v, %v; want nothing", owned, err)
	}
}

// BenchmarkExecLocal measures one trivial command through the provider.
func BenchmarkExecLocal(b *testing.B) {
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: filepath.Join(b.TempDir(), "sandboxes"), Installation: testInstallation})
	if err != nil {
		b.Fatal(err)
	}
	sb, _, err := p.Create(b.Context(), "sesn_bench", sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	req := sandbox.ExecRequest{Command: "true"}
	for b.Loop() {
		if res, err := sb.Exec(b.Context(), req); err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec = %+v, %v", res, err)
		}
	}
}

// BenchmarkExecDirect is the baseline: plain os/exec of the same command.
func BenchmarkExecDirect(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		cmd := exec.Command("/bin/sh", "-c", "true")
		cmd.Dir = dir
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestShellEnvironmentAndSessionPaths checks the persistent shell: it gets
// the commands' cleared environment (none of the worker's secrets), and
// sees the session directories at their absolute paths where the host
// allows a private mount namespace.
func TestShellEnvironmentAndSessionPaths(t *testing.T) {
	const canary = "MANGO_API_KEY"
	t.Setenv(canary, "leaked-secret") // no t.Parallel: Setenv
	p := newProvider(t)
	sb, _ := create(t, p, "sesn_shell_env")
	shell := sb.(sandbox.Shell)
	res, err := shell.ShellExec(t.Context(), sandbox.ExecRequest{Command: "env"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("ShellExec(env) = %+v, %v", res, err)
	}
	if strings.Contains(string(res.Stdout), "leaked-secret") || strings.Contains(string(res.Stdout), canary) {
		t.Errorf("the shell sees the worker's %s; env =\n%s", canary, res.Stdout)
	}
	if err := sb.WriteFile(t.Context(), sandbox.UploadsDir+"/in.txt", []byte("input\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = shell.ShellExec(t.Context(), sandbox.ExecRequest{Command: "cat /mnt/session/uploads/in.txt && mkdir -p /mnt/session/outputs && echo made > /mnt/session/outputs/out.txt && id -u"})
	if err != nil {
		t.Fatal(err)
	}
	if !sandboxlocal.SessionPathsVisible(p) {
		testenv.Unavailable(t, "this host gives no private mount namespace (%s); commands reach the session directories under ./mnt/session only", sandboxlocal.SessionPathsUnavailable(p))
	}
	if res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "input\n") {
		t.Fatalf("absolute /mnt/session paths in the shell: %+v (stderr %q)", res, res.Stderr)
	}
	got, err := sb.ReadFile(t.Context(), sandbox.OutputsDir+"/out.txt")
	if err != nil || string(got) != "made\n" {
		t.Fatalf("ReadFile(outputs/out.txt) = %q, %v; want what the shell wrote", got, err)
	}
	// The host's /mnt is not changed: the mount is the shell's own.
	if _, err := os.Stat(sandbox.SessionDir); err == nil {
		t.Errorf("%s exists on the host; the session view must stay private to the shell", sandbox.SessionDir)
	}
}
