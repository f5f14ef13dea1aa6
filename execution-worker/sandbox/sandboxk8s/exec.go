package sandboxk8s

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// maxInlineScript bounds a script sent inside the /execute command. Linux
// limits one argument to 128 KiB; a longer script is uploaded first.
const maxInlineScript = 64 << 10

// executeResponse is the runtime's answer to POST /execute.
type executeResponse struct {
	Stdout   *string `json:"stdout"`
	Stderr   *string `json:"stderr"`
	ExitCode *int    `json:"exit_code"`
}

// execute runs a script through POST /execute and returns its stdout. The
// runtime splits the command like a POSIX shell (shlex) and runs it
// without one, so the script travels base64-encoded inside a single-quoted
// "/bin/sh -c" argument. It is the sandbox's [shellexec.Runner]; timeout
// goes to the router as X-Sandbox-Timeout.
func (s *remoteSandbox) execute(ctx context.Context, script string, timeout time.Duration) (string, error) {
	enc := base64.StdEncoding.EncodeToString([]byte(script))
	command := "/bin/sh -c 'echo " + enc + " | base64 -d | /bin/sh'"
	if len(enc) > maxInlineScript {
		// The script removes itself first; sh keeps reading the open file.
		name := ".mango-sh-" + shellexec.NewToken()
		if err := s.upload(ctx, name, []byte("rm -f -- \"$0\"\n"+script)); err != nil {
			return "", fmt.Errorf("upload script: %w", err)
		}
		command = "/bin/sh " + shellexec.Quote(s.root+"/"+name)
	}
	data, err := s.call(ctx, request{method: http.MethodPost, path: "/execute", body: httpcall.JSONBody(map[string]string{"command": command}), timeout: timeout})
	if err != nil {
		return "", err
	}
	var r executeResponse
	if err := decode("execute", data, &r); err != nil {
		return "", err
	}
	if r.Stdout == nil || r.ExitCode == nil {
		return "", fmt.Errorf("sandbox runtime: execute: %w: no stdout or exit_code", errMalformed)
	}
	if *r.ExitCode != 0 && *r.Stdout == "" {
		// The scripts print before they exit: the runtime itself failed
		// (its own timeout, output it could not decode, a missing shell).
		msg := ""
		if r.Stderr != nil {
			msg = *r.Stderr
		}
		if len(msg) > 400 {
			// Keep both ends: the runtime quotes the command in the middle.
			msg = msg[:150] + " ... " + msg[len(msg)-250:]
		}
		return "", fmt.Errorf("sandbox runtime: execute failed with exit code %d: %s", *r.ExitCode, msg)
	}
	return *r.Stdout, nil
}

// upload writes data to name, a path relative to the runtime's root,
// through POST /upload. The parent directory must exist.
func (s *remoteSandbox) upload(ctx context.Context, name string, data []byte) error {
	body := transfer.MultipartBytes(transfer.FormFile("file", name), data)
	_, err := s.call(ctx, request{method: http.MethodPost, path: "/upload", body: body, idempotent: true})
	return err
}

// shell returns the command and path machinery over execute. Stdin is
// uploaded as a hidden file in the workspace root, the only place the
// runtime writes to; the wrapper deletes it when the command ends.
func (s *remoteSandbox) shell() *shellexec.Shell {
	return &shellexec.Shell{
		Run:  s.execute,
		Root: s.root,
		StageStdin: func(ctx context.Context, token string, data []byte) (string, error) {
			name := ".mango-in-" + token
			return s.root + "/" + name, s.upload(ctx, name, data)
		},
		ID:               s.ref.ID,
		Destroyed:        &s.destroyed,
		DefaultTimeout:   s.p.cfg.ExecTimeout,
		DefaultMaxOutput: s.p.cfg.MaxOutput,
	}
}

// Exec runs req.Command; see the package documentation.
func (s *remoteSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	return s.shell().Command(ctx, req)
}
