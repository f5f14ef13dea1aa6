package tools

import (
	"fmt"
	"strings"
	"time"

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

// bash runs the command with /bin/sh -c in the workspace. There is no
// persistent shell: restart is accepted and only acknowledged.
func (t *call) bash(in bashInput) (Result, error) {
	if in.Command == nil {
		return Result{Content: "Shell restarted. Every bash call runs in a fresh shell in the workspace, so no state other than files carries over between calls."}, nil
	}
	req := sandbox.ExecRequest{Command: *in.Command}
	if in.TimeoutMS != nil {
		req.Timeout = MaxBashTimeout
		if ms := *in.TimeoutMS; ms < MaxBashTimeout.Milliseconds() {
			req.Timeout = time.Duration(ms) * time.Millisecond
		}
	}
	res, err := t.sb.Exec(t.ctx, req)
	if err != nil {
		return t.execFailure(err)
	}
	return formatExec(res, req.Timeout), nil
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
	head := cutUTF8(s, maxStreamShown/2)
	tail := tailUTF8(s, maxStreamShown/2)
	return fmt.Sprintf("%s\n[... %d bytes omitted ...]\n%s", head, len(s)-len(head)-len(tail), tail)
}

// newline ends b with a newline unless it is empty or already does.
func newline(b *strings.Builder) {
	if s := b.String(); s != "" && !strings.HasSuffix(s, "\n") {
		b.WriteByte('\n')
	}
}
