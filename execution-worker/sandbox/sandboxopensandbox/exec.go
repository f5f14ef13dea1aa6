package sandboxopensandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
)

// execDir holds the pid, cancellation, stdin and output files of commands.
const execDir = "/tmp/.mango-exec"

// wrapper runs $1 (the command) in a new session and process group whose id
// it records in $2.pid, with stdin from $3 and output spooled to $2.out and
// $2.err. The command does not start when the cancellation marker $2.cancel
// exists. When the command ends, what it left running in its group is
// killed.
const wrapper = `p="$2"; mkdir -p "${p%/*}" 2>/dev/null; : > "$p.out"; : > "$p.err"
setsid /bin/sh -c 'echo $$ > "$2.pid"; [ -e "$2.cancel" ] && exit 137; exec /bin/sh -c "$1" < "$3" > "$2.out" 2> "$2.err"' mango-cmd "$1" "$p" "$3"
rc=$?; pg=$(cat "$p.pid" 2>/dev/null); [ -n "$pg" ] && kill -KILL "-$pg" 2>/dev/null
rm -f "$p.pid" "$p.cancel" "$p.in"; exit $rc`

// killer marks the command with prefix $1 cancelled and kills its group.
const killer = `p="$1"; mkdir -p "${p%/*}" 2>/dev/null; : > "$p.cancel"
pg=$(cat "$p.pid" 2>/dev/null)
if [ -n "$pg" ]; then kill -KILL "-$pg" 2>/dev/null; fi
exit 0`

// probe creates the workspace and prints its physical path.
const probe = `r="${MANGO_WORKSPACE:-` + DefaultRoot + `}"; mkdir -p -- "$r" && cd -- "$r" && pwd -P`

// maxFrame bounds one event of the command stream.
const maxFrame = 4 << 20

// remote is one session's sandbox.
type remote struct {
	p         *Provider
	ref       sandbox.Ref
	execd     string
	hdr       http.Header
	root      string
	destroyed atomic.Bool
}

// connect finds execd of a Running sandbox and its workspace root.
func (p *Provider) connect(ctx context.Context, id string) (*remote, error) {
	base, hdr, err := p.endpoint(ctx, id, ExecdPort)
	if err != nil {
		return nil, err
	}
	s := &remote{p: p, ref: sandbox.Ref{Provider: Name, ID: id}, execd: base, hdr: hdr}
	res, err := s.run(ctx, probe, "/", nil)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: find workspace: %w", id, err)
	}
	root := strings.TrimSpace(res.stdout.String())
	if res.code != 0 || !strings.HasPrefix(root, "/") {
		return nil, fmt.Errorf("sandbox %s: find workspace: exit %d, output %q", id, res.code, root)
	}
	s.root = root
	return s, nil
}

func (s *remote) Ref() sandbox.Ref { return s.ref }
func (s *remote) Root() string     { return s.root }

// usable returns ErrDestroyed after Destroy, else ctx.Err().
func (s *remote) usable(ctx context.Context) error {
	if s.destroyed.Load() {
		return sandbox.ErrDestroyed
	}
	return ctx.Err()
}

// Destroy deletes the sandbox; it is idempotent.
func (s *remote) Destroy(ctx context.Context) error {
	if err := s.p.deleteSandbox(ctx, s.ref.ID); err != nil {
		return err
	}
	s.destroyed.Store(true)
	return nil
}

// event is one object of the command stream.
type event struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Error *struct {
		Ename  string `json:"ename"`
		Evalue string `json:"evalue"`
	} `json:"error"`
}

// runResult is what a raw execd command did.
type runResult struct {
	code   int
	stdout bytes.Buffer
}

// run posts command to execd and reads its event stream to the end.
func (s *remote) run(ctx context.Context, command, cwd string, env map[string]string) (*runResult, error) {
	body := map[string]any{"command": command, "cwd": cwd, "background": false}
	if len(env) > 0 {
		body["envs"] = env
	}
	hdr := s.hdr.Clone()
	hdr.Set("Accept", "text/event-stream")
	resp, err := s.p.do(ctx, "run command", request{method: http.MethodPost, url: s.execd + "/command", header: hdr, body: httpcall.JSONBody(body)})
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	res := &runResult{}
	err = readEvents(resp.Body, func(ev event) error {
		switch ev.Type {
		case "stdout":
			res.stdout.WriteString(ev.Text)
		case "error":
			if ev.Error == nil {
				return errors.New("error event without error")
			}
			code, err := strconv.Atoi(strings.TrimSpace(ev.Error.Evalue))
			if err != nil {
				return fmt.Errorf("command failed: %s: %s", ev.Error.Ename, ev.Error.Evalue)
			}
			res.code = code
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("command stream: %w", err)
	}
	return res, nil
}

// readEvents parses a stream of JSON objects separated by blank lines (a
// "data:" prefix is tolerated) and calls fn for each.
func readEvents(r io.Reader, fn func(event) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var frame []byte
	flush := func() error {
		if len(bytes.TrimSpace(frame)) == 0 {
			frame = frame[:0]
			return nil
		}
		var ev event
		if err := json.Unmarshal(frame, &ev); err != nil {
			return fmt.Errorf("malformed frame %q: %w", clip(frame), err)
		}
		frame = frame[:0]
		return fn(ev)
	}
	for {
		line, err := br.ReadBytes('\n')
		t := bytes.TrimRight(line, "\r\n")
		if after, ok := bytes.CutPrefix(t, []byte("data:")); ok {
			t = bytes.TrimLeft(after, " ")
		}
		if len(t) == 0 && len(line) > 0 {
			if ferr := flush(); ferr != nil {
				return ferr
			}
		} else if len(t) > 0 {
			if len(frame) == 0 && t[0] != '{' {
				return fmt.Errorf("malformed frame %q: not a JSON object", clip(t))
			}
			frame = append(frame, t...)
			frame = append(frame, '\n')
			if len(frame) > maxFrame {
				return fmt.Errorf("malformed frame: larger than %d bytes", maxFrame)
			}
		}
		if errors.Is(err, io.EOF) {
			return flush()
		}
		if err != nil {
			return err
		}
	}
}

func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// Exec runs req.Command in the workspace; see the package documentation.
func (s *remote) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	timeout := defaults.Positive(req.Timeout, s.p.cfg.ExecTimeout)
	limit := defaults.Positive(req.MaxOutput, s.p.cfg.MaxOutput)
	prefix := execDir + "/" + shellexec.NewToken()
	stdin := "/dev/null"
	if req.Stdin != nil {
		if err := s.upload(ctx, prefix+".in", req.Stdin, 0o600); err != nil {
			return nil, fmt.Errorf("exec: upload stdin: %w", s.mapErr(ctx, err))
		}
		stdin = prefix + ".in"
	}
	defer s.cleanup(prefix)
	cmd := "/bin/sh -c " + shellexec.Quote(wrapper) + " mango-exec " + shellexec.Quote(req.Command) + " " + shellexec.Quote(prefix) + " " + shellexec.Quote(stdin)

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res, err := s.run(runCtx, cmd, s.root, req.Env)
	dur := time.Since(start)
	if runCtx.Err() != nil {
		s.kill(prefix)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		out := &sandbox.ExecResult{ExitCode: -1, TimedOut: true, Duration: dur}
		bg, cancelBG := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancelBG()
		_ = s.fetchOutput(bg, prefix, limit, out) // output produced until the kill, as far as it can be read
		return out, nil
	}
	if err != nil {
		s.kill(prefix)
		return nil, fmt.Errorf("exec in sandbox %s: %w", s.ref.ID, s.mapErr(ctx, err))
	}
	out := &sandbox.ExecResult{ExitCode: res.code, Duration: dur}
	if err := s.fetchOutput(ctx, prefix, limit, out); err != nil {
		return nil, fmt.Errorf("exec in sandbox %s: read output: %w", s.ref.ID, s.mapErr(ctx, err))
	}
	return out, nil
}

func (s *remote) fetchOutput(ctx context.Context, prefix string, limit int, out *sandbox.ExecResult) error {
	var truncOut, truncErr bool
	var err error
	if out.Stdout, truncOut, err = s.download(ctx, prefix+".out", limit); err != nil {
		return err
	}
	if out.Stderr, truncErr, err = s.download(ctx, prefix+".err", limit); err != nil {
		return err
	}
	out.Truncated = truncOut || truncErr
	return nil
}

// kill kills the command's process group from a second command, on its own
// context (the caller's is usually done).
func (s *remote) kill(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = s.run(ctx, "/bin/sh -c "+shellexec.Quote(killer)+" mango-kill "+shellexec.Quote(prefix), "/", nil)
}

// cleanup removes the spool files of a command (best effort).
func (s *remote) cleanup(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q := "path=" + queryEscape(prefix+".out") + "&path=" + queryEscape(prefix+".err") + "&path=" + queryEscape(prefix+".in")
	resp, err := s.p.do(ctx, "remove spool files", request{method: http.MethodDelete, url: s.execd + "/files?" + q, header: s.hdr})
	if err == nil {
		_ = resp.Body.Close()
	}
}

// mapErr turns errors of a vanished sandbox into sandbox errors.
func (s *remote) mapErr(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, sandbox.ErrPathEscape) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if err := s.usable(ctx); err != nil {
		return err
	}
	st, gerr := s.p.get(ctx, s.ref.ID)
	if errors.Is(gerr, sandbox.ErrNotFound) || (gerr == nil && gone(st.Status.State)) {
		return fmt.Errorf("%w (%v)", sandbox.ErrNotFound, err)
	}
	return err
}

var _ sandbox.Sandbox = (*remote)(nil)
