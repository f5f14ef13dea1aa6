package shellsession_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellsession"
	"github.com/mangohq/mango/internal/poll"
)

// shells are the shells the session must work with: dash (Debian's
// /bin/sh), bash and busybox's ash, where installed.
func shells(t *testing.T) map[string][]string {
	t.Helper()
	found := map[string][]string{}
	for name, argv := range map[string][]string{
		"sh":      {"/bin/sh"},
		"bash":    {"/bin/bash", "--noprofile", "--norc"},
		"busybox": {"busybox", "sh"},
	} {
		if p, err := exec.LookPath(argv[0]); err == nil {
			found[name] = append([]string{p}, argv[1:]...)
		}
	}
	if len(found) == 0 {
		t.Skip("no shell found")
	}
	return found
}

func newSession(t *testing.T, argv []string, opts shellsession.Options) (*shellsession.Session, string) {
	t.Helper()
	root := t.TempDir()
	opts.Root = root
	s := shellsession.New(func(context.Context) (shellsession.Process, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = root
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + root, "LANG=C.UTF-8"}
		return shellsession.StartCommand(cmd)
	}, opts)
	t.Cleanup(s.Close)
	return s, root
}

func run(t *testing.T, s *shellsession.Session, cmd string) *sandbox.ShellResult {
	t.Helper()
	return runWith(t, s, cmd, 20*time.Second)
}

func runWith(t *testing.T, s *shellsession.Session, cmd string, timeout time.Duration) *sandbox.ShellResult {
	t.Helper()
	res, err := s.Run(context.Background(), sandbox.ExecRequest{Command: cmd}, timeout, 1<<20)
	if err != nil {
		t.Fatalf("run %q: %v", cmd, err)
	}
	return res
}

func TestSessionKeepsStateAcrossCalls(t *testing.T) {
	t.Parallel()
	for name, argv := range shells(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, root := newSession(t, argv, shellsession.Options{})
			if res := run(t, s, "mkdir -p sub/dir && cd sub/dir && export GREETING=hello && f() { echo fn; }"); res.ExitCode != 0 {
				t.Fatalf("setup: exit %d, stderr %q", res.ExitCode, res.Stderr)
			}
			res := run(t, s, `pwd; echo "$GREETING"; f`)
			want := filepath.Join(root, "sub/dir") + "\nhello\nfn\n"
			if string(res.Stdout) != want || res.ExitCode != 0 || res.NewShell {
				t.Fatalf("second call: stdout %q exit %d new shell %v; want %q, 0, false", res.Stdout, res.ExitCode, res.NewShell, want)
			}
			if res.Dir != filepath.Join(root, "sub/dir") {
				t.Errorf("Dir = %q, want %q", res.Dir, filepath.Join(root, "sub/dir"))
			}
		})
	}
}

func TestSessionOutputAndStatus(t *testing.T) {
	t.Parallel()
	for name, argv := range shells(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newSession(t, argv, shellsession.Options{})
			for _, tc := range []struct {
				cmd            string
				stdout, stderr string
				code           int
			}{
				{cmd: "printf 'no newline'", stdout: "no newline"},
				{cmd: "echo out; echo err >&2; exit_with() { return $1; }; exit_with 7", stdout: "out\n", stderr: "err\n", code: 7},
				{cmd: "printf '\\n\\n'", stdout: "\n\n"},
				{cmd: "cat", stdout: ""}, // stdin is /dev/null: no hang
				{cmd: "echo '__MANGO_0123456789abcdef01234567__0 /'", stdout: "__MANGO_0123456789abcdef01234567__0 /\n"},
				{cmd: "echo it''s quoted \"$((1+2))\"", stdout: "its quoted 3\n"},
				{cmd: "cat <<EOF\nheredoc $((2*3))\nEOF", stdout: "heredoc 6\n"},
				{cmd: "# only a comment", stdout: ""},
				{cmd: "echo trailing \\", stdout: "trailing\n"},
			} {
				res := run(t, s, tc.cmd)
				if string(res.Stdout) != tc.stdout || string(res.Stderr) != tc.stderr || res.ExitCode != tc.code {
					t.Errorf("%q: stdout %q stderr %q exit %d; want %q %q %d", tc.cmd, res.Stdout, res.Stderr, res.ExitCode, tc.stdout, tc.stderr, tc.code)
				}
				if res.ShellEnded || res.NewShell {
					t.Errorf("%q: shell ended %v, new shell %v; want the same shell", tc.cmd, res.ShellEnded, res.NewShell)
				}
			}
		})
	}
}

func TestSessionSurvivesRedirectionsAndSyntaxErrors(t *testing.T) {
	t.Parallel()
	for name, argv := range shells(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, root := newSession(t, argv, shellsession.Options{})
			run(t, s, "X=kept")
			if res := run(t, s, "exec >"+filepath.Join(root, "redirected")+"; echo to-file"); res.ExitCode != 0 {
				t.Fatalf("exec redirection: exit %d stderr %q", res.ExitCode, res.Stderr)
			}
			if res := run(t, s, `echo "$X"`); string(res.Stdout) != "kept\n" {
				t.Fatalf("after exec >file: stdout %q, want %q (the shell's output must be restored)", res.Stdout, "kept\n")
			}
			res := run(t, s, "echo before; if then")
			if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "before") {
				t.Fatalf("syntax error: exit %d stdout %q; want a failure and none of the command run", res.ExitCode, res.Stdout)
			}
			// Whether or not this shell survived its syntax error, the next
			// call works.
			if res := run(t, s, "echo next"); string(res.Stdout) != "next\n" {
				t.Fatalf("after a syntax error: stdout %q", res.Stdout)
			}
		})
	}
}

func TestSessionTimeoutReplacesTheShellInItsDirectory(t *testing.T) {
	t.Parallel()
	for name, argv := range shells(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, root := newSession(t, argv, shellsession.Options{})
			run(t, s, "mkdir d && cd d && V=1")
			start := time.Now()
			res := runWith(t, s, "echo started; sleep 30", 300*time.Millisecond)
			if !res.TimedOut || res.ExitCode != -1 || !res.ShellEnded || string(res.Stdout) != "started\n" {
				t.Fatalf("timeout: %+v; want TimedOut, exit -1, ShellEnded, the output so far", res)
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("a 300ms timeout took %s", time.Since(start))
			}
			res = run(t, s, `pwd; echo "V=$V"`)
			if want := filepath.Join(root, "d") + "\nV=\n"; string(res.Stdout) != want || !res.NewShell {
				t.Fatalf("after a timeout: stdout %q new shell %v; want %q in a new shell", res.Stdout, res.NewShell, want)
			}
			if res := run(t, s, "echo again"); res.NewShell {
				t.Fatal("the call after the replacement reports a new shell again")
			}
		})
	}
}

func TestSessionCommandEndingTheShell(t *testing.T) {
	t.Parallel()
	for name, argv := range shells(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newSession(t, argv, shellsession.Options{})
			res := run(t, s, "echo bye; exit 3")
			if !res.ShellEnded || res.ExitCode != 3 || string(res.Stdout) != "bye\n" {
				t.Fatalf("exit 3: %+v; want ShellEnded, exit 3, stdout bye", res)
			}
			res = run(t, s, "echo hi")
			if !res.NewShell || string(res.Stdout) != "hi\n" {
				t.Fatalf("after exit: %+v; want a new shell", res)
			}
		})
	}
}

func TestSessionRestartClearsState(t *testing.T) {
	t.Parallel()
	s, root := newSession(t, []string{"/bin/sh"}, shellsession.Options{})
	run(t, s, "mkdir d; cd d; export V=1")
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := run(t, s, `pwd; echo "V=$V"`)
	if want := root + "\nV=\n"; string(res.Stdout) != want || res.NewShell {
		t.Fatalf("after Restart: stdout %q new shell %v; want %q, not reported as a replacement", res.Stdout, res.NewShell, want)
	}
}

func TestSessionCancellationKillsTheCommand(t *testing.T) {
	t.Parallel()
	s, root := newSession(t, []string{"/bin/sh"}, shellsession.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, sandbox.ExecRequest{Command: "touch started; sleep 30; touch finished"}, time.Minute, 1<<20)
		done <- err
	}()
	waitFile(t, filepath.Join(root, "started"))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v, want context.Canceled", err)
	}
	if res := run(t, s, "echo ok"); string(res.Stdout) != "ok\n" || !res.NewShell {
		t.Fatalf("after cancel: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(root, "finished")); err == nil {
		t.Fatal("the cancelled command went on")
	}
}

func TestSessionSerializesCalls(t *testing.T) {
	t.Parallel()
	s, root := newSession(t, []string{"/bin/sh"}, shellsession.Options{})
	var wg sync.WaitGroup
	var first *sandbox.ShellResult
	wg.Go(func() { first = run(t, s, "touch busy; sleep 0.3; rm busy; echo first") })
	waitFile(t, filepath.Join(root, "busy"))
	second := run(t, s, "test -e busy && echo overlapped || echo second")
	wg.Wait()
	if string(first.Stdout) != "first\n" || string(second.Stdout) != "second\n" {
		t.Fatalf("outputs %q and %q; want first and second, each alone", first.Stdout, second.Stdout)
	}
}

func TestSessionIsolatedAndEnv(t *testing.T) {
	t.Parallel()
	s, root := newSession(t, []string{"/bin/sh"}, shellsession.Options{Isolated: true})
	res, err := s.Run(context.Background(), sandbox.ExecRequest{Command: `mkdir -p x; cd x; V=1; echo "$E"`, Env: map[string]string{"E": "it's"}}, time.Minute, 1<<20)
	if err != nil || string(res.Stdout) != "it's\n" {
		t.Fatalf("isolated run: %v %+v", err, res)
	}
	res = run(t, s, `pwd; echo "V=$V E=$E"`)
	if want := root + "\nV= E=\n"; string(res.Stdout) != want {
		t.Fatalf("isolated: stdout %q, want %q (nothing carries over)", res.Stdout, want)
	}
	if _, err := s.Run(context.Background(), sandbox.ExecRequest{Command: "true", Env: map[string]string{"A B": "x"}}, time.Minute, 1<<20); err == nil {
		t.Fatal("an invalid variable name was accepted")
	}
}

func TestSessionCapsOutput(t *testing.T) {
	t.Parallel()
	s, _ := newSession(t, []string{"/bin/sh"}, shellsession.Options{})
	res, err := s.Run(context.Background(), sandbox.ExecRequest{Command: "i=0; while [ $i -lt 2000 ]; do echo 0123456789; i=$((i+1)); done; echo end >&2"}, time.Minute, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1000 || !res.Truncated || string(res.Stderr) != "end\n" || res.ExitCode != 0 {
		t.Fatalf("capped: %d bytes, truncated %v, stderr %q, exit %d", len(res.Stdout), res.Truncated, res.Stderr, res.ExitCode)
	}
}

func waitFile(t *testing.T, name string) {
	t.Helper()
	poll.Until(t, 20*time.Second, name+" to appear", func() (bool, string) {
		_, err := os.Stat(name)
		return err == nil, fmt.Sprint(err)
	})
}

func TestSessionEndsAnIdleShell(t *testing.T) {
	t.Parallel()
	s, root := newSession(t, []string{"/bin/sh"}, shellsession.Options{IdleTimeout: 50 * time.Millisecond})
	res := run(t, s, "mkdir d; cd d; V=1; echo $$ > "+filepath.Join(root, "pid"))
	if res.ExitCode != 0 {
		t.Fatalf("setup: %+v", res)
	}
	pidFile, err := os.ReadFile(filepath.Join(root, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	// The idle shell's process goes away.
	proc := "/proc/" + strings.TrimSpace(string(pidFile))
	poll.Until(t, 20*time.Second, "the idle shell's process "+proc+" to end", func() (bool, string) {
		_, err := os.Stat(proc)
		return err != nil, "still running"
	})
	res = run(t, s, `pwd; echo "V=$V"`)
	if want := filepath.Join(root, "d") + "\nV=\n"; string(res.Stdout) != want || !res.NewShell {
		t.Fatalf("after the idle end: stdout %q new shell %v; want %q in a new shell", res.Stdout, res.NewShell, want)
	}
}

func TestSessionStartsEarly(t *testing.T) {
	t.Parallel()
	starts := 0
	root := t.TempDir()
	s := shellsession.New(func(context.Context) (shellsession.Process, error) {
		starts++
		cmd := exec.Command("/bin/sh")
		cmd.Dir = root
		return shellsession.StartCommand(cmd)
	}, shellsession.Options{Root: root})
	t.Cleanup(s.Close)
	for range 2 {
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	res := run(t, s, "echo ok")
	if string(res.Stdout) != "ok\n" || res.NewShell || starts != 1 {
		t.Fatalf("after Start: %+v, %d shells started; want the started shell to serve the call", res, starts)
	}
}
