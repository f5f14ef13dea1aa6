package shellexec

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// localShell returns a Shell whose Runner runs scripts on this machine, in
// a fresh root directory, and like the services it stands for returns
// what a script printed but not its exit status.
func localShell(t *testing.T) *Shell {
	t.Helper()
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar on this machine")
	}
	root := t.TempDir()
	return &Shell{Root: root, ID: "local", Run: func(ctx context.Context, script string, _ time.Duration) (string, error) {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
		cmd.Dir = root
		out, err := cmd.Output()
		if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
			err = nil
		}
		return string(out), err
	}}
}

// saveTo returns an upload function that stores the tree in a file of dir.
func saveTo(t *testing.T, dir string) func(context.Context, io.Reader) (string, error) {
	t.Helper()
	return func(_ context.Context, tree io.Reader) (string, error) {
		archive := filepath.Join(dir, "tree.tar")
		f, err := os.Create(archive)
		if err != nil {
			return "", err
		}
		if _, err := io.Copy(f, tree); err != nil {
			_ = f.Close()
			return "", err
		}
		return archive, f.Close()
	}
}

func TestPutTree(t *testing.T) {
	sh := localShell(t)
	src := fstest.MapFS{
		"a/b.txt":    {Data: []byte("b"), Mode: 0o644},
		"bin/run.sh": {Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		"link":       {Data: []byte("a/b.txt"), Mode: fs.ModeSymlink | 0o777},
	}
	stage := t.TempDir()
	if err := sh.PutTree(t.Context(), "dst dir", src, saveTo(t, stage)); err != nil {
		t.Fatalf("PutTree = %v, want no error", err)
	}
	dst := filepath.Join(sh.Root, "dst dir")
	if got, err := os.ReadFile(filepath.Join(dst, "a", "b.txt")); err != nil || string(got) != "b" {
		t.Errorf("a/b.txt after PutTree = %q, %v; want %q", got, err, "b")
	}
	if fi, err := os.Stat(filepath.Join(dst, "bin", "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("bin/run.sh after PutTree: Stat = %v, %v; want an executable file", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "a/b.txt" {
		t.Errorf("link after PutTree = %q, %v; want a link to a/b.txt", target, err)
	}
	if _, err := os.Stat(filepath.Join(stage, "tree.tar")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("archive after PutTree: Stat = %v, want fs.ErrNotExist (removed)", err)
	}
}

func TestPutTreeFailures(t *testing.T) {
	sh := localShell(t)
	src := fstest.MapFS{"x": {Data: []byte("x"), Mode: 0o644}}
	if err := os.WriteFile(filepath.Join(sh.Root, "file"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	uploadErr := errors.New("upload refused")
	refuse := func(context.Context, io.Reader) (string, error) { return "", uploadErr }
	if err := sh.PutTree(t.Context(), "d", src, refuse); !errors.Is(err, uploadErr) || !strings.Contains(err.Error(), "upload") {
		t.Errorf("PutTree with a failing upload = %v, want an upload error wrapping %v", err, uploadErr)
	}
	called := false
	never := func(context.Context, io.Reader) (string, error) { called = true; return "", nil }
	if err := sh.PutTree(t.Context(), "file", src, never); err == nil || !strings.Contains(err.Error(), "not a directory") || called {
		t.Errorf("PutTree into a regular file = %v (upload called: %v), want a not-a-directory error before any upload", err, called)
	}
	if err := sh.PutTree(t.Context(), "../out", src, never); !errors.Is(err, sandbox.ErrPathEscape) || called {
		t.Errorf("PutTree(../out) = %v (upload called: %v), want ErrPathEscape before any upload", err, called)
	}
	stage := t.TempDir()
	junk := func(context.Context, io.Reader) (string, error) {
		archive := filepath.Join(stage, "junk.tar")
		return archive, os.WriteFile(archive, []byte("not a tar archive"), 0o644)
	}
	if err := sh.PutTree(t.Context(), "d", src, junk); err == nil || !strings.Contains(err.Error(), "tar failed") {
		t.Errorf("PutTree of a broken archive = %v, want a tar failure", err)
	}
}
