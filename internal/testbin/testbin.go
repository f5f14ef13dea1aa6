// Package testbin builds Mango's binaries for tests that run them as
// processes, as production does (the api-server never imports worker code,
// and the worker neither api-server nor db code, so their tests start the
// other service's binary). Each binary is built once per test process, from
// the repository's go.work, with the race detector when the tests run with
// it, so a data race in the process under test is reported too.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Race reports whether the tests, and therefore the binaries Build
// returns, run with the race detector.
const Race = raceEnabled

var (
	mu     sync.Mutex
	builds = map[string]*build{}
)

// build is one package's binary, built at most once per process.
type build struct {
	once sync.Once
	path string
	err  error
}

// Build compiles the main package pkg, a directory relative to the
// repository root such as "execution-worker/cmd/execution-worker", and
// returns the binary's path. Later calls for the same package return the
// same binary; a failed build fails tb (and every later caller) with the
// compiler's output.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	mu.Lock()
	b, ok := builds[pkg]
	if !ok {
		b = &build{}
		builds[pkg] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = compile(pkg) })
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// compile builds pkg into a new temporary directory, which outlives the
// test so that every test of the process can share the binary.
func compile(pkg string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "mango-testbin-")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if Race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./"+filepath.Clean(pkg))...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// RepoRoot returns the repository root: the nearest directory holding
// go.work at or above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find go.work: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.work not found above the test directory")
		}
		dir = parent
	}
}
