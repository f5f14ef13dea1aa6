// Package shellexec runs commands and checks paths in a remote sandbox whose
// service offers little more than "run this script and return what it
// printed": no separate stdout and stderr, no binary-safe output, no
// cancellation, no output cap, or no symlink-aware path check. Adapters
// (sandboxdaytona, sandboxk8s) supply a [Runner] over their service's
// execute call and get the sandbox contract on top of it.
//
// # Commands
//
// [Shell.Exec] runs every command through a shell wrapper: the command
// runs under setsid in a new session and process group whose id is written
// to /tmp/.mango-exec/TOKEN.pid; its stdout and stderr go through "head -c"
// into separate files (the rest is drained and dropped, so the command
// never sees a broken pipe); when it ends the wrapper prints a small
// envelope with the exit status and both files base64-encoded, which Exec
// decodes. On timeout or cancellation Exec abandons the call and runs a
// second script that marks the token cancelled and runs kill -KILL -PGID,
// so the command and every child left in its group die; for a timeout the
// killer also returns the output captured so far. Stdin is staged in a file
// by the adapter first. The sandbox needs /bin/sh, setsid, head, cat,
// base64, find, mkdir, rm, sleep and kill.
//
// # Paths
//
// [Lexical] checks a path against the workspace root without contacting
// the sandbox; [Shell.Resolve] then resolves it inside the sandbox with
// readlink -f, so a path that leaves the root through a symbolic link is
// [sandbox.ErrPathEscape]. Paths under the session roots
// ([sandbox.SessionRoots]: /mnt/session, /mnt/memory) are accepted as well, and /workspace/x names root/x. A command running concurrently can race the
// check by swapping a component for a link; the sandbox is the isolation
// boundary, the check keeps file access within the workspace.
//
// # Trees
//
// [Shell.PutTree] copies a tree in one tar archive: the adapter uploads
// the stream to a file in the sandbox with its service's upload call, and
// tar extracts it there.
package shellexec

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/sandbox"
)

// ErrMalformed marks output that does not follow the wrapper's protocol.
var ErrMalformed = errors.New("malformed response")

// Runner runs script with /bin/sh inside the sandbox and returns what it
// printed on standard output (services that combine stdout and stderr may
// return both; the scripts keep their own stderr quiet). The script must
// not need standard input. timeout is a backstop the service may enforce
// on its side; ctx bounds the call.
type Runner func(ctx context.Context, script string, timeout time.Duration) (string, error)

// Shell runs commands and resolves paths in one sandbox.
type Shell struct {
	// Run executes scripts.
	Run Runner
	// Root is the workspace root: commands start there, paths are
	// confined to it.
	Root string
	// Env holds variables exported to every command (the request's Env
	// overrides them).
	Env map[string]string
	// StageStdin writes a command's standard input to a new file in the
	// sandbox and returns its absolute path; the wrapper deletes the file
	// when the command ends. token is unique to the command and safe in a
	// file name.
	StageStdin func(ctx context.Context, token string, data []byte) (string, error)
	// ID names the sandbox in errors.
	ID string
	// Destroyed, when set, reports that Destroy was called: Command,
	// ReadTarget and WriteTarget then return sandbox.ErrDestroyed.
	Destroyed *atomic.Bool
	// DefaultTimeout and DefaultMaxOutput apply to requests without their
	// own.
	DefaultTimeout   time.Duration
	DefaultMaxOutput int
}

// destroyed reports whether Destroy was called.
func (sh *Shell) destroyed() bool { return sh.Destroyed != nil && sh.Destroyed.Load() }

// usable returns ErrDestroyed after Destroy, else ctx.Err().
func (sh *Shell) usable(ctx context.Context) error {
	if sh.destroyed() {
		return sandbox.ErrDestroyed
	}
	return ctx.Err()
}

// Command is [sandbox.Sandbox.Exec] over Exec: it applies the defaults and
// maps errors (a cancelled ctx is its error; after Destroy, ErrDestroyed;
// others name the sandbox).
func (sh *Shell) Command(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	if err := sh.usable(ctx); err != nil {
		return nil, err
	}
	req.Timeout = defaults.Positive(req.Timeout, sh.DefaultTimeout)
	req.MaxOutput = defaults.Positive(req.MaxOutput, sh.DefaultMaxOutput)
	res, err := sh.Exec(ctx, req)
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case sh.destroyed():
		return nil, sandbox.ErrDestroyed
	}
	return nil, fmt.Errorf("exec in sandbox %s: %w", sh.ID, err)
}

// FileErr keeps err, or reports ErrDestroyed after Destroy.
func (sh *Shell) FileErr(err error) error {
	if sh.destroyed() {
		return sandbox.ErrDestroyed
	}
	return err
}

// ReadTarget resolves p for reading: a regular file under the root. A
// missing file matches fs.ErrNotExist. Errors name p.
func (sh *Shell) ReadTarget(ctx context.Context, p string) (Resolved, error) {
	if err := sh.usable(ctx); err != nil {
		return Resolved{}, err
	}
	r, err := sh.Resolve(ctx, p, false)
	switch {
	case err != nil:
		return Resolved{}, fmt.Errorf("read %s: %w", p, sh.FileErr(err))
	case r.Kind == KindMissing:
		return Resolved{}, fmt.Errorf("read %s: %w", p, fs.ErrNotExist)
	case r.Kind != KindFile:
		return Resolved{}, fmt.Errorf("read %s: not a regular file", p)
	}
	return r, nil
}

// WriteTarget resolves p for writing, creating its missing parents: a
// regular file or a missing one under the root. Errors name p.
func (sh *Shell) WriteTarget(ctx context.Context, p string) (Resolved, error) {
	if err := sh.usable(ctx); err != nil {
		return Resolved{}, err
	}
	r, err := sh.Resolve(ctx, p, true)
	switch {
	case err != nil:
		return Resolved{}, fmt.Errorf("write %s: %w", p, sh.FileErr(err))
	case r.Kind == KindDir || r.Kind == KindOther:
		return Resolved{}, fmt.Errorf("write %s: not a regular file", p)
	}
	return r, nil
}

// RemoveTarget resolves p for removal (see [RemovePath]) with Resolve.
func (sh *Shell) RemoveTarget(ctx context.Context, p string) (target string, ok bool, err error) {
	return RemovePath(sh.Root, p, func(dir string) (string, bool, error) {
		r, err := sh.Resolve(ctx, dir, false)
		if err != nil {
			return "", false, sh.FileErr(err)
		}
		return r.Path, r.Kind != KindMissing, nil
	})
}

// RemovePath returns the path to remove for p: p checked lexically (see
// [Lexical]), with the symbolic links of its parent resolved by
// resolveDir and p itself, when a link, kept (removed, not followed).
// resolveDir returns the resolved form of an absolute directory, and false
// when it is missing: then ok is false, as there is nothing to remove. The
// workspace root and the session roots ([sandbox.SessionRoots]) cannot be
// removed. Errors name p.
func RemovePath(root, p string, resolveDir func(dir string) (string, bool, error)) (target string, ok bool, err error) {
	abs, err := Lexical(root, p)
	if err != nil {
		return "", false, fmt.Errorf("remove %s: %w", p, err)
	}
	if abs == root {
		return "", false, fmt.Errorf("remove %s: is the workspace root", p)
	}
	if sandbox.IsSessionRoot(abs) {
		return "", false, fmt.Errorf("remove %s: cannot remove a top directory", p)
	}
	parent, ok, err := resolveDir(path.Dir(abs))
	if err != nil {
		return "", false, fmt.Errorf("remove %s: %w", p, err)
	}
	if !ok {
		return "", false, nil
	}
	return path.Join(parent, path.Base(abs)), true, nil
}

// Written finishes a write to r: a new file gets perm (unless it is 0 or
// the service's 0644).
func (sh *Shell) Written(ctx context.Context, r Resolved, p string, perm fs.FileMode) error {
	if perm = perm.Perm(); r.Kind == KindMissing && perm != 0 && perm != 0o644 {
		if err := sh.Chmod(ctx, r.Path, perm); err != nil {
			return fmt.Errorf("write %s: %w", p, sh.FileErr(err))
		}
	}
	return nil
}

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
rm -f "$t.pid" "$t.rc" "$t.out" "$t.err" "$t.fin" "$t.cancel" "$t.cmd"
[ -z "$inf" ] || rm -f "$inf"
}
`

// wrapperBody runs $cmd (variables t, n, inf, root and cmd are set before
// it; inf is the staged stdin file, or empty). The command is written to
// $t.cmd and run from there, so its length is not bound by the limit on
// one exec argument. The command runs in a new
// session and process group (setsid) whose id it records in $t.pid before
// checking the cancellation marker, so a killer either finds the pid or the
// command sees the marker and never starts. Its stdout and stderr each go
// through "head -c $n" into a file; "cat > /dev/null" drains the rest so the
// command never gets SIGPIPE. The wrapper's own stderr is /dev/null, so
// shell notices never mix into the command's output. Cancellation markers
// left by a killer whose command never started are swept after ten minutes.
// When a killer marked the command cancelled, the wrapper prints nothing:
// the killer reports and cleans up (or, if the command never started, the
// wrapper cleans up).
const wrapperBody = emitFunc + `exec 2>/dev/null
mkdir -p ` + execDir + `
find ` + execDir + ` -name '*.cancel' -mmin +10 -exec rm -f {} + </dev/null
cd "$root" || { [ -z "$inf" ] || rm -f "$inf"; printf '\nMANGO-EXEC-ERROR cannot enter the workspace\n'; exit 0; }
: > "$t.out"; : > "$t.err"; printf '%s' "$cmd" > "$t.cmd"
{ { setsid /bin/sh -c 'echo $$ > "$1.pid"; if [ -e "$1.cancel" ]; then rm -f "$1.pid"; exit 137; fi; exec /bin/sh "$1.cmd" 2>&4 4>&-' mango-cmd "$t" <"${inf:-/dev/null}" 4>&1 1>&3 3>&-; echo $? > "$t.rc"; } | { head -c "$n" > "$t.err"; cat > /dev/null; }; } 3>&1 | { head -c "$n" > "$t.out"; cat > /dev/null; }
: > "$t.fin"
if [ -e "$t.cancel" ]; then
	[ -e "$t.pid" ] || clean
	exit 0
fi
emit "$t"
`

// killerBody marks the command $t cancelled and kills its process group.
// A command that has not recorded its group yet sees the marker and never
// starts, so its staged stdin is removed at once. With report=1 it waits briefly for the capture to finish and prints the
// envelope of what the command wrote until then.
const killerBody = emitFunc + `exec 2>/dev/null
mkdir -p ` + execDir + `
: > "$t.cancel"
pg=$(cat "$t.pid" 2>/dev/null)
if [ -z "$pg" ]; then
	[ -z "$inf" ] || rm -f "$inf"
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

// Quote single-quotes s for /bin/sh (see [sandbox.ShellQuote]).
func Quote(s string) string { return sandbox.ShellQuote(s) }

// NewToken returns a random identifier safe in file names.
func NewToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// ValidEnvName reports whether k is a portable environment variable name.
func ValidEnvName(k string) bool {
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

// envPrefix exports the variables of the layers, later layers winning.
func envPrefix(layers ...map[string]string) (string, error) {
	vars := map[string]string{}
	for _, l := range layers {
		maps.Copy(vars, l)
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if !ValidEnvName(k) || strings.ContainsRune(vars[k], 0) {
			return "", fmt.Errorf("invalid environment variable %q", k)
		}
		b.WriteString("export " + k + "=" + Quote(vars[k]) + "\n")
	}
	return b.String(), nil
}

// envelope is a decoded wrapper report.
type envelope struct {
	rc             int
	stdout, stderr []byte
}

// parseEnvelope decodes the wrapper's report from the script's output.
func parseEnvelope(out string) (envelope, error) {
	if i := strings.Index(out, "\nMANGO-EXEC-ERROR "); i >= 0 {
		msg, _, _ := strings.Cut(out[i+len("\nMANGO-EXEC-ERROR "):], "\n")
		return envelope{}, fmt.Errorf("exec wrapper: %s", msg)
	}
	const head = "\nMANGO-EXEC-1 "
	i := strings.LastIndex(out, head)
	if i < 0 {
		return envelope{}, fmt.Errorf("exec: %w: no exec envelope in the output (%d bytes)", ErrMalformed, len(out))
	}
	line, rest, ok := strings.Cut(out[i+len(head):], "\n")
	if !ok {
		return envelope{}, fmt.Errorf("exec: %w: truncated exec envelope", ErrMalformed)
	}
	rc, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return envelope{}, fmt.Errorf("exec: %w: exit status %q", ErrMalformed, line)
	}
	outB64, rest, ok1 := strings.Cut(rest, "\n--\n")
	errB64, _, ok2 := strings.Cut(rest, "\n--END\n")
	if !ok1 || !ok2 {
		return envelope{}, fmt.Errorf("exec: %w: truncated exec envelope", ErrMalformed)
	}
	e := envelope{rc: rc}
	if e.stdout, err = base64.StdEncoding.DecodeString(outB64); err != nil {
		return envelope{}, fmt.Errorf("exec: %w: stdout: %v", ErrMalformed, err)
	}
	if e.stderr, err = base64.StdEncoding.DecodeString(errB64); err != nil {
		return envelope{}, fmt.Errorf("exec: %w: stderr: %v", ErrMalformed, err)
	}
	return e, nil
}

// Exec runs req.Command, which must have a positive Timeout and MaxOutput
// (the adapter applies its defaults). Cancelling ctx kills the command's
// process group and returns ctx.Err(); a timeout is a result. Other errors
// come from the Runner or the protocol and are returned unwrapped.
func (sh *Shell) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	timeout, limit := req.Timeout, req.MaxOutput
	if timeout <= 0 || limit <= 0 {
		return nil, fmt.Errorf("exec: timeout %v and output cap %d must be positive", timeout, limit)
	}
	env, err := envPrefix(sh.Env, req.Env)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	token := NewToken()
	in := ""
	if req.Stdin != nil {
		if in, err = sh.StageStdin(ctx, token, req.Stdin); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("exec: stage stdin: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		if in != "" {
			sh.kill(token, in, false)
		}
		return nil, err
	}
	script := "t=" + Quote(execDir+"/"+token) + "\nn=" + strconv.Itoa(limit+1) + "\ninf=" + Quote(in) +
		"\nroot=" + Quote(sh.Root) + "\ncmd=" + Quote(env+req.Command) + "\n" + wrapperBody

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	// The service's own timeout is a backstop well after ours.
	out, err := sh.Run(runCtx, script, timeout+time.Minute)
	dur := time.Since(start)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			sh.kill(token, in, false)
			return nil, ctx.Err()
		case runCtx.Err() != nil:
			res := &sandbox.ExecResult{ExitCode: -1, TimedOut: true, Duration: dur}
			if e, ok := sh.kill(token, in, true); ok {
				res.Stdout, res.Stderr, res.Truncated = capOutput(e, limit)
			}
			return res, nil
		}
		sh.kill(token, in, false)
		return nil, err
	}
	e, err := parseEnvelope(out)
	if err != nil {
		sh.kill(token, in, false)
		return nil, err
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

// kill kills the command's process group from a second script, on its own
// context (the caller's is usually done). With report it returns what the
// command wrote until it was killed.
func (sh *Shell) kill(token, in string, report bool) (envelope, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := "0"
	if report {
		r = "1"
	}
	script := "t=" + Quote(execDir+"/"+token) + "\ninf=" + Quote(in) + "\nreport=" + r + "\n" + killerBody
	out, err := sh.Run(ctx, script, 30*time.Second)
	if err != nil || !report {
		return envelope{}, false
	}
	e, err := parseEnvelope(out)
	return e, err == nil
}

// Kinds of a resolved path.
const (
	KindFile    = "file"
	KindDir     = "dir"
	KindMissing = "missing"
	KindOther   = "other"
)

// Lexical maps p to a clean absolute path the sandbox's files may be
// reached at, or ErrPathEscape: p relative to root, absolute under it, or
// absolute under a session root ([sandbox.SessionRoots]) or
// [sandbox.WorkspaceDir]. /workspace/x maps to root/x when root is
// elsewhere; /mnt/session and /mnt/memory paths stay as they are.
func Lexical(root, p string) (string, error) {
	if p == "" || strings.ContainsAny(p, "\x00\n") {
		return "", fmt.Errorf("invalid path %q", p)
	}
	var abs string
	if path.IsAbs(p) {
		abs = path.Clean(p)
	} else {
		abs = path.Join(root, p)
	}
	if rest, ok := strings.CutPrefix(abs, sandbox.WorkspaceDir); ok && (rest == "" || rest[0] == '/') && !Allowed(root, abs) {
		abs = path.Join(root, rest)
	}
	if !Allowed(root, abs) {
		return "", fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
	}
	return abs, nil
}

// Within reports whether the clean absolute path p is root or below it.
func Within(root, p string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

// Allowed reports whether the clean absolute path p lies under root or
// under a session root ([sandbox.SessionRoots]).
func Allowed(root, p string) bool {
	_, inSession := sandbox.SessionRoot(p)
	return Within(root, p) || inSession
}

// resolveScript resolves $p inside the sandbox: the deepest existing prefix
// through readlink -f, plus the missing rest. It prints the canonical root,
// the resolved path and its kind (file, dir, missing, other). With mk=1 and
// a resolved path inside the root, /mnt/session or /mnt/memory, it also
// creates the missing parent directories. A resolved path outside them
// prints "escape".
const resolveScript = `exec 2>/dev/null
R=$(readlink -f -- "$root") || { echo fail; exit 0; }
q=$p; rest=
while [ ! -e "$q" ] && [ ! -L "$q" ]; do rest="/${q##*/}$rest"; q=${q%/*}; [ -n "$q" ] || q=/; done
r=$(readlink -f -- "$q") || { echo fail; exit 0; }
[ "$r" = / ] && r=
x=$r$rest
case "$x" in "$R"|"$R"/*|/mnt/session|/mnt/session/*|/mnt/memory|/mnt/memory/*) ;; *) echo escape; exit 0;; esac
if [ -n "$rest" ] || [ ! -e "$x" ]; then k=missing
elif [ -f "$x" ]; then k=file
elif [ -d "$x" ]; then k=dir
else k=other; fi
if [ "$mk" = 1 ] && [ "$k" = missing ]; then mkdir -p -- "${x%/*}" || { echo fail; exit 0; }; fi
printf 'ok\n%s\n%s\n%s\n' "$R" "$x" "$k"
`

// Resolved is a path resolved inside the sandbox.
type Resolved struct {
	// Root is the canonical workspace root.
	Root string
	// Path is the canonical absolute path, under Root or under a session
	// root ([sandbox.SessionRoots]).
	Path string
	// Kind is KindFile, KindDir, KindMissing or KindOther.
	Kind string
}

// Resolve checks p lexically and then inside the sandbox, creating the
// missing parent directories when mkParents is set.
func (sh *Shell) Resolve(ctx context.Context, p string, mkParents bool) (Resolved, error) {
	abs, err := Lexical(sh.Root, p)
	if err != nil {
		return Resolved{}, err
	}
	mk := "0"
	if mkParents {
		mk = "1"
	}
	out, err := sh.Run(ctx, "root="+Quote(sh.Root)+"\np="+Quote(abs)+"\nmk="+mk+"\n"+resolveScript, 30*time.Second)
	if err != nil {
		return Resolved{}, err
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	// Skip anything the service printed before the script's answer.
	for i, l := range lines {
		switch l {
		case "escape":
			return Resolved{}, fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
		case "fail":
			return Resolved{}, fmt.Errorf("%q: cannot resolve the path in the sandbox", p)
		case "ok":
			if len(lines) != i+4 {
				return Resolved{}, fmt.Errorf("resolve %q: %w: %q", p, ErrMalformed, out)
			}
			r := Resolved{Root: lines[i+1], Path: lines[i+2], Kind: lines[i+3]}
			if !path.IsAbs(r.Path) || !Allowed(r.Root, r.Path) {
				return Resolved{}, fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
			}
			return r, nil
		}
	}
	return Resolved{}, fmt.Errorf("resolve %q: %w: %q", p, ErrMalformed, out)
}

// Chmod sets the permission bits of the file at the absolute path x.
func (sh *Shell) Chmod(ctx context.Context, x string, perm fs.FileMode) error {
	out, err := sh.Run(ctx, "chmod "+strconv.FormatUint(uint64(perm.Perm()), 8)+" -- "+Quote(x)+" && echo ok", 30*time.Second)
	if err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if strings.TrimSpace(out) != "ok" {
		return fmt.Errorf("chmod failed: %q", out)
	}
	return nil
}
