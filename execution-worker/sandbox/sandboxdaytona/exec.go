package sandboxdaytona

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
)

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
// combined output. timeout is the daemon's own limit, a backstop. It is
// the sandbox's [shellexec.Runner].
func (s *remoteSandbox) execute(ctx context.Context, script string, timeout time.Duration) (string, error) {
	secs := int((timeout + time.Second - 1) / time.Second)
	body := executeRequest{Command: shellCommand(script), Cwd: s.root, Timeout: max(secs, 1)}
	data, err := s.call(ctx, "/process/execute", request{method: http.MethodPost, body: httpcall.JSONBody(body)})
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

// shell returns the command and path machinery over execute. Stdin is
// uploaded beside the exec directory (the toolbox need not create parent
// directories).
func (s *remoteSandbox) shell() *shellexec.Shell {
	return &shellexec.Shell{
		Run:  s.execute,
		Root: s.root,
		Env:  s.env,
		StageStdin: func(ctx context.Context, token string, data []byte) (string, error) {
			in := "/tmp/.mango-in-" + token
			return in, s.upload(ctx, in, data)
		},
		ID:               s.ref.ID,
		Destroyed:        &s.destroyed,
		DefaultTimeout:   s.p.cfg.ExecTimeout,
		DefaultMaxOutput: s.p.cfg.MaxOutput,
	}
}

// Exec runs req.Command; see the package documentation for the wrapper.
func (s *remoteSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	return s.shell().Command(ctx, req)
}
