package sandboxlocal_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
)

// TestSessionPathsLiveInTheWorkspace checks the lexical mapping of the
// container paths: /workspace/X is X, /mnt/session/X is mnt/session/X, and
// a link planted on the way out is still an escape.
func TestSessionPathsLiveInTheWorkspace(t *testing.T) {
	t.Parallel()
	sb, _ := create(t, newProvider(t), "sesn_local_session_paths")
	ft := sb.(sandbox.FileTransfer)
	if err := sb.WriteFile(t.Context(), sandbox.OutputsDir+"/r.txt", []byte("report"), 0o644); err != nil {
		t.Fatalf("WriteFile(%s/r.txt) = %v, want no error", sandbox.OutputsDir, err)
	}
	if err := sb.WriteFile(t.Context(), "/workspace/w.txt", []byte("ws"), 0o644); err != nil {
		t.Fatalf("WriteFile(/workspace/w.txt) = %v, want no error", err)
	}
	for host, want := range map[string]string{"mnt/session/outputs/r.txt": "report", "w.txt": "ws"} {
		got, err := os.ReadFile(filepath.Join(sb.Root(), host))
		if err != nil || string(got) != want {
			t.Errorf("host file <workspace>/%s = %q, %v; want %q", host, got, err, want)
		}
	}
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "cat ./mnt/session/outputs/r.txt"})
	if err != nil || string(res.Stdout) != "report" {
		t.Errorf("bash cat ./mnt/session/outputs/r.txt = %v, %v; want %q", res, err, "report")
	}
	files, err := ft.ListFiles(t.Context(), "/workspace")
	if err != nil {
		t.Fatalf("ListFiles(/workspace) = %v", err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	if got, want := strings.Join(paths, " "), "/workspace/mnt/session/outputs/r.txt /workspace/w.txt"; got != want {
		t.Errorf("ListFiles(/workspace) paths = %q, want %q (the agent's view of the names)", got, want)
	}

	// A link replacing mnt/session cannot lead file access out.
	outside := t.TempDir()
	if err := os.RemoveAll(filepath.Join(sb.Root(), "mnt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(sb.Root(), "mnt")); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(t.Context(), sandbox.OutputsDir+"/x", []byte("x"), 0o644); !errors.Is(err, sandbox.ErrPathEscape) {
		t.Errorf("WriteFile through a link mnt -> outside = %v, want ErrPathEscape", err)
	}
	if _, err := ft.ListFiles(t.Context(), sandbox.SessionDir); !errors.Is(err, sandbox.ErrPathEscape) {
		t.Errorf("ListFiles through a link mnt -> outside = %v, want ErrPathEscape", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the directory outside the workspace holds %d entries, want none", len(entries))
	}
}

// TestPutFileIsAtomic checks that PutFile leaves no temporary file behind
// and keeps the old content when it fails.
func TestPutFileIsAtomic(t *testing.T) {
	t.Parallel()
	sb, _ := create(t, newProvider(t), "sesn_local_put_atomic")
	ft := sb.(sandbox.FileTransfer)
	if err := ft.PutFile(t.Context(), "d/f", strings.NewReader("old"), 3, 0o640); err != nil {
		t.Fatalf("PutFile = %v", err)
	}
	if err := ft.PutFile(t.Context(), "d/f", strings.NewReader("new but short"), 100, 0o640); !errors.Is(err, sandbox.ErrSizeMismatch) {
		t.Errorf("PutFile of a short reader = %v, want ErrSizeMismatch", err)
	}
	if got, err := os.ReadFile(filepath.Join(sb.Root(), "d/f")); err != nil || string(got) != "old" {
		t.Errorf("after a failed PutFile the file holds %q, %v; want the old content", got, err)
	}
	entries, err := os.ReadDir(filepath.Join(sb.Root(), "d"))
	if err != nil || len(entries) != 1 {
		t.Errorf("directory d holds %v, %v; want only f (no temporary file left)", entries, err)
	}
	if fi, err := os.Stat(filepath.Join(sb.Root(), "d/f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode of d/f = %v, %v; want 0640", fi.Mode(), err)
	}
}

// TestPutTreeKeepsLinks checks that the local TreePutter creates links,
// and that a link pointing out is stored but never followed by file access.
func TestPutTreeKeepsLinks(t *testing.T) {
	t.Parallel()
	sb, _ := create(t, newProvider(t), "sesn_local_tree_links")
	src := fstest.MapFS{
		"a.txt": {Data: []byte("a"), Mode: 0o644},
		"in":    {Data: []byte("a.txt"), Mode: 0o777 | os.ModeSymlink},
		"out":   {Data: []byte("/etc"), Mode: 0o777 | os.ModeSymlink},
	}
	if err := sandbox.PutTree(t.Context(), sb.(sandbox.FileTransfer), "repo", src); err != nil {
		t.Fatalf("PutTree = %v", err)
	}
	if got, err := os.Readlink(filepath.Join(sb.Root(), "repo/in")); err != nil || got != "a.txt" {
		t.Errorf("repo/in links to %q, %v; want a.txt", got, err)
	}
	if got, err := sb.ReadFile(t.Context(), "repo/in"); err != nil || string(got) != "a" {
		t.Errorf("ReadFile(repo/in) = %q, %v; want %q", got, err, "a")
	}
	if _, err := sb.ReadFile(t.Context(), "repo/out/passwd"); !errors.Is(err, sandbox.ErrPathEscape) {
		t.Errorf("ReadFile(repo/out/passwd) = %v, want ErrPathEscape", err)
	}
}

func TestRemoveAllRefusesTopDirectories(t *testing.T) {
	t.Parallel()
	sb, _ := create(t, newProvider(t), "sesn_local_remove_top")
	ft := sb.(sandbox.FileTransfer)
	if err := sb.WriteFile(t.Context(), sandbox.OutputsDir+"/r.txt", []byte("r"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".", sb.Root(), sandbox.WorkspaceDir, sandbox.SessionDir, sandbox.SessionDir + "/"} {
		if err := ft.RemoveAll(t.Context(), p); err == nil {
			t.Errorf("RemoveAll(%q) = nil, want an error (a top directory)", p)
		}
	}
	if err := ft.RemoveAll(t.Context(), sandbox.OutputsDir); err != nil {
		t.Errorf("RemoveAll(%q) = %v, want no error", sandbox.OutputsDir, err)
	}
	if _, err := os.Stat(filepath.Join(sb.Root(), "mnt/session/outputs")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after RemoveAll(%s), stat = %v, want it gone", sandbox.OutputsDir, err)
	}
}

func BenchmarkPutTree(b *testing.B) {
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: filepath.Join(b.TempDir(), "sandboxes"), Installation: testInstallation})
	if err != nil {
		b.Fatal(err)
	}
	sb, _, err := p.Create(b.Context(), "sesn_bench_tree", sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	src := fstest.MapFS{}
	for i := range 1000 {
		src[fmt.Sprintf("d%02d/e%d/f%04d.go", i%20, i%5, i)] = &fstest.MapFile{Data: []byte("package x\n"), Mode: 0o644}
	}
	for b.Loop() {
		if err := sandbox.PutTree(b.Context(), sb.(sandbox.FileTransfer), "repo", src); err != nil {
			b.Fatal(err)
		}
	}
}
