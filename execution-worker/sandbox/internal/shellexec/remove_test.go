package shellexec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

func TestRemoveTarget(t *testing.T) {
	sh := localShell(t)
	real := t.TempDir() // outside the root: a link to it must not be followed
	for _, err := range []error{
		os.MkdirAll(filepath.Join(sh.Root, "dir", "sub"), 0o755),
		os.Symlink(filepath.Join(sh.Root, "dir"), filepath.Join(sh.Root, "alias")),
		os.Symlink(real, filepath.Join(sh.Root, "outside")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	root, err := filepath.EvalSymlinks(sh.Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p, want string
		ok      bool
	}{
		{"dir/sub", root + "/dir/sub", true},
		{"alias/sub", root + "/dir/sub", true},  // a parent link is resolved
		{"outside", root + "/outside", true},    // the path itself is kept: the link goes, not its target
		{"/workspace/dir", root + "/dir", true}, // /workspace names the root
		{"missing/x", "", false},                // nothing to remove
	} {
		got, ok, err := sh.RemoveTarget(t.Context(), tc.p)
		if err != nil || ok != tc.ok || got != tc.want {
			t.Errorf("RemoveTarget(%q) = %q, %v, %v; want %q, %v, nil", tc.p, got, ok, err, tc.want, tc.ok)
		}
	}
	if _, _, err := sh.RemoveTarget(t.Context(), "."); err == nil || !strings.Contains(err.Error(), "workspace root") {
		t.Errorf("RemoveTarget(.) = %v, want a workspace-root error", err)
	}
	for _, p := range sandbox.SessionRoots {
		if _, _, err := sh.RemoveTarget(t.Context(), p); err == nil || !strings.Contains(err.Error(), "top directory") {
			t.Errorf("RemoveTarget(%q) = %v, want a top-directory error", p, err)
		}
	}
	for _, p := range []string{"../x", "/etc/passwd", "outside/x", "/mnt/memoryx/y"} {
		if _, _, err := sh.RemoveTarget(t.Context(), p); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("RemoveTarget(%q) = %v, want ErrPathEscape", p, err)
		}
	}
}
