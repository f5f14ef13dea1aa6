package shellsession

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// localProcess is a shell started as a child process of the worker.
type localProcess struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr *os.File
	exited         chan struct{}
	kill           sync.Once
}

// StartCommand starts cmd (a shell reading its standard input) as a
// [Process]: in a new session, so that it leads a process group Kill can
// end as a whole, with pipes of its own for the output streams, so that the
// shell's end is seen even while a background job holds them. cmd's
// SysProcAttr, when set, is kept and gains Setsid. When the worker dies,
// the shell reads end-of-file and exits.
func StartCommand(cmd *exec.Cmd) (Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	stdout, shellStdout, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stderr, shellStderr, err := os.Pipe()
	if err != nil {
		_ = stdout.Close()
		_ = shellStdout.Close()
		return nil, err
	}
	// The child has its own copies of the write ends.
	defer func() { _ = shellStdout.Close(); _ = shellStderr.Close() }()
	cmd.Stdout, cmd.Stderr = shellStdout, shellStderr
	stdin, err := cmd.StdinPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		_ = stdout.Close()
		_ = stderr.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &localProcess{cmd: cmd, stdin: stdin, stdout: stdout, stderr: stderr, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *localProcess) Stdin() io.Writer        { return p.stdin }
func (p *localProcess) Stdout() io.Reader       { return p.stdout }
func (p *localProcess) Stderr() io.Reader       { return p.stderr }
func (p *localProcess) Exited() <-chan struct{} { return p.exited }

// Kill sends SIGKILL to the shell's process group, waits for the shell to
// be reaped and closes the read ends, which ends the session's readers even
// when a process that left the group still holds the pipes.
func (p *localProcess) Kill() {
	p.kill.Do(func() {
		if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			_ = p.cmd.Process.Kill()
		}
		<-p.exited
		_ = p.stdin.Close()
		_ = p.stdout.Close()
		_ = p.stderr.Close()
	})
}

// ExitCode waits for the shell to end and returns its status (-1 when a
// signal ended it).
func (p *localProcess) ExitCode() int {
	<-p.exited
	return p.cmd.ProcessState.ExitCode()
}
