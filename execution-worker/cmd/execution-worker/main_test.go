package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/internal/temporaltest"
	"github.com/mangohq/mango/internal/testbin"
)

// buildWorker returns the execution-worker binary, built once for the
// test process; with the race detector when the tests run with it.
func buildWorker(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "execution-worker/cmd/execution-worker")
}

// workerCmd prepares the binary with exactly env (plus PATH and HOME), so
// that no MANGO_* variable of the developer's shell leaks in.
func workerCmd(ctx context.Context, bin string, env map[string]string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if _, ok := env["MANGO_WORKER_TOKEN"]; !ok {
		cmd.Env = append(cmd.Env, "MANGO_WORKER_TOKEN=test-token")
	}
	for k, v := range env {
		if v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	return cmd
}

// startupFailure is a configuration the worker must refuse, with the
// substrings its error must contain.
type startupFailure struct {
	name string
	env  map[string]string
	want []string
}

// TestStartupFailures runs the real binary with configurations that must be
// refused. Temporal points at a port nothing listens on: each case must fail
// on configuration, before dialing, with status 1 and a one-line error that
// names the variable.
func TestStartupFailures(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	for _, tt := range startupFailures() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.env["MANGO_TEMPORAL_HOSTPORT"] = "127.0.0.1:1"
			tt.env["MANGO_TEMPORAL_CONNECT_TIMEOUT"] = "1s"
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := workerCmd(ctx, bin, tt.env)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
				t.Fatalf("exit = %v, want exit status 1; stderr:\n%s", err, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
			msg := stderr.String()
			if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "execution-worker: ") {
				t.Errorf("stderr = %q, want exactly one line starting with %q", msg, "execution-worker: ")
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr = %q, want it to contain %q", msg, w)
				}
			}
			if strings.Contains(msg, "connect to Temporal") {
				t.Errorf("stderr = %q: the worker dialed Temporal before rejecting its configuration", msg)
			}
		})
	}
}

// startupFailures are the refused configurations of TestStartupFailures.
func startupFailures() []startupFailure {
	return []startupFailure{
		{
			name: "unknown provider",
			env:  map[string]string{"MANGO_SANDBOX": "nonsense"},
			want: []string{`MANGO_SANDBOX: unknown sandbox provider "nonsense" (known: `},
		},
		{
			name: "e2b without its key",
			env:  map[string]string{"MANGO_SANDBOX": "e2b"},
			want: []string{"E2B_API_KEY"},
		},
		{
			name: "cube without its API and template",
			env:  map[string]string{"MANGO_SANDBOX": "cube"},
			want: []string{"CUBE_API_URL", "CUBE_TEMPLATE_ID"},
		},
		{
			name: "daytona without its key",
			env:  map[string]string{"MANGO_SANDBOX": "daytona"},
			want: []string{"DAYTONA_API_KEY"},
		},
		{
			name: "k8s without its router",
			env:  map[string]string{"MANGO_SANDBOX": "k8s", "MANGO_K8S_IMAGE": "runtime:v1"},
			want: []string{"MANGO_K8S_ROUTER_URL"},
		},
		{
			name: "opensandbox without its domain",
			env:  map[string]string{"MANGO_SANDBOX": "opensandbox"},
			want: []string{"OPEN_SANDBOX_DOMAIN"},
		},
		{
			name: "missing worker token",
			env:  map[string]string{"MANGO_WORKER_TOKEN": ""},
			want: []string{"MANGO_WORKER_TOKEN: is required"},
		},
		{
			name: "unknown provider through the alias",
			env:  map[string]string{"MANAGED_AGENT_SANDBOX": "nonsense"},
			want: []string{`MANAGED_AGENT_SANDBOX: unknown sandbox provider "nonsense"`},
		},
		{
			name: "provider names disagree",
			env:  map[string]string{"MANGO_SANDBOX": "local", "MANAGED_AGENT_SANDBOX": "docker"},
			want: []string{"MANGO_SANDBOX", "MANAGED_AGENT_SANDBOX", "disagree"},
		},
		{
			name: "real model with local sandbox and no override",
			env: map[string]string{
				"MANGO_SANDBOX": "local", "MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "sk-test",
			},
			want: []string{
				"MANGO_MODEL=anthropic with MANGO_SANDBOX=local is refused",
				"running arbitrary commands",
				"no isolation",
				"MANGO_SANDBOX=docker",
				"MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX=1",
			},
		},
		{
			name: "real model with default sandbox and no override",
			env:  map[string]string{"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "sk-test"},
			want: []string{"MANGO_SANDBOX=local (the default) is refused", "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX=1"},
		},
		{
			name: "invalid override value",
			env: map[string]string{
				"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "sk-test", "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "yes",
			},
			want: []string{`MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX: invalid boolean "yes" (want 1, true, 0 or false)`},
		},
		{
			name: "invalid metrics address",
			env:  map[string]string{"MANGO_METRICS_ADDR": "everywhere"},
			want: []string{`MANGO_METRICS_ADDR: invalid address "everywhere"`},
		},
		{
			name: "invalid duration",
			env:  map[string]string{"MANGO_SHUTDOWN_TIMEOUT": "soon"},
			want: []string{`MANGO_SHUTDOWN_TIMEOUT: invalid duration "soon"`},
		},
	}
}

// TestTemporalUnreachable checks that a valid configuration with no Temporal
// server fails within the connect timeout, naming MANGO_TEMPORAL_HOSTPORT.
func TestTemporalUnreachable(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := workerCmd(ctx, bin, map[string]string{
		"MANGO_TEMPORAL_HOSTPORT":        "127.0.0.1:1",
		"MANGO_TEMPORAL_CONNECT_TIMEOUT": "1s",
	})
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
		t.Fatalf("exit = %v, want exit status 1; stderr:\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "execution-worker: ") || !strings.Contains(last, "MANGO_TEMPORAL_HOSTPORT=127.0.0.1:1") {
		t.Errorf("last stderr line = %q, want the error naming MANGO_TEMPORAL_HOSTPORT=127.0.0.1:1", last)
	}
}

// TestStartsAndStops runs the binary against a real Temporal server and a
// real ControlPlane (which answers the installation id) with
// configurations that must start, waits until it logs that it is polling,
// sends SIGTERM and expects a clean exit.
func TestStartsAndStops(t *testing.T) {
	hostPort := temporaltest.HostPort(t)
	srv := cptest.Start(t)
	bin := buildWorker(t)
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"fake model with local sandbox (defaults)", map[string]string{}},
		{"fake model with local sandbox", map[string]string{"MANGO_MODEL": "fake", "MANGO_SANDBOX": "local", "MANGO_LOG_FORMAT": "json"}},
		{"real model with local sandbox and override", map[string]string{
			"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "sk-test",
			"MANGO_SANDBOX": "local", "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "1",
		}},
		{"real model with docker sandbox", map[string]string{
			"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "sk-test", "MANAGED_AGENT_SANDBOX": "docker",
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.env["MANGO_TEMPORAL_HOSTPORT"] = hostPort
			tt.env["MANGO_CONTROLPLANE_ADDR"] = srv.GRPCAddr
			tt.env["MANGO_WORKER_TOKEN"] = srv.WorkerToken
			tt.env["MANGO_WORKER_ID"] = fmt.Sprintf("bintest-%d-%d", time.Now().UnixNano(), i)
			tt.env["MANGO_SHUTDOWN_TIMEOUT"] = "5s"
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := workerCmd(ctx, bin, tt.env)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatalf("start worker: %v", err)
			}

			var logs strings.Builder
			polling := make(chan struct{})
			copied := make(chan struct{})
			go func() {
				defer close(copied)
				sc := bufio.NewScanner(stderr)
				signalled := false
				for sc.Scan() {
					line := sc.Text()
					logs.WriteString(line + "\n")
					if !signalled && (strings.Contains(line, "msg=polling") || strings.Contains(line, `"msg":"polling"`)) {
						signalled = true
						close(polling)
					}
				}
				_, _ = io.Copy(io.Discard, stderr)
			}()

			select {
			case <-polling:
			case <-copied:
				_ = cmd.Wait()
				t.Fatalf("worker exited before polling (%v); stderr:\n%s", cmd.ProcessState, logs.String())
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-copied
				_ = cmd.Wait()
				t.Fatalf("worker did not log polling within 30s; stderr:\n%s", logs.String())
			}

			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatalf("send SIGTERM: %v", err)
			}
			start := time.Now()
			<-copied
			err = cmd.Wait()
			if err != nil {
				t.Fatalf("worker exit after SIGTERM = %v, want status 0; stderr:\n%s", err, logs.String())
			}
			if elapsed := time.Since(start); elapsed > 10*time.Second {
				t.Errorf("worker took %s to stop, want under the 5s shutdown timeout plus slack", elapsed)
			}
		})
	}
}
