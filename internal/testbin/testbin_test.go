package testbin_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mangohq/mango/internal/testbin"
)

func TestRepoRoot(t *testing.T) {
	t.Parallel()
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatalf("RepoRoot() error = %v, want the directory holding go.work", err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Errorf("RepoRoot() = %q, which holds no go.work: %v", root, err)
	}
}

// TestBuildOnce builds a tiny command of this module twice and runs it:
// the second call must return the same binary.
func TestBuildOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a binary")
	}
	first := testbin.Build(t, "internal/testbin/testdata/hello")
	second := testbin.Build(t, "internal/testbin/testdata/hello")
	if first != second {
		t.Errorf("Build twice = %q then %q, want the same binary", first, second)
	}
	out, err := exec.Command(first).Output()
	if err != nil {
		t.Fatalf("run %s: %v", first, err)
	}
	if got := strings.TrimSpace(string(out)); got != "hello" {
		t.Errorf("binary printed %q, want %q", got, "hello")
	}
}
