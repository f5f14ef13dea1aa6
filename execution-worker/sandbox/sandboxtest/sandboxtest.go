// Package sandboxtest is the conformance suite every sandbox provider runs.
//
// It turns the core lifecycle contract of [sandbox.Provider] into tests: a
// stable name, idempotent and race-safe Create, Attach after a restart with
// ownership checks, command execution with cancellation, timeouts and bounded
// output, confined file access, idempotent Destroy, and isolation between
// sessions. A provider's own test calls [Run]:
//
//	func TestConformance(t *testing.T) {
//		sandboxtest.Run(t, sandboxtest.Harness{
//			New: func(t *testing.T, installation string) sandbox.Provider { ... },
//		})
//	}
//
// Every client the suite makes belongs to an installation: one id for the
// whole run, and two fresh ones for the installation subtests, which check
// that two installations sharing one backend never list, attach, destroy
// or reconcile away each other's sandboxes, and (with [Harness.Unlabel])
// how legacy resources without an installation id are adopted or left
// alone.
//
// Optional capabilities ([sandbox.Lister], [sandbox.Destroyer], and
// [sandbox.FileTransfer] on the sandbox) are checked only when the provider
// implements them; otherwise their subtests are skipped. The transfer
// subtests stream a 50 MiB file each way (checking that the test process's
// heap does not grow by half of it), copy a 500-file tree with
// [sandbox.PutTree], place and replace a read-only tree under the session
// directory as skills are placed ([sandbox.PutReadOnlyTree], its script
// run by a command), exercise the session paths ([sandbox.SessionDir]),
// escapes, removal and missing files, and the memory root
// ([sandbox.MemoryDir]) as memory stores use it (files placed under
// /mnt/memory/<name>, seen and changed by a command at their absolute
// paths, listed back). Sandboxes that keep persistent shells
// ([sandbox.Shell]) are checked to keep one per shell key
// ([sandbox.WithShellKey]): each key's working directory and variables
// its own, two keys' calls running at once, and every key's shell ended
// when the sandbox value is closed. Commands assume the POSIX environment the built-in toolset needs:
// /bin/sh, find, grep, and the usual coreutils (cat, head, printf, sed, cut,
// wc, ln, sleep, kill).
//
// Providers tested against an in-process fake also call the checks that
// need to see the fake's side: [CheckStreamingTransfer] (uploads stream,
// with the process's allocations bounded) and [CheckSessionPaths] (the
// session and /workspace paths of a fresh sandbox).
//
// Subtests run one after another, not in parallel: several of them measure
// how quickly a command is killed, and they must not be slowed down by their
// siblings on a small machine or a shared Docker daemon.
package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Harness describes the provider under test.
type Harness struct {
	// New returns a fresh client of the provider, built for installation,
	// sharing no memory with earlier ones (as after a worker restart).
	// Every client must reach the same backend (the same root directory,
	// Docker daemon or service), whatever its installation, so that a
	// sandbox created through one can be attached through another of the
	// same installation, and installations are kept apart by their ids
	// alone.
	New func(t *testing.T, installation string) sandbox.Provider
	// Unlabel, when set, removes the installation id from the resource
	// ref names, as if a version before installation ids had created it
	// (for example by editing a fake's metadata). Without it the legacy
	// subtest is skipped; the provider's own tests should cover legacy
	// resources then.
	Unlabel func(t *testing.T, ref sandbox.Ref)
	// Spec is used for every Create. Variables in Spec.Env must be visible
	// to commands.
	Spec sandbox.Spec
	// FilesInProcess reports a backend that keeps file contents in the
	// test process's memory (an in-process fake service): the large
	// transfer test then checks content but not the process's heap.
	FilesInProcess bool
	// SessionDirHidden, when set, says why commands of p's sandboxes do
	// not see the session roots at their absolute paths
	// ([sandbox.SessionDir], [sandbox.MemoryDir]), or returns "" when they
	// do: a local provider
	// on a host without private mount namespaces. Commands run as the bash
	// tool runs them, in the persistent shell when the sandbox has one
	// ([sandbox.Shell]). Unset: they see it.
	SessionDirHidden func(p sandbox.Provider) string
}

// killDeadline is how long a cancelled or timed-out command may take to
// come back from Exec.
const killDeadline = 2 * time.Second

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("sandboxtest: Harness.New is nil")
	}
	s := &suite{h: h, installation: newInstallation(t)}
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Name", s.testName},
		{"CreateIdempotent", s.testCreateIdempotent},
		{"CreateConcurrent", s.testCreateConcurrent},
		{"AttachAfterRestart", s.testAttachAfterRestart},
		{"AttachOtherSession", s.testAttachOtherSession},
		{"AttachOtherProvider", s.testAttachOtherProvider},
		{"SessionsIsolated", s.testSessionsIsolated},
		{"ExecOutputAndExitCode", s.testExecOutput},
		{"ExecStdin", s.testExecStdin},
		{"ExecEnv", s.testExecEnv},
		{"ExecWorkingDirectory", s.testExecWorkingDirectory},
		{"ExecCancelledBeforeStart", s.testExecPreCancelled},
		{"ExecCancelKillsProcessGroup", s.testExecCancel},
		{"ExecTimeout", s.testExecTimeout},
		{"ExecOutputCap", s.testExecOutputCap},
		{"FilesBinaryRoundTrip", s.testFilesBinary},
		{"FilesNestedAndShared", s.testFilesNested},
		{"PathEscapeLexical", s.testPathEscapeLexical},
		{"PathEscapeSymlink", s.testPathEscapeSymlink},
		{"TransferLargeBinary", s.testTransferLarge},
		{"TransferManyFilesTree", s.testTransferTree},
		{"TransferSessionPaths", s.testTransferSessionPaths},
		{"TransferPathEscape", s.testTransferPathEscape},
		{"TransferRemoveAndMissing", s.testTransferRemoveAndMissing},
		{"TransferSizeMismatch", s.testTransferSizeMismatch},
		{"TransferReadOnlyTree", s.testTransferReadOnlyTree},
		{"TransferMemoryPaths", s.testTransferMemoryPaths},
		{"TransferWalkFiles", s.testTransferWalkFiles},
		{"ShellKeysApart", s.testShellKeysApart},
		{"ShellKeysConcurrent", s.testShellKeysConcurrent},
		{"ShellKeysClose", s.testShellKeysClose},
		{"Toolset", s.testToolset},
		{"Destroy", s.testDestroy},
		{"ListAndDestroyRef", s.testListAndDestroyRef},
		{"InstallationsApart", s.testInstallationsApart},
		{"InstallationsLegacy", s.testInstallationsLegacy},
		{"Capabilities", s.testCapabilities},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.fn)
	}
}

type suite struct {
	h Harness
	// installation is the id of the clients of every subtest but the
	// installation ones.
	installation string
}

// newInstallation returns a fresh installation id, unique to this run.
func newInstallation(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random installation id: %v", err)
	}
	return "conformance-" + hex.EncodeToString(b)
}

// newKey returns a fresh session key, unique to this run.
func newKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random session key: %v", err)
	}
	return "sesn_conformance_" + hex.EncodeToString(b)
}

// client returns a fresh provider client.
func (s *suite) client(t *testing.T) sandbox.Provider {
	t.Helper()
	return s.clientOf(t, s.installation)
}

// clientOf returns a fresh provider client of installation.
func (s *suite) clientOf(t *testing.T, installation string) sandbox.Provider {
	t.Helper()
	p := s.h.New(t, installation)
	if p == nil {
		t.Fatal("Harness.New returned nil")
	}
	return p
}

// create creates the sandbox of key through p and destroys it when the test
// ends (through a fresh client, so the cleanup works even if the test
// destroyed or broke its own sandbox value).
func (s *suite) create(t *testing.T, p sandbox.Provider, key string) (sandbox.Sandbox, sandbox.Ref) {
	t.Helper()
	sb, ref, err := p.Create(t.Context(), key, s.h.Spec)
	if err != nil {
		t.Fatalf("Create(%q) = %v, want no error", key, err)
	}
	if sb == nil {
		t.Fatalf("Create(%q) returned a nil Sandbox", key)
	}
	s.cleanup(t, p, ref, sb)
	return sb, ref
}

func (s *suite) cleanup(t *testing.T, p sandbox.Provider, ref sandbox.Ref, sb sandbox.Sandbox) {
	t.Helper()
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		if d, ok := p.(sandbox.Destroyer); ok {
			err = d.DestroyRef(ctx, ref)
		} else {
			err = sb.Destroy(ctx)
		}
		if err != nil && !errors.Is(err, sandbox.ErrDestroyed) {
			t.Errorf("cleanup: destroy %v: %v", ref, err)
		}
	})
}

// exec runs command and fails the test on an error.
func exec(t *testing.T, sb sandbox.Sandbox, req sandbox.ExecRequest) *sandbox.ExecResult {
	t.Helper()
	res, err := sb.Exec(t.Context(), req)
	if err != nil {
		t.Fatalf("Exec(%q) = %v, want no error", req.Command, err)
	}
	if res == nil {
		t.Fatalf("Exec(%q) returned a nil result and no error", req.Command)
	}
	return res
}

// run runs command, requires exit code 0 and returns its stdout.
func run(t *testing.T, sb sandbox.Sandbox, command string) string {
	t.Helper()
	res := exec(t, sb, sandbox.ExecRequest{Command: command})
	if res.ExitCode != 0 {
		t.Fatalf("Exec(%q) exit code = %d, want 0 (stdout %q, stderr %q)", command, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

func writeFile(t *testing.T, sb sandbox.Sandbox, name string, data []byte) {
	t.Helper()
	if err := sb.WriteFile(t.Context(), name, data, 0o644); err != nil {
		t.Fatalf("WriteFile(%q) = %v, want no error", name, err)
	}
}

func readFile(t *testing.T, sb sandbox.Sandbox, name string) []byte {
	t.Helper()
	data, err := sb.ReadFile(t.Context(), name)
	if err != nil {
		t.Fatalf("ReadFile(%q) = %v, want no error", name, err)
	}
	return data
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

func (s *suite) testName(t *testing.T) {
	a, b := s.client(t).Name(), s.client(t).Name()
	if !nameRE.MatchString(a) {
		t.Errorf("Name() = %q, want a lowercase name matching %s", a, nameRE)
	}
	if a != b {
		t.Errorf("Name() differs between clients: %q and %q", a, b)
	}
}

func (s *suite) testCreateIdempotent(t *testing.T) {
	key := newKey(t)
	p1, p2 := s.client(t), s.client(t)
	sb1, ref1 := s.create(t, p1, key)
	if ref1.Provider != p1.Name() {
		t.Errorf("Create: Ref.Provider = %q, want %q", ref1.Provider, p1.Name())
	}
	if ref1.ID == "" {
		t.Error("Create: Ref.ID is empty")
	}
	if got := sb1.Ref(); got != ref1 {
		t.Errorf("Sandbox.Ref() = %v, want the Ref returned by Create %v", got, ref1)
	}

	sbAgain, refAgain, err := p1.Create(t.Context(), key, s.h.Spec)
	if err != nil {
		t.Fatalf("second Create on the same client = %v, want no error", err)
	}
	if refAgain != ref1 {
		t.Errorf("second Create on the same client: Ref = %v, want %v", refAgain, ref1)
	}
	sb2, ref2, err := p2.Create(t.Context(), key, s.h.Spec)
	if err != nil {
		t.Fatalf("Create from a second client = %v, want no error", err)
	}
	if ref2 != ref1 {
		t.Fatalf("Create from a second client: Ref = %v, want %v", ref2, ref1)
	}

	writeFile(t, sb1, "from-first.txt", []byte("written by client 1"))
	if got := readFile(t, sb2, "from-first.txt"); string(got) != "written by client 1" {
		t.Errorf("second client read %q, want the content written through the first", got)
	}
	writeFile(t, sb2, "from-second.txt", []byte("written by client 2"))
	if got := readFile(t, sbAgain, "from-second.txt"); string(got) != "written by client 2" {
		t.Errorf("first client read %q, want the content written through the second", got)
	}
}

func (s *suite) testCreateConcurrent(t *testing.T) {
	const n = 4
	key := newKey(t)
	clients := make([]sandbox.Provider, n)
	for i := range clients {
		clients[i] = s.client(t)
	}
	sandboxes := make([]sandbox.Sandbox, n)
	refs := make([]sandbox.Ref, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			sandboxes[i], refs[i], errs[i] = clients[i].Create(t.Context(), key, s.h.Spec)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Create #%d = %v, want no error", i, err)
		}
		s.cleanup(t, clients[i], refs[i], sandboxes[i])
	}
	for i := 1; i < n; i++ {
		if refs[i] != refs[0] {
			t.Fatalf("concurrent Create #%d: Ref = %v, want %v (one resource per key)", i, refs[i], refs[0])
		}
	}
	writeFile(t, sandboxes[0], "shared.txt", []byte("one workspace"))
	for i := 1; i < n; i++ {
		if got := readFile(t, sandboxes[i], "shared.txt"); string(got) != "one workspace" {
			t.Errorf("concurrent Create #%d: read %q, want the file written through #0", i, got)
		}
	}
	if l, ok := clients[0].(sandbox.Lister); ok {
		owned, err := l.List(t.Context())
		if err != nil {
			t.Fatalf("List() = %v, want no error", err)
		}
		if got := countKey(owned, sandbox.KeyHash(key)); got != 1 {
			t.Errorf("List() has %d resources labelled with the key's hash, want 1", got)
		}
	}
}

func countKey(owned []sandbox.Owned, keyHash string) int {
	n := 0
	for _, o := range owned {
		if o.KeyHash == keyHash {
			n++
		}
	}
	return n
}

func (s *suite) testAttachAfterRestart(t *testing.T) {
	key := newKey(t)
	sb, ref := s.create(t, s.client(t), key)
	writeFile(t, sb, "before-restart.txt", []byte("still here"))
	run(t, sb, "mkdir -p made-by-exec && printf 'exec state' > made-by-exec/state")

	restarted := s.client(t)
	att, err := restarted.Attach(t.Context(), key, ref)
	if err != nil {
		t.Fatalf("Attach from a fresh client = %v, want no error", err)
	}
	if got := att.Ref(); got != ref {
		t.Errorf("attached Ref() = %v, want %v", got, ref)
	}
	if att.Root() != sb.Root() {
		t.Errorf("attached Root() = %q, want %q", att.Root(), sb.Root())
	}
	if got := readFile(t, att, "before-restart.txt"); string(got) != "still here" {
		t.Errorf("after restart, ReadFile = %q, want %q", got, "still here")
	}
	if got := run(t, att, "cat made-by-exec/state"); got != "exec state" {
		t.Errorf("after restart, cat = %q, want %q", got, "exec state")
	}
}

func (s *suite) testAttachOtherSession(t *testing.T) {
	owner, other := newKey(t), newKey(t)
	_, ref := s.create(t, s.client(t), owner)
	_, err := s.client(t).Attach(t.Context(), other, ref)
	if !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach with another session's key = %v, want ErrNotOwned", err)
	}
}

func (s *suite) testAttachOtherProvider(t *testing.T) {
	key := newKey(t)
	p := s.client(t)
	_, ref := s.create(t, p, key)
	foreign := ref
	foreign.Provider = "not" + p.Name()
	_, err := s.client(t).Attach(t.Context(), key, foreign)
	if !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach(%v) with another provider's name = %v, want ErrNotOwned", foreign, err)
	}
}

func (s *suite) testSessionsIsolated(t *testing.T) {
	p := s.client(t)
	sb1, ref1 := s.create(t, p, newKey(t))
	sb2, ref2 := s.create(t, p, newKey(t))
	if ref1 == ref2 {
		t.Fatalf("two session keys got the same Ref %v", ref1)
	}
	writeFile(t, sb1, "only-in-one.txt", []byte("private"))
	if _, err := sb2.ReadFile(t.Context(), "only-in-one.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile in the other session's sandbox = %v, want an error satisfying fs.ErrNotExist", err)
	}
	if got := run(t, sb2, "test -e only-in-one.txt && echo present || echo absent"); got != "absent\n" {
		t.Errorf("test -e in the other session's sandbox printed %q, want %q", got, "absent\n")
	}
}

func (s *suite) testExecOutput(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	res := exec(t, sb, sandbox.ExecRequest{Command: "echo out; echo err >&2; exit 3"})
	if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Errorf("Exec = stdout %q, stderr %q, exit %d; want %q, %q, 3", res.Stdout, res.Stderr, res.ExitCode, "out\n", "err\n")
	}
	if res.TimedOut || res.Truncated {
		t.Errorf("Exec: TimedOut = %v, Truncated = %v; want both false", res.TimedOut, res.Truncated)
	}
	res = exec(t, sb, sandbox.ExecRequest{Command: "true"})
	if res.ExitCode != 0 || len(res.Stdout) != 0 || len(res.Stderr) != 0 {
		t.Errorf("Exec(true) = exit %d, stdout %q, stderr %q; want 0 and no output", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func (s *suite) testExecStdin(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	in := []byte("line one\nline two\x00\xff\n")
	res := exec(t, sb, sandbox.ExecRequest{Command: "cat", Stdin: in})
	if !bytes.Equal(res.Stdout, in) {
		t.Errorf("cat with Stdin: stdout = %q, want %q", res.Stdout, in)
	}
	// Without Stdin the command must not block waiting for input.
	res = exec(t, sb, sandbox.ExecRequest{Command: "cat", Timeout: 10 * time.Second})
	if res.TimedOut || len(res.Stdout) != 0 {
		t.Errorf("cat without Stdin: TimedOut = %v, stdout %q; want an immediate empty read", res.TimedOut, res.Stdout)
	}
}

func (s *suite) testExecEnv(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	res := exec(t, sb, sandbox.ExecRequest{
		Command: `printf '%s|%s' "$MANGO_CONFORMANCE_A" "$MANGO_CONFORMANCE_B"`,
		Env:     map[string]string{"MANGO_CONFORMANCE_A": "a value", "MANGO_CONFORMANCE_B": "b=c 'd'"},
	})
	if want := "a value|b=c 'd'"; string(res.Stdout) != want {
		t.Errorf("Exec with Env printed %q, want %q", res.Stdout, want)
	}
	for k, v := range s.h.Spec.Env {
		res := exec(t, sb, sandbox.ExecRequest{Command: `printf '%s' "$` + k + `"`})
		if string(res.Stdout) != v {
			t.Errorf("Spec.Env[%s]: command sees %q, want %q", k, res.Stdout, v)
		}
	}
	// Variables of one request do not leak into the next.
	res = exec(t, sb, sandbox.ExecRequest{Command: `printf '%s' "${MANGO_CONFORMANCE_A-unset}"`})
	if string(res.Stdout) != "unset" {
		t.Errorf("a later Exec sees MANGO_CONFORMANCE_A = %q, want it unset", res.Stdout)
	}
}

func (s *suite) testExecWorkingDirectory(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	root := sb.Root()
	if !path.IsAbs(root) {
		t.Errorf("Root() = %q, want an absolute path", root)
	}
	if got := strings.TrimSuffix(run(t, sb, "pwd"), "\n"); got != root {
		t.Errorf("pwd = %q, want Root() %q", got, root)
	}
	// Relative and absolute (under Root) paths name the same file, for
	// commands and for file access.
	writeFile(t, sb, "rel.txt", []byte("relative"))
	if got := readFile(t, sb, path.Join(root, "rel.txt")); string(got) != "relative" {
		t.Errorf("ReadFile(Root()+\"/rel.txt\") = %q, want %q", got, "relative")
	}
	writeFile(t, sb, path.Join(root, "abs.txt"), []byte("absolute"))
	if got := run(t, sb, "cat abs.txt"); got != "absolute" {
		t.Errorf("cat abs.txt = %q, want %q", got, "absolute")
	}
	if got := run(t, sb, "cat "+path.Join(root, "rel.txt")); got != "relative" {
		t.Errorf("cat $ROOT/rel.txt = %q, want %q", got, "relative")
	}
}

func (s *suite) testExecPreCancelled(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	_, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "echo ran > ran.txt; sleep 30"})
	if elapsed := time.Since(start); elapsed > killDeadline {
		t.Errorf("Exec with a cancelled context took %v, want at most %v", elapsed, killDeadline)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Exec with a cancelled context = %v, want context.Canceled", err)
	}
	if got := run(t, sb, "test -e ran.txt && echo ran || echo not-run"); got != "not-run\n" {
		t.Errorf("the command of a cancelled Exec ran (%q), want it never started", got)
	}
}

// aliveScript defines alive PID: true while the process exists and is not a
// zombie (a killed child may stay a zombie for a while when the sandbox's
// init does not reap orphans).
const aliveScript = `alive() {
	if [ -r /proc/$1/stat ]; then
		[ "$(sed 's/^.*) //' /proc/$1/stat | cut -c1)" != Z ]
	else
		kill -0 "$1" 2>/dev/null
	fi
}
`

func (s *suite) testExecCancel(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	type result struct {
		res *sandbox.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The foreground child writes fg.started as it starts, so the
		// test knows the shell is waiting for it.
		res, err := sb.Exec(ctx, sandbox.ExecRequest{
			Command: "echo $$ > shell.pid; sleep 30 & echo $! > child.pid; sh -c 'echo > fg.started; exec sleep 30'",
		})
		done <- result{res, err}
	}()

	// Cancel once both PIDs are recorded and the shell waits for its
	// foreground child (polled through a fresh context: the command itself
	// runs for 30s).
	waitFor(t, 10*time.Second, func() bool {
		data, err := sb.ReadFile(t.Context(), "fg.started")
		return err == nil && len(data) > 0
	}, "the command to start its foreground child")
	cancelled := time.Now()
	cancel()

	select {
	case r := <-done:
		if elapsed := time.Since(cancelled); elapsed > killDeadline {
			t.Errorf("Exec returned %v after cancellation, want at most %v", elapsed, killDeadline)
		}
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("cancelled Exec = %v, %v; want context.Canceled", r.res, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return within 10s of cancellation")
	}

	shell := strings.TrimSpace(string(readFile(t, sb, "shell.pid")))
	child := strings.TrimSpace(string(readFile(t, sb, "child.pid")))
	for _, pid := range []string{shell, child} {
		if _, err := strconv.Atoi(pid); err != nil {
			t.Fatalf("recorded PID %q is not a number", pid)
		}
	}
	check := aliveScript + "for p in " + shell + " " + child + "; do alive $p && echo $p; done; true"
	var survivors string
	waitFor(t, killDeadline, func() bool {
		survivors = run(t, sb, check)
		return survivors == ""
	}, "the cancelled shell and its background child to be killed")
	if survivors != "" {
		t.Errorf("processes still alive after cancellation: %q (shell %s, child %s)", survivors, shell, child)
	}
}

// waitFor polls cond until it holds or timeout passes; it does not fail the
// test by itself.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Logf("gave up waiting %v for %s", timeout, what)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *suite) testExecTimeout(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	const timeout = 500 * time.Millisecond
	start := time.Now()
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{
		Command: "echo started; sleep 30 & sleep 30",
		Timeout: timeout,
	})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Exec past its timeout = %v, want a result with TimedOut (a timeout is not an error)", err)
	}
	if !res.TimedOut || res.ExitCode != -1 {
		t.Errorf("Exec past its timeout: TimedOut = %v, ExitCode = %d; want true, -1", res.TimedOut, res.ExitCode)
	}
	if elapsed < timeout || elapsed > timeout+killDeadline {
		t.Errorf("Exec with a %v timeout returned after %v, want between %v and %v", timeout, elapsed, timeout, timeout+killDeadline)
	}
	if string(res.Stdout) != "started\n" {
		t.Errorf("timed-out Exec: stdout = %q, want the output produced before the timeout %q", res.Stdout, "started\n")
	}
}

func (s *suite) testExecOutputCap(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	const limit = 1000
	tests := []struct {
		name, command string
		stream        func(*sandbox.ExecResult) []byte
	}{
		{"stdout", "head -c 100000 /dev/zero | tr '\\0' o", func(r *sandbox.ExecResult) []byte { return r.Stdout }},
		{"stderr", "head -c 100000 /dev/zero | tr '\\0' e >&2", func(r *sandbox.ExecResult) []byte { return r.Stderr }},
	}
	for _, tt := range tests {
		res := exec(t, sb, sandbox.ExecRequest{Command: tt.command, MaxOutput: limit})
		out := tt.stream(res)
		if !res.Truncated {
			t.Errorf("%s: 100000 bytes with MaxOutput %d: Truncated = false, want true", tt.name, limit)
		}
		if len(out) > limit || len(out) == 0 {
			t.Errorf("%s: kept %d bytes with MaxOutput %d, want 1..%d", tt.name, len(out), limit, limit)
		}
		if res.ExitCode != 0 {
			t.Errorf("%s: exit code %d, want 0 (truncating output must not break the command)", tt.name, res.ExitCode)
		}
	}
	res := exec(t, sb, sandbox.ExecRequest{Command: "printf 12345", MaxOutput: 5})
	if res.Truncated || string(res.Stdout) != "12345" {
		t.Errorf("output exactly at MaxOutput: Truncated = %v, stdout %q; want false, %q", res.Truncated, res.Stdout, "12345")
	}
}

func (s *suite) testFilesBinary(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := make([]byte, 1<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"all-bytes.bin": all, "big.bin": big, "empty": {}}
	for name, data := range files {
		writeFile(t, sb, name, data)
		if got := readFile(t, sb, name); !bytes.Equal(got, data) {
			t.Errorf("ReadFile(%q) returned %d bytes differing from the %d written", name, len(got), len(data))
		}
		if got, want := strings.TrimSpace(run(t, sb, "wc -c < "+name)), strconv.Itoa(len(data)); got != want {
			t.Errorf("wc -c %s = %s, want %s", name, got, want)
		}
	}
	// Overwriting replaces the whole content.
	writeFile(t, sb, "big.bin", []byte("short"))
	if got := readFile(t, sb, "big.bin"); string(got) != "short" {
		t.Errorf("after overwrite, ReadFile = %d bytes, want %q", len(got), "short")
	}
	if _, err := sb.ReadFile(t.Context(), "missing.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a missing file = %v, want an error satisfying fs.ErrNotExist", err)
	} else if errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("ReadFile of a missing file = %v, must not be sandbox.ErrNotFound (that means the sandbox is gone)", err)
	}
}

func (s *suite) testFilesNested(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	writeFile(t, sb, "a/b/c/d.txt", []byte("deep"))
	writeFile(t, sb, "a/b/sibling.txt", []byte("sibling"))
	writeFile(t, sb, "./a/y.txt", []byte("cleaned"))
	if got := readFile(t, sb, "a/b/c/d.txt"); string(got) != "deep" {
		t.Errorf("ReadFile(a/b/c/d.txt) = %q, want %q", got, "deep")
	}
	if got := run(t, sb, "cat a/b/c/d.txt a/b/sibling.txt a/y.txt"); got != "deepsiblingcleaned" {
		t.Errorf("cat of files written through WriteFile = %q, want %q", got, "deepsiblingcleaned")
	}
	run(t, sb, "mkdir -p x/y && printf made > x/y/z.txt")
	if got := readFile(t, sb, "x/y/z.txt"); string(got) != "made" {
		t.Errorf("ReadFile of a file made by a command = %q, want %q", got, "made")
	}
}

func (s *suite) testPathEscapeLexical(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	for _, p := range []string{"../x", "a/../../x", "../../../../../../etc/passwd", "/etc/passwd", "/"} {
		if _, err := sb.ReadFile(t.Context(), p); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("ReadFile(%q) = %v, want ErrPathEscape", p, err)
		}
	}
	name := "mango-escape-" + strings.TrimPrefix(newKey(t), "sesn_conformance_")
	for _, p := range []string{"../" + name, "/tmp/" + name, path.Join(sb.Root(), "..", name)} {
		if err := sb.WriteFile(t.Context(), p, []byte("x"), 0o644); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("WriteFile(%q) = %v, want ErrPathEscape", p, err)
		}
	}
	if got := run(t, sb, "ls ../"+name+" /tmp/"+name+" 2>/dev/null; true"); got != "" {
		t.Errorf("a rejected WriteFile created %q outside the workspace", got)
	}
}

func (s *suite) testPathEscapeSymlink(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	name := "mango-escape-" + strings.TrimPrefix(newKey(t), "sesn_conformance_")
	// A file outside the workspace that the links below point at. It is
	// created by a command: commands may reach outside; file access may not.
	victim := "/tmp/" + name + "-victim"
	run(t, sb, "mkdir -p "+victim+" && printf original > "+victim+"/file"+
		" && ln -s / escape && ln -s "+victim+"/file victim && mkdir -p sub && ln -s ../.. sub/up")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = sb.Exec(ctx, sandbox.ExecRequest{Command: "rm -rf " + victim + " /tmp/" + name})
	})
	for _, p := range []string{"escape/etc/hostname", "escape" + victim + "/file", "victim", "sub/up/x"} {
		if _, err := sb.ReadFile(t.Context(), p); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("ReadFile(%q) through a symlink leaving the workspace = %v, want ErrPathEscape", p, err)
		}
	}
	for _, p := range []string{"escape/tmp/" + name, "escape/tmp/" + name + "/nested", "escape" + victim + "/file", "victim"} {
		if err := sb.WriteFile(t.Context(), p, []byte("overwritten"), 0o644); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("WriteFile(%q) through a symlink leaving the workspace = %v, want ErrPathEscape", p, err)
		}
	}
	if got := run(t, sb, "cat "+victim+"/file"); got != "original" {
		t.Errorf("a rejected WriteFile changed a file outside the workspace to %q", got)
	}
	if got := run(t, sb, "ls -d /tmp/"+name+" 2>/dev/null; true"); got != "" {
		t.Errorf("a rejected WriteFile created %q outside the workspace", got)
	}
}

func (s *suite) testToolset(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	writeFile(t, sb, "src/a/x", []byte("nothing here\n"))
	writeFile(t, sb, "src/b/notes.txt", []byte("first\nthe needle line\n"))
	if got := run(t, sb, "find . -name x"); got != "./src/a/x\n" {
		t.Errorf("find . -name x = %q, want %q", got, "./src/a/x\n")
	}
	if got := run(t, sb, "grep -rn needle ."); got != "./src/b/notes.txt:2:the needle line\n" {
		t.Errorf("grep -rn needle . = %q, want %q", got, "./src/b/notes.txt:2:the needle line\n")
	}
	res := exec(t, sb, sandbox.ExecRequest{Command: "grep -r absent-word ."})
	if res.ExitCode != 1 {
		t.Errorf("grep with no match: exit code %d, want 1", res.ExitCode)
	}
}

func (s *suite) testDestroy(t *testing.T) {
	key := newKey(t)
	sb, ref := s.create(t, s.client(t), key)
	writeFile(t, sb, "doomed.txt", []byte("bye"))
	run(t, sb, "mkdir -p ro/dir && printf x > ro/dir/f && chmod -R a-w ro")

	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatalf("Destroy() = %v, want no error", err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Errorf("second Destroy() = %v, want no error (idempotent)", err)
	}
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true"}); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Errorf("Exec after Destroy = %v, want ErrDestroyed", err)
	}
	if _, err := sb.ReadFile(t.Context(), "doomed.txt"); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Errorf("ReadFile after Destroy = %v, want ErrDestroyed", err)
	}
	if err := sb.WriteFile(t.Context(), "new.txt", nil, 0o644); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Errorf("WriteFile after Destroy = %v, want ErrDestroyed", err)
	}
	if _, err := s.client(t).Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach after Destroy = %v, want ErrNotFound", err)
	}
}

func (s *suite) testListAndDestroyRef(t *testing.T) {
	p := s.client(t)
	lister, canList := p.(sandbox.Lister)
	destroyer, canDestroy := p.(sandbox.Destroyer)
	if !canList && !canDestroy {
		t.Skipf("provider %q implements neither sandbox.Lister nor sandbox.Destroyer", p.Name())
	}
	key := newKey(t)
	_, ref := s.create(t, p, key)
	other := newKey(t)
	_, otherRef := s.create(t, p, other)

	if canList {
		owned := list(t, lister)
		o, ok := find(owned, ref)
		if !ok {
			t.Fatalf("List() = %v, want it to include %v", owned, ref)
		}
		if o.KeyHash != sandbox.KeyHash(key) {
			t.Errorf("List(): KeyHash of %v = %q, want KeyHash(key) %q", ref, o.KeyHash, sandbox.KeyHash(key))
		}
		if o.KeyHash == key || strings.Contains(o.Ref.ID, key) {
			t.Errorf("List(): %+v exposes the raw session key %q", o, key)
		}
	}
	if !canDestroy {
		t.Skipf("provider %q does not implement sandbox.Destroyer", p.Name())
	}
	if err := destroyer.DestroyRef(t.Context(), ref); err != nil {
		t.Fatalf("DestroyRef(%v) = %v, want no error", ref, err)
	}
	if err := destroyer.DestroyRef(t.Context(), ref); err != nil {
		t.Errorf("second DestroyRef(%v) = %v, want no error (missing is not an error)", ref, err)
	}
	if _, err := s.client(t).Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach after DestroyRef = %v, want ErrNotFound", err)
	}
	if _, err := s.client(t).Attach(t.Context(), other, otherRef); err != nil {
		t.Errorf("Attach to another session's sandbox after DestroyRef = %v, want it untouched", err)
	}
	if canList {
		if _, ok := find(list(t, lister), ref); ok {
			t.Errorf("List() still includes %v after DestroyRef", ref)
		}
	}
}

func list(t *testing.T, l sandbox.Lister) []sandbox.Owned {
	t.Helper()
	owned, err := l.List(t.Context())
	if err != nil {
		t.Fatalf("List() = %v, want no error", err)
	}
	return owned
}

func find(owned []sandbox.Owned, ref sandbox.Ref) (sandbox.Owned, bool) {
	for _, o := range owned {
		if o.Ref == ref {
			return o, true
		}
	}
	return sandbox.Owned{}, false
}

func (s *suite) testCapabilities(t *testing.T) {
	p := s.client(t)
	c, ok := p.(sandbox.Capable)
	if !ok {
		t.Skipf("provider %q does not implement sandbox.Capable", p.Name())
	}
	known := map[string]bool{
		sandbox.CapabilityLimitedNetworking: true,
		sandbox.CapabilityPackages:          true,
		sandbox.CapabilityPauseResume:       true,
	}
	for _, name := range c.Capabilities() {
		if !known[name] {
			t.Errorf("Capabilities() includes %q, want only names defined by package sandbox", name)
		}
	}
	// A provider that claims egress control must offer it; one that does
	// not claim it must not receive a limited Spec.Network.
	_, controls := p.(sandbox.EgressController)
	if claims := slices.Contains(c.Capabilities(), sandbox.CapabilityLimitedNetworking); claims != controls {
		t.Errorf("reports %s = %v but implements sandbox.EgressController = %v", sandbox.CapabilityLimitedNetworking, claims, controls)
	}
}
