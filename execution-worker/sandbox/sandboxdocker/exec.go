package sandboxdocker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
)

// execDir holds the pid and cancellation marker files of running commands.
const execDir = "/tmp/.mango-exec"

// wrapper runs $1 (the command) in a new session and process group whose id
// it records in $execDir/$2.pid. The outer shell forks setsid, so setsid
// never runs as a process group leader and never forks itself: the recorded
// pid is the command's, and the outer shell returns its exit status. The
// command is not started when the cancellation marker $2.cancel exists: a
// killer that finds no pid file has written the marker first, so the
// command either sees it or was already in the group that gets killed.
//
// The shells' own stderr is /dev/null (the command gets the real one from
// fd 3), so the outer shell's "Killed" notice about its child never reaches
// the command's output.
const wrapper = `d=` + execDir + `; mkdir -p "$d" 2>/dev/null; exec 3>&2 2>/dev/null
setsid /bin/sh -c 'echo $$ > "$2.pid"; [ -e "$2.cancel" ] && exit 137; exec /bin/sh -c "$1" 2>&3 3>&-' mango-cmd "$1" "$d/$2"
rc=$?; rm -f "$d/$2.pid" "$d/$2.cancel"; exit $rc`

// killer marks the command $1 cancelled and kills its process group.
const killer = `d=` + execDir + `; mkdir -p "$d" 2>/dev/null; : > "$d/$1.cancel"
pg=$(cat "$d/$1.pid" 2>/dev/null)
if [ -n "$pg" ]; then kill -KILL "-$pg" 2>/dev/null || kill -KILL -- "-$pg" 2>/dev/null; rm -f "$d/$1.cancel" 2>/dev/null; fi
exit 0`

// killGrace bounds how long Exec waits for the output streams to close after
// the command's process group was killed (a child that left the group can
// hold them open).
const killGrace = 5 * time.Second

// containerSandbox is one session's container.
type containerSandbox struct {
	p         *Provider
	ref       sandbox.Ref
	destroyed atomic.Bool
	sh        shells // the persistent shell and the pool that serves Exec
}

func (p *Provider) newSandbox(ref sandbox.Ref) *containerSandbox {
	return &containerSandbox{p: p, ref: ref}
}

// Ref returns the sandbox's reference (provider "docker", container id).
func (s *containerSandbox) Ref() sandbox.Ref { return s.ref }

// Root returns /workspace.
func (s *containerSandbox) Root() string { return Root }

// Destroy removes the container. It is idempotent.
func (s *containerSandbox) Destroy(ctx context.Context) error {
	if err := s.p.remove(ctx, s.ref.ID); err != nil {
		return err
	}
	s.destroyed.Store(true)
	_ = s.Close() // the shells died with the container
	return nil
}

// mapErr turns the daemon's "no such container" into sandbox errors.
func (s *containerSandbox) mapErr(err error) error {
	if err == nil {
		return nil
	}
	if s.destroyed.Load() {
		return sandbox.ErrDestroyed
	}
	if cerrdefs.IsNotFound(err) {
		// Deliberately not wrapping err: callers tell a missing container
		// from a missing path by cerrdefs.IsNotFound.
		return fmt.Errorf("container %s: %w", shortID(s.ref.ID), sandbox.ErrNotFound)
	}
	return err
}

// Exec runs req.Command in the container. See the package documentation for
// how timeouts and cancellation kill the command's process group.
func (s *containerSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	if s.destroyed.Load() {
		return nil, sandbox.ErrDestroyed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.Stdin == nil {
		return s.execInShell(ctx, req)
	}
	return s.execOnce(ctx, req)
}

// execOnce runs req.Command in an exec of its own (a command with input).
func (s *containerSandbox) execOnce(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	timeout := defaults.Positive(req.Timeout, s.p.cfg.ExecTimeout)
	limit := defaults.Positive(req.MaxOutput, s.p.cfg.MaxOutput)
	token := shellexec.NewToken()
	opts := client.ExecCreateOptions{
		AttachStdin:  req.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		WorkingDir:   Root,
		Env:          envList(req.Env),
		Cmd:          []string{"/bin/sh", "-c", wrapper, "mango-exec", req.Command, token},
	}
	start := time.Now()
	created, err := s.p.cli.ExecCreate(ctx, s.ref.ID, opts)
	if cerrdefs.IsConflict(err) && ctx.Err() == nil {
		// The container was stopped behind our back: start it and retry.
		if serr := s.p.ensureRunning(ctx, s.ref.ID); serr == nil {
			created, err = s.p.cli.ExecCreate(ctx, s.ref.ID, opts)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("exec in sandbox %s: %w", shortID(s.ref.ID), s.mapErr(err))
	}

	runCtx, cancelRun := context.WithTimeout(ctx, timeout)
	defer cancelRun()

	// From here on the command may run: every way out that does not see it
	// finish kills its process group.
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() { s.killGroup(token) })
	}

	att, err := s.p.cli.ExecAttach(runCtx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		kill()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if runCtx.Err() != nil {
			return &sandbox.ExecResult{ExitCode: -1, TimedOut: true, Duration: time.Since(start)}, nil
		}
		return nil, fmt.Errorf("exec in sandbox %s: attach: %w", shortID(s.ref.ID), s.mapErr(err))
	}
	defer att.Close()

	out := sandbox.NewOutput(limit)
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&out.Stdout, &out.Stderr, att.Reader)
		copied <- err
	}()
	if req.Stdin != nil {
		go func() {
			// A command that exits without reading its input closes the
			// stream; the write error is expected then.
			_, _ = io.Copy(att.Conn, bytes.NewReader(req.Stdin))
			_ = att.CloseWrite()
		}()
	}

	var copyErr error
	killed := false
	select {
	case copyErr = <-copied:
	case <-runCtx.Done():
		killed = true
		kill()
		select {
		case copyErr = <-copied:
		case <-time.After(killGrace):
			att.Close()
			copyErr = <-copied
		}
		_ = copyErr // output read until the kill is all there is
	}
	dur := time.Since(start)
	if killed {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return out.Result(-1, true, dur), nil
	}
	if copyErr != nil {
		kill()
		return nil, fmt.Errorf("exec in sandbox %s: read output: %w", shortID(s.ref.ID), copyErr)
	}
	code, err := s.exitCode(ctx, created.ID)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("exec in sandbox %s: %w", shortID(s.ref.ID), s.mapErr(err))
	}
	return out.Result(code, false, dur), nil
}

// exitCode waits (briefly) for the daemon to record the exec's exit
// status: it asks every 5ms, 201 times at most.
func (s *containerSandbox) exitCode(ctx context.Context, execID string) (int, error) {
	return backoff.Retry(ctx, func() (int, error) {
		insp, err := s.p.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		switch {
		case err != nil:
			return 0, backoff.Permanent(fmt.Errorf("inspect exec: %w", err))
		case !insp.Running:
			return insp.ExitCode, nil
		}
		return 0, errStillRunning
	}, backoff.WithBackOff(backoff.NewConstantBackOff(5*time.Millisecond)), backoff.WithMaxTries(201), backoff.WithMaxElapsedTime(0))
}

// errStillRunning reports an exec still running after its output closed.
var errStillRunning = errors.New("inspect exec: still running after its output closed")

// killGroup kills the process group of the command with the given token.
func (s *containerSandbox) killGroup(token string) { s.runDetached(killer, token) }

// runDetached runs script with args in the container from an exec of its
// own and waits for it. It runs on its own context, as it serves kills: the
// caller's is usually already cancelled. A container that is gone or
// stopped is not an error: so is what it would have killed.
func (s *containerSandbox) runDetached(script string, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	created, err := s.p.cli.ExecCreate(ctx, s.ref.ID, client.ExecCreateOptions{
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          append([]string{"/bin/sh", "-c", script, "mango-kill"}, args...),
	})
	if err != nil {
		return
	}
	att, err := s.p.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return
	}
	defer att.Close()
	_, _ = io.Copy(io.Discard, att.Reader)
}

// checkUsable reports ErrDestroyed after Destroy.
func (s *containerSandbox) checkUsable() error {
	if s.destroyed.Load() {
		return sandbox.ErrDestroyed
	}
	return nil
}

var _ sandbox.Sandbox = (*containerSandbox)(nil)
