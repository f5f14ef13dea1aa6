package sandboxdaytona

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// execDir holds the files of running commands inside the sandbox.
const execDir = "/tmp/.mango-exec"

// emitFunc prints the envelope of the command whose file prefix is $1 and
// removes its files: a header line with the exit status (-1 when unknown),
// then stdout and stderr base64-encoded, each block ended by a marker line.
const emitFunc = `emit() {
rc=$(cat "$1.rc" 2>/dev/null); [ -n "$rc" ] || rc=-1
printf '\nMANGO-EXEC-1 %s\n' "$rc"
base64 < "$1.out" 2>/dev/null; printf '\n--\n'
base64 < "$1.err" 2>/dev/null; printf '\n--END\n'
clean
}
clean() {
rm -f "$t.pid" "$t.rc" "$t.out" "$t.err" "$t.fin" "$t.cancel"
[ -z "$inf" ] || rm -f "$inf"
}
`

// wrapperBody runs $cmd (variables t, n, inf, root and cmd are set before
// it; inf is the uploaded stdin file, or empty). The command runs in a new session and process group (setsid) whose
// id it records in $t.pid before checking the cancellation marker, so a
// killer either finds the pid or the command sees the marker and never
// starts. Its stdout and stderr each go through "head -c $n" into a file;
// "cat > /dev/null" drains the rest so the command never gets SIGPIPE. The
// wrapper's own stderr is /dev/null, so shell notices never mix into the
// command's output. Cancellation markers left by a killer whose command
// never started are swept after ten minutes. When a killer marked the command cancelled, the
// wrapper prints nothing: the killer reports and cleans up (or, if the
// command never started, the wrapper cleans up).
const wrapperBody = emitFunc + `exec 2>/dev/null
mkdir -p ` + execDir + `
find ` + execDir + ` -name '*.cancel' -mmin +10 -exec rm -f {} + </dev/null
cd "$root" || { printf '\nMANGO-EXEC-ERROR cannot enter the workspace\n'; exit 0; }
: > "$t.out"; : > "$t.err"
{ { setsid /bin/sh -c 'echo $$ > "$2.pid"; if [ -e "$2.cancel" ]; then rm -f "$2.pid"; exit 137; fi; exec /bin/sh -c "$1" 2>&4 4>&-' mango-cmd "$cmd" "$t" <"${inf:-/dev/null}" 4>&1 1>&3 3>&-; echo $? > "$t.rc"; } | { head -c "$n" > "$t.err"; cat > /dev/null; }; } 3>&1 | { head -c "$n" > "$t.out"; cat > /dev/null; }
: > "$t.fin"
if [ -e "$t.cancel" ]; then
	[ -e "$t.pid" ] || clean
	exit 0
fi
emit "$t"
`

// killerBody marks the command $t cancelled and kills its process group.
// With report=1 it waits briefly for the capture to finish and prints the
// envelope of what the command wrote until then.
const killerBody = emitFunc + `exec 2>/dev/null
mkdir -p ` + execDir + `
: > "$t.cancel"
pg=$(cat "$t.pid" 2>/dev/null)
if [ -z "$pg" ]; then
	[ "$report" = 1 ] && printf '\nMANGO-EXEC-1 -1\n\n--\n\n--END\n'
	exit 0
fi
kill -9 "-$pg"
if [ "$report" = 1 ]; then
	i=0
	while [ ! -e "$t.fin" ] && [ $i -lt 20 ]; do sleep 0.05; i=$((i+1)); done
	emit "$t"
else
	clean
fi
exit 0
`

// quote single-quotes s for /bin/sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// shellCommand turns a script into the command string sent to the
// toolbox. The script travels base64-encoded, so the string contains no
// quote or shell metacharacter the daemon's own command splitting (or a
// shell, whichever it uses) could alter; it is decoded and piped into
// /bin/sh inside the sandbox. The script must not read its standard input.
func shellCommand(script string) string {
	return `/bin/sh -c "echo ` + base64.StdEncoding.EncodeToString([]byte(script)) + ` | base64 -d | /bin/sh"`
}

type executeRequest struct {
	Command string `json:"command"`
	Cwd     string `json:"cwd,omitempty"`
	Timeout int    `json:"timeout"`
}

type executeResponse struct {
	ExitCode *int    `json:"exitCode"`
	Result   *string `json:"result"`
}

// execute runs a script through POST /process/execute and returns its
// combined output. timeout is the daemon's own limit, a backstop.
func (s *remoteSandbox) execute(ctx context.Context, script string, timeout time.Duration) (string, error) {
	secs := int((timeout + time.Second - 1) / time.Second)
	body := executeRequest{Command: shellCommand(script), Cwd: s.root, Timeout: max(secs, 1)}
	data, err := s.call(ctx, "/process/execute", request{method: http.MethodPost, body: jsonBody(body)})
	if err != nil {
		return "", err
	}
	var r executeResponse
	if err := decode("process/execute", data, &r); err != nil {
		return "", err
	}
	if r.Result == nil {
		return "", fmt.Errorf("daytona: process/execute: %w: no result", errMalformed)
	}
	return *r.Result, nil
}

// envelope is a decoded wrapper report.
type envelope struct {
	rc             int
	stdout, stderr []byte
}

// parseEnvelope decodes the wrapper's report from the combined output.
func parseEnvelope(out string) (envelope, error) {
	if i := strings.Index(out, "\nMANGO-EXEC-ERROR "); i >= 0 {
		msg, _, _ := strings.Cut(out[i+len("\nMANGO-EXEC-ERROR "):], "\n")
		return envelope{}, fmt.Errorf("exec wrapper: %s", msg)
	}
	const head = "\nMANGO-EXEC-1 "
	i := strings.LastIndex(out, head)
	if i < 0 {
		return envelope{}, fmt.Errorf("daytona: process/execute: %w: no exec envelope in the output (%d bytes)", errMalformed, len(out))
	}
	rest := out[i+len(head):]
	line, rest, ok := strings.Cut(rest, "\n")
	if !ok {
		return envelope{}, fmt.Errorf("daytona: process/execute: %w: truncated exec envelope", errMalformed)
	}
	rc, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return envelope{}, fmt.Errorf("daytona: process/execute: %w: exit status %q", errMalformed, line)
	}
	outB64, rest, ok1 := strings.Cut(rest, "\n--\n")
	errB64, _, ok2 := strings.Cut(rest, "\n--END\n")
	if !ok1 || !ok2 {
		return envelope{}, fmt.Errorf("daytona: process/execute: %w: truncated exec envelope", errMalformed)
	}
	e := envelope{rc: rc}
	if e.stdout, err = base64.StdEncoding.DecodeString(outB64); err != nil {
		return envelope{}, fmt.Errorf("daytona: process/execute: %w: stdout: %v", errMalformed, err)
	}
	if e.stderr, err = base64.StdEncoding.DecodeString(errB64); err != nil {
		return envelope{}, fmt.Errorf("daytona: process/execute: %w: stderr: %v", errMalformed, err)
	}
	return e, nil
}

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

func validEnvName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for _, c := range k {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// envPrefix exports the sandbox's and the request's variables.
func envPrefix(layers ...map[string]string) (string, error) {
	vars := map[string]string{}
	for _, l := range layers {
		maps.Copy(vars, l)
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if !validEnvName(k) || strings.ContainsRune(vars[k], 0) {
			return "", fmt.Errorf("invalid environment variable %q", k)
		}
		b.WriteString("export " + k + "=" + quote(vars[k]) + "\n")
	}
	return b.String(), nil
}

// Exec runs req.Command; see the package documentation for the wrapper.
func (s *remoteSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = s.p.cfg.ExecTimeout
	}
	limit := req.MaxOutput
	if limit <= 0 {
		limit = s.p.cfg.MaxOutput
	}
	env, err := envPrefix(s.env, req.Env)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	token := newToken()
	prefix := execDir + "/" + token
	in := ""
	if req.Stdin != nil {
		// The upload goes beside the exec directory: the toolbox need not
		// create parent directories.
		in = "/tmp/.mango-in-" + token
		if err := s.upload(ctx, in, req.Stdin); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("exec: upload stdin: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	script := "t=" + quote(prefix) + "\nn=" + strconv.Itoa(limit+1) + "\ninf=" + quote(in) +
		"\nroot=" + quote(s.root) + "\ncmd=" + quote(env+req.Command) + "\n" + wrapperBody

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	// The daemon's own timeout is a backstop well after ours.
	out, err := s.execute(runCtx, script, timeout+time.Minute)
	dur := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			s.kill(token, in, false)
			return nil, ctx.Err()
		}
		if runCtx.Err() != nil {
			res := &sandbox.ExecResult{ExitCode: -1, TimedOut: true, Duration: dur}
			if e, ok := s.kill(token, in, true); ok {
				res.Stdout, res.Stderr, res.Truncated = capOutput(e, limit)
			}
			return res, nil
		}
		s.kill(token, in, false)
		if s.destroyed.Load() {
			return nil, sandbox.ErrDestroyed
		}
		return nil, fmt.Errorf("exec in sandbox %s: %w", s.ref.ID, err)
	}
	e, err := parseEnvelope(out)
	if err != nil {
		s.kill(token, in, false)
		return nil, fmt.Errorf("exec in sandbox %s: %w", s.ref.ID, err)
	}
	res := &sandbox.ExecResult{ExitCode: e.rc, Duration: dur}
	res.Stdout, res.Stderr, res.Truncated = capOutput(e, limit)
	return res, nil
}

func capOutput(e envelope, limit int) (stdout, stderr []byte, truncated bool) {
	stdout, stderr = e.stdout, e.stderr
	if len(stdout) > limit {
		stdout, truncated = stdout[:limit], true
	}
	if len(stderr) > limit {
		stderr, truncated = stderr[:limit], true
	}
	return bytes.Clone(stdout), bytes.Clone(stderr), truncated
}

// kill kills the command's process group from a second execute, on its own
// context (the caller's is usually done). With report it returns what the
// command wrote until it was killed.
func (s *remoteSandbox) kill(token, in string, report bool) (envelope, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := "0"
	if report {
		r = "1"
	}
	script := "t=" + quote(execDir+"/"+token) + "\ninf=" + quote(in) + "\nreport=" + r + "\n" + killerBody
	out, err := s.execute(ctx, script, 30*time.Second)
	if err != nil || !report {
		return envelope{}, false
	}
	e, err := parseEnvelope(out)
	return e, err == nil
}
