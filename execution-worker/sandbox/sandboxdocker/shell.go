package sandboxdocker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellsession"
)

// A container's shells are long-lived execs with attached standard
// streams: starting one costs an exec (create, attach) once, and every
// command after that is a write to its input and a read of its output, not
// an exec of its own (which costs 80-100 ms on a busy daemon and tops out
// near a dozen per second). Each sandbox value keeps persistent shells for
// the bash tool, one per shell key ([sandbox.ShellKey]), and a small pool
// of isolated shells that serve Exec (the file tools' find and grep,
// output listings).

// shellStarter runs the shell in a new session, so that it leads a process
// group a kill can end as a whole. The outer shell runs setsid as a child,
// so setsid is never a group leader and never forks: the shell keeps the
// pid it prints. Images without setsid get a shell that is killed alone.
// The outer shell's own stderr is /dev/null (the shell gets the real one
// from fd 3), so its "Killed" notice about a killed shell never reaches
// the output.
const shellStarter = `exec 3>&2 2>/dev/null; if command -v setsid >/dev/null 2>&1; then setsid /bin/sh -c "$0"; exit $?; fi; exec /bin/sh -c "$0"`

// shellInner takes its stderr back, prints the shell's pid and becomes the
// shell: bash where the image has it, else /bin/sh.
const shellInner = `exec 2>&3 3>&-; echo "$$"; if command -v bash >/dev/null 2>&1; then exec bash --noprofile --norc; fi; exec /bin/sh`

// shellKiller kills the process group led by $1 (busybox's kill takes no
// "--"), or the process alone when it leads none.
const shellKiller = `kill -KILL "-$1" 2>/dev/null || kill -KILL -- "-$1" 2>/dev/null || kill -KILL "$1" 2>/dev/null; exit 0`

// isolatedPoolSize is how many idle isolated shells a sandbox keeps, and
// isolatedIdleTimeout how long an unused one lives (a new one costs an
// exec, about 100 ms).
const (
	isolatedPoolSize    = 2
	isolatedIdleTimeout = 2 * time.Minute
)

// shells are a sandbox value's shells.
type shells struct {
	once       sync.Once
	persistent *shellsession.Keyed // the bash tool's shells, per shell key
	mu         sync.Mutex
	idle       []*shellsession.Session // isolated shells ready for Exec
	closed     bool
	// held marks the shells of a warm container, started before it was
	// paused: they are not idle until a session adopts it (release).
	held bool
}

// persistentShells returns the bash tool's shells, one per shell key. A
// shell made while the shells are held does not end when idle until
// release.
func (s *containerSandbox) persistentShells() *shellsession.Keyed {
	s.sh.once.Do(func() {
		s.sh.persistent = shellsession.NewKeyed(func() *shellsession.Session {
			return shellsession.New(s.startShell, shellsession.Options{Root: Root, IdleTimeout: s.idleTimeout(sandbox.ShellIdleTimeout)})
		}, sandbox.MaxShellKeys)
	})
	return s.sh.persistent
}

// idleTimeout is d, or 0 (no idle end) while the shells are held.
func (s *containerSandbox) idleTimeout(d time.Duration) time.Duration {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if s.sh.held {
		return 0
	}
	return d
}

// idleTimeoutLocked is idleTimeout for a caller holding s.sh.mu.
func (s *containerSandbox) idleTimeoutLocked(d time.Duration) time.Duration {
	if s.sh.held {
		return 0
	}
	return d
}

// hold marks the shells as those of a warm container (see shells.held).
func (s *containerSandbox) hold() {
	s.sh.mu.Lock()
	s.sh.held = true
	s.sh.mu.Unlock()
}

// release hands held shells to their session: from now on they end when
// idle.
func (s *containerSandbox) release() {
	s.sh.mu.Lock()
	s.sh.held = false
	idle := slices.Clone(s.sh.idle)
	s.sh.mu.Unlock()
	for _, sh := range idle {
		sh.SetIdleTimeout(isolatedIdleTimeout)
	}
	s.persistentShells().Each(func(sh *shellsession.Session) { sh.SetIdleTimeout(sandbox.ShellIdleTimeout) })
}

// takeIsolated returns an idle isolated shell, or a new one.
func (s *containerSandbox) takeIsolated() *shellsession.Session {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if n := len(s.sh.idle); n > 0 {
		sh := s.sh.idle[n-1]
		s.sh.idle = s.sh.idle[:n-1]
		return sh
	}
	return shellsession.New(s.startShell, shellsession.Options{Root: Root, Isolated: true, IdleTimeout: s.idleTimeoutLocked(isolatedIdleTimeout)})
}

// putIsolated returns sh to the pool, or closes it when the pool is full.
func (s *containerSandbox) putIsolated(sh *shellsession.Session) {
	s.sh.mu.Lock()
	if !s.sh.closed && len(s.sh.idle) < isolatedPoolSize {
		s.sh.idle = append(s.sh.idle, sh)
		sh = nil
	}
	s.sh.mu.Unlock()
	if sh != nil {
		sh.Close()
	}
}

// Close ends the sandbox value's shells, the persistent ones of every key
// and the isolated ones (the container stays). The SessionManager calls it
// when it drops the sandbox from its cache.
func (s *containerSandbox) Close() error {
	s.sh.mu.Lock()
	idle := s.sh.idle
	s.sh.idle, s.sh.closed = nil, true
	s.sh.mu.Unlock()
	for _, sh := range idle {
		sh.Close()
	}
	s.persistentShells().Close()
	return nil
}

// ShellExec runs req.Command in the persistent shell of ctx's shell key;
// see [sandbox.Shell].
func (s *containerSandbox) ShellExec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ShellResult, error) {
	if err := s.checkUsable(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res, err := s.persistentShells().Run(ctx, sandbox.ShellKey(ctx), req, defaults.Positive(req.Timeout, s.p.cfg.ExecTimeout), defaults.Positive(req.MaxOutput, s.p.cfg.MaxOutput))
	return s.shellOutcome(ctx, res, err)
}

// RestartShell kills the persistent shell of ctx's shell key; see
// [sandbox.Shell].
func (s *containerSandbox) RestartShell(ctx context.Context) error {
	if err := s.checkUsable(); err != nil {
		return err
	}
	return s.persistentShells().Restart(ctx, sandbox.ShellKey(ctx))
}

// StartShell starts the persistent shell of ctx's shell key early; see
// [sandbox.Shell]. An isolated shell for the pool is started beside it,
// when the pool has none: the session directories, the file tools and the
// outputs listing of the first turn use it. The two execs run at once.
func (s *containerSandbox) StartShell(ctx context.Context) error {
	if err := s.checkUsable(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	s.sh.mu.Lock()
	pooled := len(s.sh.idle) > 0
	s.sh.mu.Unlock()
	if !pooled {
		wg.Go(func() {
			sh := s.takeIsolated()
			_ = sh.Start(ctx) // a failure is the first command's to report
			s.putIsolated(sh)
		})
	}
	err := s.persistentShells().Start(ctx, sandbox.ShellKey(ctx))
	wg.Wait()
	if err != nil {
		return fmt.Errorf("start shell in sandbox %s: %w", shortID(s.ref.ID), s.mapErr(err))
	}
	return nil
}

// execInShell is Exec through an isolated shell of the pool.
//
// A command never ends an isolated shell (it runs in a subshell), so a
// shell that ended without timing out was ended from outside: its
// container was stopped or restarted, usually before the call (a pooled
// shell whose end was not yet seen). Such a call that printed nothing is
// run once more, in a new shell, which starts a stopped container again.
func (s *containerSandbox) execInShell(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	timeout := defaults.Positive(req.Timeout, s.p.cfg.ExecTimeout)
	limit := defaults.Positive(req.MaxOutput, s.p.cfg.MaxOutput)
	var res *sandbox.ShellResult
	var err error
	// Retry runs on a context without cancellation: the second run, with
	// ctx's own cancellation, reports it.
	_, _ = backoff.Retry(context.WithoutCancel(ctx), func() (struct{}, error) {
		sh := s.takeIsolated()
		res, err = sh.Run(ctx, req, timeout, limit)
		s.putIsolated(sh)
		if err != nil || !res.ShellEnded || res.TimedOut || len(res.Stdout)+len(res.Stderr) > 0 {
			return struct{}{}, nil
		}
		return struct{}{}, errEndedSilently
	}, backoff.WithBackOff(&backoff.ZeroBackOff{}), backoff.WithMaxTries(2))
	res, err = s.shellOutcome(ctx, res, err)
	if err != nil {
		return nil, err
	}
	return &res.ExecResult, nil
}

// errEndedSilently marks a run whose shell ended, not timed out, without
// printing anything: it is run once more, in a new shell.
var errEndedSilently = errors.New("shell ended without output")

// shellOutcome maps a shell's failures to the sandbox's errors: a closed
// session is a destroyed sandbox, and a shell that ended on its own in a
// container that no longer exists is a vanished sandbox.
func (s *containerSandbox) shellOutcome(ctx context.Context, res *sandbox.ShellResult, err error) (*sandbox.ShellResult, error) {
	switch {
	case errors.Is(err, shellsession.ErrClosed):
		return nil, sandbox.ErrDestroyed
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, fmt.Errorf("exec in sandbox %s: %w", shortID(s.ref.ID), s.mapErr(err))
	case res.ShellEnded && !res.TimedOut && !s.containerExists(context.WithoutCancel(ctx)):
		return nil, s.mapErr(cerrdefs.ErrNotFound)
	}
	return res, nil
}

// startShell starts a shell exec in the container; a container stopped
// behind Mango's back is started first.
func (s *containerSandbox) startShell(ctx context.Context) (shellsession.Process, error) {
	if s.destroyed.Load() {
		return nil, sandbox.ErrDestroyed
	}
	opts := client.ExecCreateOptions{
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		WorkingDir: Root,
		Cmd:        []string{"/bin/sh", "-c", shellStarter, shellInner},
	}
	created, err := s.p.cli.ExecCreate(ctx, s.ref.ID, opts)
	if cerrdefs.IsConflict(err) && ctx.Err() == nil {
		if serr := s.p.ensureRunning(ctx, s.ref.ID); serr == nil {
			created, err = s.p.cli.ExecCreate(ctx, s.ref.ID, opts)
		}
	}
	if err != nil {
		return nil, s.mapErr(err)
	}
	// The attachment outlives ctx, which bounds only the start.
	att, err := s.p.cli.ExecAttach(context.WithoutCancel(ctx), created.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("attach: %w", s.mapErr(err))
	}
	p := &shellProcess{s: s, execID: created.ID, att: att.HijackedResponse}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(outW, errW, att.Reader)
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		errW.CloseWithError(err)
	}()
	p.stdout, p.stderr = bufio.NewReader(outR), errR
	pidLine, err := readLine(ctx, p.stdout)
	if err == nil {
		p.pid, err = strconv.Atoi(strings.TrimSpace(pidLine))
	}
	if err != nil {
		att.Close()
		return nil, fmt.Errorf("start shell in sandbox %s: %w", shortID(s.ref.ID), err)
	}
	return p, nil
}

// readLine reads one line from r, giving up when ctx ends.
func readLine(ctx context.Context, r *bufio.Reader) (string, error) {
	type line struct {
		s   string
		err error
	}
	ch := make(chan line, 1)
	go func() {
		s, err := r.ReadString('\n')
		ch <- line{s, err}
	}()
	select {
	case l := <-ch:
		return l.s, l.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// shellProcess is a shell exec with its attached streams.
type shellProcess struct {
	s      *containerSandbox
	execID string
	att    client.HijackedResponse
	pid    int
	stdout *bufio.Reader
	stderr io.Reader
	kill   sync.Once
}

func (p *shellProcess) Stdin() io.Writer        { return p.att.Conn }
func (p *shellProcess) Stdout() io.Reader       { return p.stdout }
func (p *shellProcess) Stderr() io.Reader       { return p.stderr }
func (p *shellProcess) Exited() <-chan struct{} { return nil }

// Kill kills the shell's process group from a second exec, then closes the
// attachment, which ends the streams.
func (p *shellProcess) Kill() {
	p.kill.Do(func() {
		p.s.runDetached(shellKiller, strconv.Itoa(p.pid))
		p.att.Close()
	})
}

// ExitCode asks the daemon for the shell exec's status.
func (p *shellProcess) ExitCode() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, err := p.s.exitCode(ctx, p.execID)
	if err != nil {
		return -1
	}
	return code
}
