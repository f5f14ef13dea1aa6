package shellsession_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellsession"
	"github.com/mangohq/mango/internal/poll"
)

// newKeyed returns sessions of /bin/sh per key, at most limit besides the
// default one, in a fresh root.
func newKeyed(t *testing.T, limit int) (*shellsession.Keyed, string) {
	t.Helper()
	root := t.TempDir()
	k := shellsession.NewKeyed(func() *shellsession.Session {
		return shellsession.New(func(context.Context) (shellsession.Process, error) {
			cmd := exec.Command("/bin/sh")
			cmd.Dir = root
			cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + root}
			return shellsession.StartCommand(cmd)
		}, shellsession.Options{Root: root})
	}, limit)
	t.Cleanup(k.Close)
	return k, root
}

// keyedRun runs cmd in the shell of key and requires exit code 0.
func keyedRun(t *testing.T, k *shellsession.Keyed, key, cmd string) *sandbox.ShellResult {
	t.Helper()
	res, err := k.Run(context.Background(), key, sandbox.ExecRequest{Command: cmd}, 20*time.Second, 1<<20)
	if err != nil {
		t.Fatalf("run %q in shell %q: %v", cmd, key, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("run %q in shell %q: exit %d, stderr %q", cmd, key, res.ExitCode, res.Stderr)
	}
	return res
}

// wantState runs pwd and echo $V in the shell of key and checks the output
// and whether the shell is a replacement.
func wantState(t *testing.T, k *shellsession.Keyed, key, dir, v string, newShell bool) {
	t.Helper()
	res := keyedRun(t, k, key, `pwd; echo "$V"`)
	if want := dir + "\n" + v + "\n"; string(res.Stdout) != want || res.NewShell != newShell {
		t.Errorf("shell %q: pwd; echo $V printed %q, new shell %v; want %q, %v", key, res.Stdout, res.NewShell, want, newShell)
	}
}

func TestKeyedEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	k, root := newKeyed(t, 2)
	keyedRun(t, k, "", "export V=default")
	for _, key := range []string{"a", "b"} {
		keyedRun(t, k, key, "mkdir "+key+" && cd "+key+" && export V="+key)
	}
	keyedRun(t, k, "a", "true") // b is now the least recently used
	keyedRun(t, k, "c", "export V=c")

	wantState(t, k, "a", filepath.Join(root, "a"), "a", false)
	wantState(t, k, "", root, "default", false) // the default shell is never evicted
	// b was evicted: a new shell in its last directory, reported as such;
	// it evicts c, now the least recently used.
	wantState(t, k, "b", filepath.Join(root, "b"), "", true)
	wantState(t, k, "c", root, "", true)
	wantState(t, k, "b", filepath.Join(root, "b"), "", false)
}

func TestKeyedEvictionSparesRunningCall(t *testing.T) {
	t.Parallel()
	k, root := newKeyed(t, 2)
	type result struct {
		res *sandbox.ShellResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := k.Run(context.Background(), "busy", sandbox.ExecRequest{Command: "until [ -f go ]; do sleep 0.05; done; echo done"}, 20*time.Second, 1<<20)
		done <- result{res, err}
	}()
	poll.Until(t, 10*time.Second, "the busy shell's call to start", func() (bool, string) {
		return !k.Get("busy").Idle(), "idle"
	})
	keyedRun(t, k, "idle", "export V=idle") // more recent than busy, but idle
	keyedRun(t, k, "new", "touch go")       // one too many: idle goes
	select {
	case r := <-done:
		if r.err != nil || string(r.res.Stdout) != "done\n" || r.res.ShellEnded {
			t.Errorf("call running during an eviction: %+v, %v; want done, its shell alive", r.res, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("call running during an eviction did not finish")
	}
	wantState(t, k, "idle", root, "", true)
}

func TestKeyedClose(t *testing.T) {
	t.Parallel()
	k, root := newKeyed(t, 2)
	keyedRun(t, k, "a", "echo $$ > a.pid")
	keyedRun(t, k, "", "echo $$ > default.pid")
	if err := k.Restart(context.Background(), "never-used"); err != nil {
		t.Errorf("Restart of a key without a shell = %v, want nil", err)
	}
	k.Close()
	for _, key := range []string{"a", "", "new"} {
		if _, err := k.Run(context.Background(), key, sandbox.ExecRequest{Command: "true"}, time.Second, 1024); !errors.Is(err, shellsession.ErrClosed) {
			t.Errorf("Run in shell %q after Close = %v, want ErrClosed", key, err)
		}
	}
	for _, name := range []string{"a.pid", "default.pid"} {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		pid := strings.TrimSpace(string(data))
		poll.Until(t, 10*time.Second, "shell "+pid+" to end after Close", func() (bool, string) {
			_, err := os.Stat("/proc/" + pid)
			return errors.Is(err, os.ErrNotExist), "alive"
		})
	}
}
