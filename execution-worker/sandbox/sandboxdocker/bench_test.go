package sandboxdocker_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker/dockertest"
)

// The docker CLI appears here only as the comparison baseline; the provider
// never runs it.

func dockerCLI(b *testing.B) string {
	b.Helper()
	p, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("docker CLI not installed (needed only as the baseline)")
	}
	return p
}

// BenchmarkCreateToFirstExec measures Create of a new session's container
// plus its first Exec ("true"); Destroy is outside the timer.
func BenchmarkCreateToFirstExec(b *testing.B) {
	p := newProvider(b, sandboxdocker.Config{})
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		sb, _, err := p.Create(ctx, fmt.Sprintf("sesn_bench_%d_%d", time.Now().UnixNano(), i), sandbox.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "true"}); err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec: %+v, %v", res, err)
		}
		b.StopTimer()
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkCreateExecDestroy is BenchmarkCreateToFirstExec with Destroy
// inside the timer, the fair match for docker run --rm (which waits for
// the removal).
func BenchmarkCreateExecDestroy(b *testing.B) {
	p := newProvider(b, sandboxdocker.Config{})
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		sb, _, err := p.Create(ctx, fmt.Sprintf("sesn_bench_%d_%d", time.Now().UnixNano(), i), sandbox.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "true"}); err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec: %+v, %v", res, err)
		}
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDockerRun is the baseline of BenchmarkCreateToFirstExec:
// docker run --rm of the same image running "true".
func BenchmarkDockerRun(b *testing.B) {
	daemon(b)
	docker := dockerCLI(b)
	for b.Loop() {
		out, err := exec.Command(docker, "run", "--rm", "--network", "none", dockertest.Image, "/bin/sh", "-c", "true").CombinedOutput()
		if err != nil {
			b.Fatalf("docker run: %v: %s", err, out)
		}
	}
}

// BenchmarkExec measures one Exec ("true") in a running sandbox.
func BenchmarkExec(b *testing.B) {
	p := newProvider(b, sandboxdocker.Config{})
	ctx := context.Background()
	sb, _, err := p.Create(ctx, fmt.Sprintf("sesn_bench_exec_%d", time.Now().UnixNano()), sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "true"}); err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec: %+v, %v", res, err)
		}
	}
}

// BenchmarkDockerExec is the baseline of BenchmarkExec: docker exec of the
// same command in a sandbox container.
func BenchmarkDockerExec(b *testing.B) {
	p := newProvider(b, sandboxdocker.Config{})
	docker := dockerCLI(b)
	ctx := context.Background()
	_, ref, err := p.Create(ctx, fmt.Sprintf("sesn_bench_dexec_%d", time.Now().UnixNano()), sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		out, err := exec.Command(docker, "exec", ref.ID, "/bin/sh", "-c", "true").CombinedOutput()
		if err != nil {
			b.Fatalf("docker exec: %v: %s", err, out)
		}
	}
}
