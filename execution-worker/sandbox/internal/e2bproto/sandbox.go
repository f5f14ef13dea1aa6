package e2bproto

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// stateDirName is the directory, beside the workspace, holding the pid,
// cancellation marker and stdin files of running commands.
const stateDirName = ".mango-exec"

// wrapper runs $1 (the command) in a new session and process group whose id
// it records in $2.pid, with standard input from the file $3 (or
// /dev/null). The outer shell forks setsid, so setsid never runs as a
// process group leader and never forks: the recorded pid is the command's.
// The command is not started when the cancellation marker $2.cancel exists.
// The shells' own stderr is /dev/null (the command gets the real one from
// fd 3), so no "Killed" notice reaches the command's output.
const wrapper = `mkdir -p "${2%/*}" 2>/dev/null; exec 3>&2 2>/dev/null
if [ -n "$3" ]; then exec 4<"$3"; else exec 4</dev/null; fi
setsid /bin/sh -c 'echo $$ > "$2.pid"; [ -e "$2.cancel" ] && exit 137; exec /bin/sh -c "$1" 2>&3 3>&- <&4 4<&-' mango-cmd "$1" "$2"
rc=$?; rm -f "$2.pid" "$2.cancel" "$3"; exit $rc`

// killer marks the command with state prefix $1 cancelled and kills its
// process group. (dash's kill takes no "--"; "-PID" after the signal works
// in dash, bash and busybox alike, and the fallback covers the rest.)
const killer = `mkdir -p "${1%/*}" 2>/dev/null; : > "$1.cancel"
pg=$(cat "$1.pid" 2>/dev/null)
if [ -n "$pg" ]; then kill -KILL "-$pg" 2>/dev/null || kill -KILL -- "-$pg" 2>/dev/null; rm -f "$1.cancel" 2>/dev/null; fi
exit 0`

// probe creates the workspace and state directories under $HOME and prints
// the workspace's canonical path.
const probe = `mkdir -p "$HOME/workspace" "$HOME/` + stateDirName + `" && cd "$HOME/workspace" && pwd -P`

// resolver prints the canonical form of $1, resolving every symbolic link
// (GNU readlink -m also resolves paths whose tail does not exist yet).
const resolver = `readlink -m -- "$1" 2>/dev/null || readlink -f -- "$1"`

// killGrace bounds how long a timed-out Exec waits for the rest of the
// output after its process group was killed.
const killGrace = time.Second

// maxFileSize bounds ReadFile.
const maxFileSize = 256 << 20

// remoteSandbox is one remote sandbox.
type remoteSandbox struct {
	p         *Provider
	ref       sandbox.Ref
	root      string
	envd      envdState
	destroyed atomic.Bool
	touched   atomic.Int64 // unix nanos of the last TTL refresh
	touchMu   sync.Mutex
	// sessionMu guards sessionReady: the session directories were set up
	// (see ensureSession).
	sessionMu    sync.Mutex
	sessionReady bool
}

func (s *remoteSandbox) Ref() sandbox.Ref { return s.ref }
func (s *remoteSandbox) Root() string     { return s.root }

func (s *remoteSandbox) stateDir() string { return path.Join(path.Dir(s.root), stateDirName) }

func (s *remoteSandbox) setEnvd(info sandboxInfo) {
	base, host := s.p.cfg.EnvdEndpoint(s.ref.ID, info.domain())
	s.envd.mu.Lock()
	defer s.envd.mu.Unlock()
	s.envd.baseURL, s.envd.host = base, host
	if info.EnvdAccessToken != "" {
		s.envd.token = info.EnvdAccessToken
	}
}

// Destroy kills the sandbox. It is idempotent.
func (s *remoteSandbox) Destroy(ctx context.Context) error {
	if err := s.p.deleteSandbox(ctx, s.ref.ID); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", s.ref.ID, err)
	}
	s.destroyed.Store(true)
	return nil
}

// usable returns ErrDestroyed after Destroy, else ctx.Err(), else the
// error of touch (the sandbox is gone).
func (s *remoteSandbox) usable(ctx context.Context) error {
	if s.destroyed.Load() {
		return sandbox.ErrDestroyed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.touch(ctx)
}

// touch extends the sandbox's time to live when the last refresh is older
// than a third of the idle timeout. When the sandbox may already have
// paused, it connects (resuming it) instead. Only a vanished sandbox is an
// error; other failures are left to the call that follows.
func (s *remoteSandbox) touch(ctx context.Context) error {
	idle := s.p.cfg.IdleTimeout
	since := time.Duration(time.Now().UnixNano() - s.touched.Load())
	if since < idle/3 {
		return nil
	}
	s.touchMu.Lock()
	defer s.touchMu.Unlock()
	since = time.Duration(time.Now().UnixNano() - s.touched.Load())
	if since < idle/3 {
		return nil
	}
	var err error
	if since >= idle*9/10 {
		var info sandboxInfo
		if info, err = s.p.connect(ctx, s.ref.ID); err == nil {
			s.setEnvd(info)
		}
	} else {
		body := map[string]int{"timeout": s.p.timeoutSeconds()}
		_, err = s.p.cfg.apiJSON(ctx, "set sandbox timeout "+s.ref.ID, retrySafe, http.MethodPost, sandboxPath(s.ref.ID)+"/timeout", body, nil)
		if statusOf(err) == http.StatusNotFound {
			err = sandbox.ErrNotFound
		}
	}
	if errors.Is(err, sandbox.ErrNotFound) {
		return s.gone()
	}
	if err == nil {
		s.touched.Store(time.Now().UnixNano())
	}
	return nil
}

// keepAlive refreshes the time to live while a long command runs.
func (s *remoteSandbox) keepAlive(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(time.Second, s.p.cfg.IdleTimeout/3))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = s.touch(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (s *remoteSandbox) gone() error {
	if s.destroyed.Load() {
		return sandbox.ErrDestroyed
	}
	return fmt.Errorf("sandbox %s: %w", s.ref.ID, sandbox.ErrNotFound)
}

// envdFailed maps an envd failure: when the sandbox no longer exists
// according to the control plane, the error is ErrNotFound.
func (s *remoteSandbox) envdFailed(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, gerr := s.p.cfg.apiJSON(ctx, "get sandbox "+s.ref.ID, retrySafe, http.MethodGet, sandboxPath(s.ref.ID), nil, nil)
	if statusOf(gerr) == http.StatusNotFound {
		return s.gone()
	}
	return err
}

// envdRequest builds a request to envd, as Config.EnvdUser.
func (s *remoteSandbox) envdRequest(ctx context.Context, method, pathAndQuery string, body io.Reader) (*http.Request, error) {
	return s.envdRequestAs(ctx, s.p.cfg.EnvdUser, method, pathAndQuery, body)
}

// envdRequestAs builds a request to envd acting as user.
func (s *remoteSandbox) envdRequestAs(ctx context.Context, user, method, pathAndQuery string, body io.Reader) (*http.Request, error) {
	s.envd.mu.Lock()
	base, host, token := s.envd.baseURL, s.envd.host, s.envd.token
	s.envd.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, method, base+pathAndQuery, body)
	if err != nil {
		return nil, err
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	return req, nil
}

// processResult is the outcome of one process stream.
type processResult struct {
	exitCode int
	err      error
}

// startProcess starts cfg through process.Process/Start and streams its
// output into stdout and stderr until the end-of-stream frame. It returns
// when the stream is open; the result arrives on the channel, after which
// stdout and stderr are no longer written.
func (s *remoteSandbox) startProcess(ctx context.Context, cfg ProcessConfig, stdout, stderr io.Writer) (<-chan processResult, error) {
	msg, err := json.Marshal(StartRequest{Process: cfg})
	if err != nil {
		return nil, err
	}
	frame := EncodeFrame(0, msg)
	resp, err := s.p.cfg.send(ctx, "envd process start", noRetry, func(ctx context.Context) (*http.Request, error) {
		req, err := s.envdRequestAs(ctx, cmp.Or(cfg.user, s.p.cfg.EnvdUser), http.MethodPost, "/process.Process/Start", bytes.NewReader(frame))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("Connect-Protocol-Version", "1")
		return req, nil
	})
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/connect+json") {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("envd process start: %w: content type %q, want application/connect+json", ErrProtocol, ct)
	}
	out := make(chan processResult, 1)
	go func() {
		defer func() { _ = resp.Body.Close() }()
		code, err := readProcessStream(resp.Body, stdout, stderr)
		out <- processResult{code, err}
	}()
	return out, nil
}

// readProcessStream consumes a Process/Start response stream.
func readProcessStream(r io.Reader, stdout, stderr io.Writer) (int, error) {
	var end *EndEvent
	for {
		flags, msg, err := ReadFrame(r)
		if errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%w: stream ended without an end-of-stream frame", ErrProtocol)
		}
		if err != nil {
			return 0, err
		}
		if flags&flagEndStream != 0 {
			var eos EndOfStream
			if err := json.Unmarshal(msg, &eos); err != nil {
				return 0, fmt.Errorf("%w: invalid end-of-stream JSON: %v", ErrProtocol, err)
			}
			if eos.Error != nil {
				return 0, eos.Error
			}
			if end == nil {
				return 0, fmt.Errorf("%w: stream ended without a process end event", ErrProtocol)
			}
			if end.Error != nil && *end.Error != "" && !end.Exited {
				return 0, fmt.Errorf("envd: process failed: %s", *end.Error)
			}
			return end.ExitCode, nil
		}
		ev, err := decodeEvent(msg)
		if err != nil {
			return 0, err
		}
		switch e := ev.Event; {
		case e.Data != nil:
			_, _ = stdout.Write(e.Data.Stdout)
			_, _ = stdout.Write(e.Data.Pty)
			_, _ = stderr.Write(e.Data.Stderr)
		case e.End != nil:
			end = e.End
		}
	}
}

// run runs a helper script (not a user command) to completion, with args
// as its positional parameters, and returns its stdout.
func (s *remoteSandbox) run(ctx context.Context, script string, args ...string) (string, int, error) {
	return s.runLimit(ctx, 1<<20, script, args...)
}

// runLimit is run keeping at most limit bytes of stdout.
func (s *remoteSandbox) runLimit(ctx context.Context, limit int, script string, args ...string) (string, int, error) {
	return s.runFor(ctx, 30*time.Second, limit, script, args...)
}

// runFor is runLimit bounded by timeout.
func (s *remoteSandbox) runFor(ctx context.Context, timeout time.Duration, limit int, script string, args ...string) (string, int, error) {
	return s.runAs(ctx, "", timeout, limit, script, args...)
}

// runAs is runFor as user (empty: Config.EnvdUser).
func (s *remoteSandbox) runAs(ctx context.Context, user string, timeout time.Duration, limit int, script string, args ...string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdout, stderr := sandbox.CapWriter{Limit: limit}, sandbox.CapWriter{Limit: 64 << 10}
	done, err := s.startProcess(ctx, ProcessConfig{
		Cmd:  "/bin/sh",
		Args: append([]string{"-c", script, "mango-helper"}, args...),
		user: user,
	}, &stdout, &stderr)
	if err != nil {
		return "", 0, s.envdFailed(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			return "", 0, s.envdFailed(r.err)
		}
		return stdout.String(), r.exitCode, nil
	case <-ctx.Done():
		cancel()
		<-done
		return "", 0, ctx.Err()
	}
}

// sessionSetup, run as root, creates the session directories and the
// memory directory and hands them to the envd user $1, who cannot create
// them under /mnt.
const sessionSetup = `d=` + sandbox.SessionDir + `; m=` + sandbox.MemoryDir + `
mkdir -p "$d" "$d/uploads" "$d/outputs" "$m" && chown "$1" "$d" "$d/uploads" "$d/outputs" "$m"`

// ensureSession runs sessionSetup once per sandbox value, before the first
// use of a session path. It is best effort: a template without a root
// user, or with the directories already in place, is left as it is, and
// the file operation that follows reports what is wrong.
func (s *remoteSandbox) ensureSession(ctx context.Context) {
	s.sessionMu.Lock()
	defer s.sessionMu.Unlock()
	if s.sessionReady {
		return
	}
	// A setup that ran and failed (its exit code) is not retried either:
	// the directories are then not ours to fix.
	if _, _, err := s.runAs(ctx, "root", 30*time.Second, 4<<10, sessionSetup, s.p.cfg.EnvdUser); err == nil {
		s.sessionReady = true
	}
}

func (s *remoteSandbox) probeRoot(ctx context.Context) (string, error) {
	out, code, err := s.run(ctx, probe)
	if err != nil {
		return "", fmt.Errorf("sandbox %s: prepare workspace: %w", s.ref.ID, err)
	}
	root := strings.TrimSpace(out)
	if code != 0 || !path.IsAbs(root) {
		return "", fmt.Errorf("sandbox %s: prepare workspace: exit code %d, output %q", s.ref.ID, code, out)
	}
	return root, nil
}

// Exec runs req.Command in the workspace. Cancellation and timeouts kill
// the command's process group from a second process.
func (s *remoteSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	timeout := defaults.Positive(req.Timeout, s.p.cfg.ExecTimeout)
	limit := defaults.Positive(req.MaxOutput, s.p.cfg.MaxOutput)
	prefix := path.Join(s.stateDir(), shellexec.NewToken())
	stdinFile := ""
	if req.Stdin != nil {
		stdinFile = prefix + ".stdin"
		if err := s.upload(ctx, stdinFile, req.Stdin); err != nil {
			return nil, fmt.Errorf("exec: upload stdin: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	runCtx, cancelRun := context.WithTimeout(ctx, timeout)
	defer cancelRun()
	// The stream outlives a timeout (to collect the output produced before
	// the kill), so it has its own context.
	streamCtx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStream()
	stopKeep := s.keepAlive(streamCtx)
	defer stopKeep()

	out := sandbox.NewOutput(limit)
	done, err := s.startProcess(streamCtx, ProcessConfig{
		Cmd:  "/bin/sh",
		Args: []string{"-c", wrapper, "mango-exec", req.Command, prefix, stdinFile},
		Envs: req.Env,
		Cwd:  s.root,
	}, &out.Stdout, &out.Stderr)
	if err != nil {
		s.killGroup(prefix)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("exec: %w", s.envdFailed(err))
	}
	var r processResult
	select {
	case r = <-done:
	case <-runCtx.Done():
		s.killGroup(prefix)
		if ctx.Err() != nil {
			cancelStream()
			<-done
			return nil, ctx.Err()
		}
		select {
		case <-done:
		case <-time.After(killGrace):
			cancelStream()
			<-done
		}
		return out.Result(-1, true, time.Since(start)), nil
	}
	if r.err != nil {
		s.killGroup(prefix)
		return nil, fmt.Errorf("exec: %w", s.envdFailed(r.err))
	}
	return out.Result(r.exitCode, false, time.Since(start)), nil
}

// killGroup kills the process group of the command with state prefix, on
// its own context (the caller's is usually done).
func (s *remoteSandbox) killGroup(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = backoff.Retry(ctx, func() (struct{}, error) {
		_, _, err := s.run(ctx, killer, prefix)
		if errors.Is(err, sandbox.ErrNotFound) {
			return struct{}{}, nil
		}
		return struct{}{}, err
	}, backoff.WithBackOff(&backoff.ZeroBackOff{}), backoff.WithMaxTries(3))
}

// resolve checks p lexically, then resolves its symbolic links inside the
// sandbox; a path leaving the workspace and the session directory either
// way is ErrPathEscape. It returns the resolved path, which names a file
// (not the root nor the session directory).
func (s *remoteSandbox) resolve(ctx context.Context, p string) (string, error) {
	real, err := s.resolveAny(ctx, p)
	if err != nil {
		return "", err
	}
	if real == s.root || sandbox.IsSessionRoot(real) {
		return "", fmt.Errorf("%q: is a directory", p)
	}
	return real, nil
}

// resolveAny is resolve allowing the root and the session directory.
func (s *remoteSandbox) resolveAny(ctx context.Context, p string) (string, error) {
	abs, err := shellexec.Lexical(s.root, p)
	if err != nil {
		return "", err
	}
	if _, ok := sandbox.SessionRoot(abs); ok {
		s.ensureSession(ctx)
	}
	out, code, err := s.run(ctx, resolver, abs)
	if err != nil {
		return "", err
	}
	real := strings.TrimSuffix(out, "\n")
	if code != 0 || !path.IsAbs(real) {
		return "", fmt.Errorf("%q: cannot resolve symbolic links (exit code %d)", p, code)
	}
	if !shellexec.Allowed(s.root, real) {
		return "", fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
	}
	return real, nil
}

func (s *remoteSandbox) filesQuery(p string) string {
	q := url.Values{}
	q.Set("path", p)
	q.Set("username", s.p.cfg.EnvdUser)
	return "/files?" + q.Encode()
}

// ReadFile reads a file of the workspace through envd's /files.
func (s *remoteSandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	real, err := s.resolve(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	resp, err := s.p.cfg.send(ctx, "envd read "+p, retrySafe, func(ctx context.Context) (*http.Request, error) {
		return s.envdRequest(ctx, http.MethodGet, s.filesQuery(real), nil)
	})
	if statusOf(err) == http.StatusNotFound {
		return nil, fmt.Errorf("read %s: %w", p, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, s.envdFailed(err))
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("read %s: file larger than %d bytes", p, maxFileSize)
	}
	return data, nil
}

// WriteFile writes a file of the workspace through envd's /files, which
// creates missing parent directories.
func (s *remoteSandbox) WriteFile(ctx context.Context, p string, data []byte, perm fs.FileMode) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	real, err := s.resolve(ctx, p)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := s.upload(ctx, real, data); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if perm != 0 && perm.Perm() != 0o644 {
		if _, code, err := s.run(ctx, `chmod "$1" "$2"`, fmt.Sprintf("%o", perm.Perm()), real); err != nil || code != 0 {
			return fmt.Errorf("write %s: chmod %o: exit code %d: %v", p, perm.Perm(), code, err)
		}
	}
	return nil
}

// upload writes data to the absolute path p (multipart, as the SDKs do).
func (s *remoteSandbox) upload(ctx context.Context, p string, data []byte) error {
	body := transfer.MultipartBytes(transfer.FormFile("file", path.Base(p)), data)
	resp, err := s.p.cfg.send(ctx, "envd write "+p, retrySafe, func(ctx context.Context) (*http.Request, error) {
		r, ctype, err := body()
		if err != nil {
			return nil, err
		}
		req, err := s.envdRequest(ctx, http.MethodPost, s.filesQuery(p), r)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", ctype)
		return req, nil
	})
	if err != nil {
		return s.envdFailed(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	return nil
}

var _ sandbox.Sandbox = (*remoteSandbox)(nil)
