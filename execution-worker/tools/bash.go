package tools

import (
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Limits of the bash tool.
const (
	// MaxBashTimeout caps timeout_ms.
	MaxBashTimeout = 10 * time.Minute
	// maxStreamShown is how much of each of stdout and stderr is shown:
	// longer output keeps its first and last halves of this size, around
	// a note of what was left out.
	maxStreamShown = 30000
)

// bashInput is the input of bash.
type bashInput struct {
	Command   *string `json:"command"`
	Restart   bool    `json:"restart"`
	TimeoutMS *int64  `json:"timeout_ms"`
}

func (in *bashInput) check() error {
	if in.Command == nil && !in.Restart {
		return missing("command")
	}
	if in.Command != nil && strings.TrimSpace(*in.Command) == "" {
		return fmt.Errorf("command must not be empty")
	}
	if in.TimeoutMS != nil && *in.TimeoutMS <= 0 {
		return fmt.Errorf("timeout_ms must be a positive number of milliseconds, got %d", *in.TimeoutMS)
	}
	return nil
}

// bash runs the command in the sandbox's persistent shell ([sandbox.Shell])
// where it keeps one. Elsewhere each call is a one-off /bin/sh -c that
// emulates one: it starts in the directory the last call ended in, with
// the variables it exported (kept in stateFile inside the sandbox);
// functions, unexported variables and background jobs do not carry over.
// restart discards the shell (or the emulated state) first.
func (t *call) bash(in bashInput) (Result, error) {
	shell, persistent := t.sb.(sandbox.Shell)
	if in.Restart {
		if err := t.restartShell(shell, persistent); err != nil {
			return t.execFailure(err)
		}
		if in.Command == nil {
			return Result{Content: "Shell restarted: the next command runs in a new shell in the workspace, without the old shell's variables, functions and background jobs."}, nil
		}
	}
	req := sandbox.ExecRequest{Command: *in.Command}
	if in.TimeoutMS != nil {
		req.Timeout = MaxBashTimeout
		if ms := *in.TimeoutMS; ms < MaxBashTimeout.Milliseconds() {
			req.Timeout = time.Duration(ms) * time.Millisecond
		}
	}
	if persistent {
		res, err := shell.ShellExec(t.ctx, req)
		if err != nil {
			return t.execFailure(err)
		}
		t.noteExit(&res.ExecResult)
		return formatShell(res, req.Timeout), nil
	}
	req.Command = emulated(req.Command)
	res, err := t.sb.Exec(t.ctx, req)
	if err != nil {
		return t.execFailure(err)
	}
	t.noteExit(res)
	return formatExec(res, req.Timeout), nil
}

// noteExit records the exit code of a command that ran to its end on the
// call's span (process.exit.code); a command killed by its timeout has
// none worth reporting.
func (t *call) noteExit(res *sandbox.ExecResult) {
	if !res.TimedOut {
		trace.SpanFromContext(t.ctx).SetAttributes(attribute.Int("process.exit.code", res.ExitCode))
	}
}

// restartShell restarts the persistent shell, or forgets the emulated one.
func (t *call) restartShell(shell sandbox.Shell, persistent bool) error {
	if persistent {
		return shell.RestartShell(t.ctx)
	}
	_, err := t.sb.Exec(t.ctx, sandbox.ExecRequest{Command: "rm -f " + stateFile})
	return err
}

// stateFile holds, in a sandbox without a persistent shell, the exported
// variables and the working directory the last bash call ended with.
const stateFile = "/tmp/.mango-bash-state"

// emulated wraps cmd for a one-off shell: it restores the state of the
// last call and saves its own when the shell exits, however it exits.
func emulated(cmd string) string {
	return "if [ -r " + stateFile + " ]; then . " + stateFile + " >/dev/null 2>&1; cd \"$__MANGO_PWD\" 2>/dev/null; fi\n" +
		"trap '__mango_status=$?; export __MANGO_PWD=\"$PWD\"; export -p >" + stateFile + ".tmp 2>/dev/null && mv -f " + stateFile + ".tmp " + stateFile + "; exit $__mango_status' EXIT\n" +
		"eval " + sandbox.ShellQuote("{ :\n"+cmd+"\n\n}") + " </dev/null\n"
}

// formatShell renders a persistent shell's result as formatExec does, with
// a note when the shell was replaced or ended.
func formatShell(res *sandbox.ShellResult, timeout time.Duration) Result {
	r := formatExec(&res.ExecResult, timeout)
	var notes []string
	if res.NewShell {
		notes = append(notes, "[the previous shell had ended, so this command ran in a new shell: the working directory was kept, but variables, functions and background jobs of earlier calls are gone]")
	}
	switch {
	case res.TimedOut:
		notes = append(notes, "[the shell was killed with the command; the next command runs in a new shell in the same working directory]")
	case res.ShellEnded:
		notes = append(notes, fmt.Sprintf("[the shell exited with status %d; the next command runs in a new shell in the same working directory]", res.ExitCode))
	}
	if len(notes) > 0 {
		if r.Content == "(no output)" {
			r.Content = ""
		}
		var b strings.Builder
		b.WriteString(r.Content)
		for _, n := range notes {
			newline(&b)
			b.WriteString(n)
		}
		r.Content = b.String()
	}
	return r
}

// formatExec renders a command's result: stdout, then stderr (labelled
// when both have output), then notes on the exit code, a timeout and
// truncation. It is an error when the command failed or timed out.
func formatExec(res *sandbox.ExecResult, timeout time.Duration) Result {
	var b strings.Builder
	stdout, stderr := clip(text(res.Stdout)), clip(text(res.Stderr))
	b.WriteString(stdout)
	if stderr != "" {
		if stdout != "" {
			newline(&b)
			b.WriteString("[stderr]\n")
		}
		b.WriteString(stderr)
	}
	note := func(s string) {
		newline(&b)
		b.WriteString(s)
	}
	switch {
	case res.TimedOut && timeout > 0:
		note(fmt.Sprintf("[timed out after %s; the command was killed]", timeout))
	case res.TimedOut:
		note("[timed out; the command was killed]")
	case res.ExitCode != 0:
		note(fmt.Sprintf("[exit code %d]", res.ExitCode))
	}
	if res.Truncated {
		note("[output truncated by the sandbox's output limit]")
	}
	if b.Len() == 0 {
		b.WriteString("(no output)")
	}
	return Result{Content: b.String(), IsError: res.TimedOut || res.ExitCode != 0}
}

// clip shortens s to about maxStreamShown bytes, keeping its head and tail.
func clip(s string) string {
	if len(s) <= maxStreamShown {
		return s
	}
	head := CutUTF8(s, maxStreamShown/2)
	tail := tailUTF8(s, maxStreamShown/2)
	return fmt.Sprintf("%s\n[... %d bytes omitted ...]\n%s", head, len(s)-len(head)-len(tail), tail)
}

// newline ends b with a newline unless it is empty or already does.
func newline(b *strings.Builder) {
	if s := b.String(); s != "" && !strings.HasSuffix(s, "\n") {
		b.WriteByte('\n')
	}
}
