// Package shellsession keeps one long-lived POSIX shell and runs commands in
// it one at a time, so that the working directory, variables and functions
// a command leaves behind are there for the next one: the persistent shell
// of the bash tool. It works over any transport that can start a shell
// with its standard input and two output streams (a local process, an
// attached Docker exec); the transport is a [Starter].
//
// Each command is written to the shell's input wrapped in a small script:
// the command runs through eval (so most syntax errors end only the
// command), with /dev/null as its input, and is followed by a report of its
// exit status and the shell's working directory on stderr and a marker on
// stdout. The markers carry a per-call random nonce, so output cannot fake
// them. Output is collected per stream up to the call's limit.
//
// A call that times out or is cancelled kills the shell and everything it
// started (its process group); so does Close. A shell that ends on its own
// (exit, set -e, a signal) ends the call with the shell's status. Either
// way the next call starts a new shell in the last working directory known,
// and the result says that the shell was replaced
// ([sandbox.ShellResult.NewShell]).
//
// A sandbox value keeps one Session per shell key ([sandbox.ShellKey]) in
// a [Keyed], so that session threads have shells of their own and run at
// once.
package shellsession

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
)

// Process is one started shell. Its output streams must reach EOF once the
// shell and every process holding them have ended, and after Kill.
type Process interface {
	// Stdin is the shell's standard input; the session writes scripts to it.
	Stdin() io.Writer
	// Stdout and Stderr are the shell's output streams.
	Stdout() io.Reader
	Stderr() io.Reader
	// Exited is closed when the shell process has ended, for transports
	// that can tell before its streams close (nil otherwise).
	Exited() <-chan struct{}
	// Kill ends the shell and every process in its process group, and
	// releases the streams. It is idempotent and safe to call at any time.
	Kill()
	// ExitCode returns the shell's exit status once it has ended (-1 when
	// it was killed or the status is unknown).
	ExitCode() int
}

// Starter starts a shell. The shell reads its commands from standard input
// and must not be interactive (no prompts). ctx bounds the start only.
type Starter func(ctx context.Context) (Process, error)

// Options configure a Session.
type Options struct {
	// Root is the directory a new shell starts in, and where an isolated
	// command runs.
	Root string
	// Isolated runs every command in a subshell that starts in Root, so
	// nothing a command does to the shell's state carries over: a pool of
	// ready shells for one-off commands.
	Isolated bool
	// ExitGrace bounds how long a call waits for the last output of a
	// shell that has ended (a background job can hold its streams open).
	ExitGrace time.Duration
	// IdleTimeout, when positive, ends a shell no call has used for that
	// long (an idle session's shell holds a process and its memory); the
	// next call starts a new one in the last working directory, reported
	// as a replacement.
	IdleTimeout time.Duration
}

// ErrClosed reports a call on a closed session.
var ErrClosed = errors.New("shell session closed")

// Session is a persistent shell. Calls are serialized: a second call waits
// until the first has finished (or its context ends).
type Session struct {
	start Starter
	opts  Options
	turn  chan struct{}

	mu       sync.Mutex
	sh       *shell // nil until a call needs one, and after it ended
	replaced bool   // a shell ended since the last Restart: the next is a replacement
	fresh    bool   // the running shell is a replacement no call has reported yet
	dir      string // the last working directory reported ("" before any)
	closed   bool
	idle     *time.Timer // ends an idle shell (Options.IdleTimeout)
}

// New returns a session that starts its shell with start on first use.
func New(start Starter, opts Options) *Session {
	if opts.ExitGrace <= 0 {
		opts.ExitGrace = 200 * time.Millisecond
	}
	return &Session{start: start, opts: opts, turn: make(chan struct{}, 1)}
}

// shell is one started shell process and the call it is running.
type shell struct {
	proc Process
	// run is the call in progress, guarded by Session.mu; nil between calls.
	run *run
	// ready holds, per stream, whether the start marker was seen; output
	// before it is the shell's own start-up noise.
	ready [2]bool
	// eof is closed once both streams have ended.
	eof chan struct{}
}

// run is one call's collected output and end markers.
type run struct {
	sentinel string
	out      *sandbox.Output
	streams  [2]stream
	done     chan struct{} // closed when both markers were read
}

// stream is the state of one output stream within a call.
type stream struct {
	pending []byte // output not yet passed on: it may hold the start of the marker
	ended   bool
	report  string // what followed the marker on its line
}

// Run runs req.Command in the shell and returns its result. req.Stdin is
// not supported (the command's input is /dev/null); req.Env applies to this
// call only. A timeout is a result (TimedOut, ExitCode -1, ShellEnded); a
// cancelled ctx kills the shell and returns ctx.Err().
func (s *Session) Run(ctx context.Context, req sandbox.ExecRequest, timeout time.Duration, limit int) (*sandbox.ShellResult, error) {
	if req.Stdin != nil {
		return nil, errors.New("shell session: standard input is not supported")
	}
	for k, v := range req.Env {
		if !validName(k) || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("invalid environment variable %q", k)
		}
	}
	select {
	case s.turn <- struct{}{}:
		defer func() { <-s.turn }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	defer s.armIdle()
	sh, r, setup, fresh, err := s.begin(ctx, limit)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	script := setup + s.script(r.sentinel, req)
	// The write blocks while the shell is busy and fails once it is gone;
	// either way the outcome is read from the streams.
	go func() { _, _ = io.WriteString(sh.proc.Stdin(), script) }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	res := &sandbox.ShellResult{NewShell: fresh}
	select {
	case <-r.done:
	case <-sh.eof:
	case <-sh.proc.Exited():
		// Give the last output a moment to arrive, then end the streams.
		select {
		case <-r.done:
		case <-sh.eof:
		case <-time.After(s.opts.ExitGrace):
		}
	case <-ctx.Done():
		s.end(sh)
		return nil, ctx.Err()
	case <-timer.C:
		s.end(sh)
		s.detach(sh, r)
		res.ExecResult = *r.out.Result(-1, true, time.Since(start))
		res.ShellEnded = true
		return res, nil
	}
	dur := time.Since(start)
	if finished := s.detach(sh, r); !finished {
		// The shell ended before reporting: the command ended it.
		s.end(sh)
		res.ExecResult = *r.out.Result(sh.proc.ExitCode(), false, dur)
		res.ShellEnded = true
		return res, nil
	}
	code, dir := parseReport(r.streams[1].report)
	s.mu.Lock()
	if dir != "" {
		s.dir = dir
	}
	s.mu.Unlock()
	res.ExecResult = *r.out.Result(code, false, dur)
	res.Dir = dir
	return res, nil
}

// begin returns the running shell, starting one if needed, with a new run
// registered on it. A new shell's setup script is returned, to be written
// before the call's; fresh reports a shell started to replace one that
// ended.
func (s *Session) begin(ctx context.Context, limit int) (sh *shell, r *run, setup string, fresh bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if setup, err = s.ensure(ctx); err != nil {
		return nil, nil, "", false, err
	}
	fresh, s.fresh = s.fresh, false
	r = &run{sentinel: newSentinel(), out: sandbox.NewOutput(limit), done: make(chan struct{})}
	s.sh.run = r
	return s.sh, r, setup, fresh, nil
}

// ensure starts a shell unless one runs, and returns its setup script
// ("" for a running shell). The caller holds s.mu and the turn.
func (s *Session) ensure(ctx context.Context) (string, error) {
	if s.closed {
		return "", ErrClosed
	}
	if s.sh != nil && isClosed(s.sh.eof) {
		// The shell died between calls (its container stopped, say).
		s.sh.proc.Kill()
		s.sh, s.replaced = nil, true
	}
	if s.sh != nil {
		return "", nil
	}
	proc, err := s.start(ctx)
	if err != nil {
		return "", fmt.Errorf("start shell: %w", err)
	}
	s.sh = &shell{proc: proc, eof: make(chan struct{})}
	go s.drain(s.sh)
	s.fresh, s.replaced = s.replaced, false
	return s.setup(), nil
}

// Start starts the shell now unless one runs, so that the first call does
// not wait for it (a container's shell costs an exec to start). It never
// waits for a call: while one runs, so does the shell.
func (s *Session) Start(ctx context.Context) error {
	select {
	case s.turn <- struct{}{}:
		defer func() { <-s.turn }()
	default:
		return nil
	}
	defer s.armIdle()
	s.mu.Lock()
	setup, err := s.ensure(ctx)
	var proc Process
	if s.sh != nil {
		proc = s.sh.proc
	}
	s.mu.Unlock()
	if err != nil || setup == "" {
		return err
	}
	// Written while holding the turn: it precedes every call's script.
	if _, err := io.WriteString(proc.Stdin(), setup); err != nil {
		return fmt.Errorf("start shell: %w", err)
	}
	return nil
}

// detach ends r's collection of output: what a stream held back as the
// possible start of a marker is output after all when the marker never
// came. It reports whether both markers were read.
func (s *Session) detach(sh *shell, r *run) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh.run == r {
		sh.run = nil
	}
	finished := true
	for i := range r.streams {
		if st := &r.streams[i]; !st.ended {
			finished = false
			w := &r.out.Stdout
			if i == 1 {
				w = &r.out.Stderr
			}
			_, _ = w.Write(st.pending)
			st.pending, st.ended = nil, true
		}
	}
	return finished
}

// armIdle (re)starts the idle timer after a call; a call starting later
// holds the turn, so the timer never ends a shell in use.
func (s *Session) armIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.IdleTimeout <= 0 {
		return
	}
	if s.idle == nil {
		s.idle = time.AfterFunc(s.opts.IdleTimeout, s.endIdle)
		return
	}
	s.idle.Reset(s.opts.IdleTimeout)
}

// SetIdleTimeout sets Options.IdleTimeout and starts counting from now:
// for a shell started ahead of its use (in a warm container), which is
// not idle until it is handed out.
func (s *Session) SetIdleTimeout(d time.Duration) {
	s.mu.Lock()
	s.opts.IdleTimeout = d
	s.mu.Unlock()
	s.armIdle()
}

// endIdle ends the shell unless a call is running (which re-arms the
// timer when it finishes).
func (s *Session) endIdle() {
	select {
	case s.turn <- struct{}{}:
		defer func() { <-s.turn }()
	default:
		return
	}
	s.mu.Lock()
	sh := s.sh
	if sh != nil {
		s.sh, s.replaced = nil, true
	}
	s.mu.Unlock()
	if sh != nil {
		sh.proc.Kill()
	}
}

// end kills sh and forgets it; the next call starts a new shell.
func (s *Session) end(sh *shell) {
	sh.proc.Kill()
	s.mu.Lock()
	sh.run = nil
	if s.sh == sh {
		s.sh = nil
		s.replaced = true
	}
	s.mu.Unlock()
}

// Restart kills the shell; the next call starts a new one in Root, as a
// new session would (it is not reported as a replacement).
func (s *Session) Restart(ctx context.Context) error {
	select {
	case s.turn <- struct{}{}:
		defer func() { <-s.turn }()
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	sh := s.sh
	s.sh, s.replaced, s.fresh, s.dir = nil, false, false, ""
	s.mu.Unlock()
	if sh != nil {
		sh.proc.Kill()
	}
	return nil
}

// Close kills the shell; later calls return ErrClosed. It is idempotent and
// does not wait for a call in progress (which then ends with the shell).
func (s *Session) Close() {
	s.mu.Lock()
	sh := s.sh
	s.sh, s.closed = nil, true
	if s.idle != nil {
		s.idle.Stop()
	}
	s.mu.Unlock()
	if sh != nil {
		sh.proc.Kill()
	}
}

// Idle reports whether no call is running (for pools of isolated shells).
func (s *Session) Idle() bool { return len(s.turn) == 0 }

// drain reads both streams of sh until they end, passing output to the
// call in progress.
func (s *Session) drain(sh *shell) {
	var wg sync.WaitGroup
	for i, r := range []io.Reader{sh.proc.Stdout(), sh.proc.Stderr()} {
		wg.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					s.feed(sh, i, buf[:n])
				}
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	close(sh.eof)
}

// feed passes b, read from stream i (0 stdout, 1 stderr), to the call in
// progress.
func (s *Session) feed(sh *shell, i int, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !sh.ready[i] {
		// Start-up noise (a locale warning, say) ends at the NUL the
		// setup prints.
		nul := bytes.IndexByte(b, 0)
		if nul < 0 {
			return
		}
		sh.ready[i], b = true, b[nul+1:]
	}
	r := sh.run
	if r == nil || r.streams[i].ended {
		return // a background job's output between calls
	}
	w := &r.out.Stdout
	if i == 1 {
		w = &r.out.Stderr
	}
	st := &r.streams[i]
	st.pending = append(st.pending, b...)
	body, tail, found := bytes.Cut(st.pending, []byte(r.sentinel))
	if !found {
		// Keep what could be the start of the marker (and the newline
		// before it); pass on the rest.
		cut := max(0, len(st.pending)-len(r.sentinel)-1)
		_, _ = w.Write(st.pending[:cut])
		st.pending = append(st.pending[:0], st.pending[cut:]...)
		return
	}
	report, _, complete := bytes.Cut(tail, []byte("\n"))
	if !complete {
		return
	}
	// The report starts on a line of its own: its newline is not output.
	_, _ = w.Write(bytes.TrimSuffix(body, []byte("\n")))
	st.pending, st.ended, st.report = nil, true, string(report)
	if r.streams[0].ended && r.streams[1].ended {
		close(r.done)
	}
}

// Variables of the wrapper scripts. The fds 8 and 9 keep the shell's own
// output streams while commands run with theirs redirected; POSIX shells
// need only support single-digit descriptors.
const (
	statusVar = "__mango_status"
	outFD     = "8"
	errFD     = "9"
)

// setup is written once to a new shell: it saves its output streams in the
// fds 8 and 9, silences its own (what a trap prints between commands),
// moves to the directory of the shell it replaces, and prints a NUL on
// each stream to mark the end of start-up noise.
func (s *Session) setup() string {
	var b strings.Builder
	b.WriteString("exec " + outFD + ">&1 " + errFD + ">&2 >/dev/null 2>&1\n")
	root := shellexec.Quote(s.opts.Root)
	if s.dir != "" && !s.opts.Isolated {
		b.WriteString("cd " + shellexec.Quote(s.dir) + " 2>/dev/null || cd " + root + "\n")
	} else {
		b.WriteString("cd " + root + "\n")
	}
	b.WriteString("printf '\\000' >&" + outFD + "; printf '\\000' >&" + errFD + "\n")
	return b.String()
}

// script wraps one command. eval reads the command inside braces, so a
// syntax error anywhere in it runs none of it; the command gets /dev/null
// as input and the saved streams as output (restored after it, even when
// it redirected them with exec). The report then prints the status and the
// working directory after the marker on stderr, and the marker on stdout.
// The marker is printed in two halves so that a trace (set -x) of the
// printf never contains it whole.
func (s *Session) script(sentinel string, req sandbox.ExecRequest) string {
	var b strings.Builder
	body := "{ :\n" + req.Command + "\n\n}"
	eval := "eval " + shellexec.Quote(body)
	if s.opts.Isolated || len(req.Env) > 0 {
		b.WriteString("( ")
		if s.opts.Isolated {
			b.WriteString("cd " + shellexec.Quote(s.opts.Root) + " || exit 1; ")
		}
		for k, v := range req.Env {
			b.WriteString("export " + k + "=" + shellexec.Quote(v) + "; ")
		}
		b.WriteString(eval + "\n)")
	} else {
		b.WriteString("{ " + eval + "\n}")
	}
	b.WriteString(" </dev/null >&" + outFD + " 2>&" + errFD + "\n")
	half := len(sentinel) / 2
	marker := shellexec.Quote(sentinel[:half]) + " " + shellexec.Quote(sentinel[half:])
	b.WriteString(statusVar + "=$?\n")
	b.WriteString("printf '\\n%s%s%d %s\\n' " + marker + " \"$" + statusVar + "\" \"$PWD\" >&" + errFD + "\n")
	b.WriteString("printf '\\n%s%s\\n' " + marker + " >&" + outFD + "\n")
	return b.String()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// parseReport reads "<status> <dir>".
func parseReport(report string) (int, string) {
	code, dir, _ := strings.Cut(report, " ")
	n, err := strconv.Atoi(code)
	if err != nil {
		n = -1
	}
	return n, dir
}

// newSentinel returns a per-call marker with a random nonce.
func newSentinel() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails on supported platforms
	return "__MANGO_" + hex.EncodeToString(b) + "__"
}

func validName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
