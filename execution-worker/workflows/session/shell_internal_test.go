package session

import (
	"context"
	"errors"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// shellSandbox records StartShell calls.
type shellSandbox struct {
	sandbox.Sandbox
	starts int
}

func (s *shellSandbox) ShellExec(context.Context, sandbox.ExecRequest) (*sandbox.ShellResult, error) {
	return nil, errors.New("not used")
}
func (s *shellSandbox) RestartShell(context.Context) error { return nil }
func (s *shellSandbox) StartShell(context.Context) error {
	s.starts++
	return errors.New("a failed start is the call's to report")
}

func TestWithShellStartsTheShellOnAcquisition(t *testing.T) {
	sb := &shellSandbox{}
	acquire := withShell(func(context.Context) (sandbox.Sandbox, error) { return sb, nil })
	got, err := acquire(t.Context())
	if err != nil || got != sb || sb.starts != 1 {
		t.Fatalf("withShell = %v, %v after %d starts; want the sandbox, no error, one start", got, err, sb.starts)
	}
	if _, _ = acquire(t.Context()); sb.starts != 1 {
		t.Fatalf("a later acquisition in the turn started the shell again (%d starts)", sb.starts)
	}
	want := errors.New("provisioning failed")
	if _, err := withShell(func(context.Context) (sandbox.Sandbox, error) { return nil, want })(t.Context()); !errors.Is(err, want) {
		t.Fatalf("withShell of a failed acquisition = %v, want %v", err, want)
	}
}
