package sandboxtest

import (
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// shellKeysTimeout bounds each call of the shell key tests: two calls that
// wait for each other finish long before it unless they were serialized.
const shellKeysTimeout = 20 * time.Second

// shellOf returns sb's persistent shells, skipping the test when sb keeps
// none ([sandbox.Shell]: the bash tool runs one-off commands there).
func shellOf(t *testing.T, sb sandbox.Sandbox) sandbox.Shell {
	t.Helper()
	sh, ok := sb.(sandbox.Shell)
	if !ok {
		t.Skip("the sandbox keeps no persistent shell (sandbox.Shell)")
	}
	return sh
}

// shellExec runs command in the persistent shell of key and requires exit
// code 0; it reports its stdout. It may run on any goroutine: it reports
// failures with t.Errorf.
func shellExec(t *testing.T, sh sandbox.Shell, key, command string) (string, bool) {
	t.Helper()
	ctx := sandbox.WithShellKey(t.Context(), key)
	res, err := sh.ShellExec(ctx, sandbox.ExecRequest{Command: command, Timeout: shellKeysTimeout})
	switch {
	case err != nil:
		t.Errorf("ShellExec(%q) in shell %q = %v, want no error", command, key, err)
		return "", false
	case res.TimedOut:
		t.Errorf("ShellExec(%q) in shell %q timed out after %v (stdout %q, stderr %q)", command, key, shellKeysTimeout, res.Stdout, res.Stderr)
		return "", false
	case res.ExitCode != 0:
		t.Errorf("ShellExec(%q) in shell %q exit code = %d, want 0 (stdout %q, stderr %q)", command, key, res.ExitCode, res.Stdout, res.Stderr)
		return "", false
	}
	return string(res.Stdout), true
}

// testShellKeysApart checks that each shell key has its own shell: the
// working directory and variables one key's commands leave behind are not
// another's, and every key's shell starts in the workspace.
func (s *suite) testShellKeysApart(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	sh := shellOf(t, sb)
	if _, ok := shellExec(t, sh, "thread-a", "cd /tmp && export X=a"); !ok {
		t.FailNow()
	}
	want := sb.Root() + "\n\n"
	for _, key := range []string{"thread-b", ""} {
		if got, ok := shellExec(t, sh, key, `pwd; echo "$X"`); ok && got != want {
			t.Errorf("shell %q after shell %q ran cd /tmp && export X=a: pwd; echo $X printed %q, want the workspace and X unset: %q", key, "thread-a", got, want)
		}
	}
	if got, ok := shellExec(t, sh, "thread-a", `pwd; echo "$X"`); ok && got != "/tmp\na\n" {
		t.Errorf("shell %q after other shells ran: pwd; echo $X printed %q, want its own state %q", "thread-a", got, "/tmp\na\n")
	}
}

// testShellKeysConcurrent checks that commands of two shell keys run at
// once: each waits for a file the other creates, so with one shared shell
// (calls serialized) both would time out.
func (s *suite) testShellKeysConcurrent(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	sh := shellOf(t, sb)
	a, b := path.Join(sb.Root(), "a"), path.Join(sb.Root(), "b")
	commands := map[string]string{
		"thread-a": "until [ -f " + b + " ]; do sleep 0.05; done; touch " + a,
		"thread-b": "touch " + b + "; until [ -f " + a + " ]; do sleep 0.05; done",
	}
	start := time.Now()
	var wg sync.WaitGroup
	for key, command := range commands {
		wg.Go(func() { shellExec(t, sh, key, command) })
	}
	wg.Wait()
	if t.Failed() {
		t.Fatalf("two shell keys waiting for each other did not both finish (after %v): their calls must run concurrently", time.Since(start))
	}
}

// testShellKeysClose checks that closing the sandbox value (io.Closer, as
// the SessionManager does when it drops it) ends the shells of every key,
// with what they started.
func (s *suite) testShellKeysClose(t *testing.T) {
	key := newKey(t)
	p := s.client(t)
	sb, ref := s.create(t, p, key)
	sh := shellOf(t, sb)
	closer, ok := sb.(io.Closer)
	if !ok {
		t.Skip("the sandbox value is no io.Closer")
	}
	var pids []string
	for _, k := range []string{"", "thread-a", "thread-b"} {
		out, ok := shellExec(t, sh, k, "sleep 300 >/dev/null 2>&1 & echo $$ $!")
		if !ok {
			t.FailNow()
		}
		fields := strings.Fields(out)
		for _, f := range fields {
			if _, err := strconv.Atoi(f); err != nil || len(fields) != 2 {
				t.Fatalf("shell %q: echo $$ $! printed %q, want two PIDs", k, out)
			}
		}
		pids = append(pids, fields...)
	}
	if err := closer.Close(); err != nil {
		t.Fatalf("Close() = %v, want no error", err)
	}
	// A fresh client looks: the closed value's own commands are not the
	// subject.
	other, err := s.client(t).Attach(t.Context(), key, ref)
	if err != nil {
		t.Fatalf("Attach(%v) = %v, want no error", ref, err)
	}
	if c, ok := other.(io.Closer); ok {
		t.Cleanup(func() { _ = c.Close() })
	}
	check := aliveScript + "for p in " + strings.Join(pids, " ") + "; do alive $p && echo $p; done; true"
	var survivors string
	waitFor(t, killDeadline, func() bool {
		survivors = run(t, other, check)
		return survivors == ""
	}, "the closed sandbox's shells to end")
	if survivors != "" {
		t.Errorf("processes alive after Close: %q (shells and their background jobs, default first: %v)", survivors, pids)
	}
}
