package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// memFiles is a FileTransfer keeping files in memory, recording modes.
type memFiles struct {
	data  map[string][]byte
	modes map[string]fs.FileMode
}

func newMemFiles() *memFiles {
	return &memFiles{data: map[string][]byte{}, modes: map[string]fs.FileMode{}}
}

func (m *memFiles) PutFile(_ context.Context, p string, r io.Reader, size int64, perm fs.FileMode) error {
	data, err := io.ReadAll(sandbox.ExactReader(r, size))
	if err != nil {
		return err
	}
	m.data[p], m.modes[p] = data, perm
	return nil
}

func (m *memFiles) GetFile(_ context.Context, p string) (io.ReadCloser, int64, error) {
	d, ok := m.data[p]
	if !ok {
		return nil, 0, fs.ErrNotExist
	}
	return io.NopCloser(bytes.NewReader(d)), int64(len(d)), nil
}

func (m *memFiles) ListFiles(context.Context, string) ([]sandbox.FileInfo, error) {
	return nil, errors.New("not used")
}

func (m *memFiles) RemoveAll(context.Context, string) error { return errors.New("not used") }

// treeFiles is a memFiles that also puts whole trees.
type treeFiles struct {
	*memFiles
	trees []string
}

func (t *treeFiles) PutTree(_ context.Context, dst string, _ fs.FS) error {
	t.trees = append(t.trees, dst)
	return nil
}

func TestPutTreeGeneric(t *testing.T) {
	t.Parallel()
	src := fstest.MapFS{
		"run.sh":          {Data: []byte("#!/bin/sh\n"), Mode: 0o700},
		"docs/readme.txt": {Data: []byte("read me"), Mode: 0o600},
		"empty":           {Mode: fs.ModeDir | 0o755},
		"link":            {Data: []byte("run.sh"), Mode: fs.ModeSymlink | 0o777},
	}
	for i := range 1000 {
		src[fmt.Sprintf("many/%d/f%04d", i%17, i)] = &fstest.MapFile{Data: []byte(fmt.Sprint(i)), Mode: 0o644}
	}
	ft := newMemFiles()
	if err := sandbox.PutTree(t.Context(), ft, "/workspace/repo", src); err != nil {
		t.Fatalf("PutTree = %v, want no error", err)
	}
	if got, want := len(ft.data), 1002; got != want {
		t.Errorf("PutTree put %d files, want %d (regular files only: no link, no directory)", got, want)
	}
	checks := []struct {
		path string
		data string
		mode fs.FileMode
	}{
		{"/workspace/repo/run.sh", "#!/bin/sh\n", 0o755},
		{"/workspace/repo/docs/readme.txt", "read me", 0o644},
		{"/workspace/repo/many/3/f0020", "20", 0o644},
	}
	for _, c := range checks {
		if got := string(ft.data[c.path]); got != c.data {
			t.Errorf("%s holds %q, want %q", c.path, got, c.data)
		}
		if got := ft.modes[c.path]; got != c.mode {
			t.Errorf("%s has mode %v, want %v", c.path, got, c.mode)
		}
	}
	if _, ok := ft.data["/workspace/repo/link"]; ok {
		t.Error("the generic PutTree wrote the symbolic link as a file, want it skipped")
	}
}

func TestPutTreeUsesTreePutter(t *testing.T) {
	t.Parallel()
	ft := &treeFiles{memFiles: newMemFiles()}
	src := fstest.MapFS{"a": {Data: []byte("a")}}
	if err := sandbox.PutTree(t.Context(), ft, "/mnt/session/uploads/t", src); err != nil {
		t.Fatalf("PutTree = %v, want no error", err)
	}
	if !slices.Equal(ft.trees, []string{"/mnt/session/uploads/t"}) || len(ft.data) != 0 {
		t.Errorf("PutTree on a TreePutter: trees %v, files %v; want one PutTree call and no PutFile", ft.trees, slices.Collect(maps.Keys(ft.data)))
	}
}

// walkingFiles is a TreePutter that walks the trees it is given, as the
// providers' implementations do, recording each entry's mode.
type walkingFiles struct {
	*memFiles
	walked map[string]fs.FileMode
}

func (w *walkingFiles) PutTree(_ context.Context, dst string, src fs.FS) error {
	return sandbox.WalkTree(src, func(e sandbox.TreeEntry) error {
		w.walked[dst+"/"+e.Name] = e.Mode
		if e.Mode.IsRegular() {
			f, err := src.Open(e.Name)
			if err != nil {
				return err
			}
			return f.Close()
		}
		return nil
	})
}

func TestPutReadOnlyTree(t *testing.T) {
	t.Parallel()
	src := fstest.MapFS{
		"SKILL.md":       {Data: []byte("---\nname: x\n---\n"), Mode: 0o644},
		"scripts/run.sh": {Data: []byte("#!/bin/sh\n"), Mode: 0o744},
		"notes/ro.txt":   {Data: []byte("ro"), Mode: 0o400},
	}
	want := map[string]fs.FileMode{
		"/mnt/session/skills/x/SKILL.md":       0o444,
		"/mnt/session/skills/x/scripts/run.sh": 0o555,
		"/mnt/session/skills/x/notes/ro.txt":   0o444,
	}
	ft := newMemFiles()
	if err := sandbox.PutReadOnlyTree(t.Context(), ft, "/mnt/session/skills/x", src); err != nil {
		t.Fatalf("PutReadOnlyTree = %v, want no error", err)
	}
	if !maps.Equal(ft.modes, want) {
		t.Errorf("PutReadOnlyTree through PutFile wrote modes %v, want %v", ft.modes, want)
	}
	if got := string(ft.data["/mnt/session/skills/x/scripts/run.sh"]); got != "#!/bin/sh\n" {
		t.Errorf("scripts/run.sh holds %q, want %q", got, "#!/bin/sh\n")
	}

	// A TreePutter walks the tree with WalkTree and sees the same modes.
	wf := &walkingFiles{memFiles: newMemFiles(), walked: map[string]fs.FileMode{}}
	if err := sandbox.PutReadOnlyTree(t.Context(), wf, "/mnt/session/skills/x", src); err != nil {
		t.Fatalf("PutReadOnlyTree on a TreePutter = %v, want no error", err)
	}
	for name, mode := range want {
		if got := wf.walked[name]; got != mode {
			t.Errorf("a TreePutter walked %s with mode %v, want %v", name, got, mode)
		}
	}
	if got := wf.walked["/mnt/session/skills/x/scripts"]; got != fs.ModeDir|0o755 {
		t.Errorf("a TreePutter walked the directory scripts with mode %v, want %v (writable: the tree can be removed)", got, fs.ModeDir|0o755)
	}
	// PutTree of the same tree keeps its writable modes.
	ft = newMemFiles()
	if err := sandbox.PutTree(t.Context(), ft, "t", src); err != nil {
		t.Fatalf("PutTree = %v", err)
	}
	if got := ft.modes["t/notes/ro.txt"]; got != 0o644 {
		t.Errorf("PutTree wrote notes/ro.txt with mode %v, want 0644 (only PutReadOnlyTree makes files read-only)", got)
	}
}

func TestPutTreeCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := sandbox.PutTree(ctx, newMemFiles(), "x", fstest.MapFS{"a": {Data: []byte("a")}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("PutTree with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestWalkTree(t *testing.T) {
	t.Parallel()
	src := fstest.MapFS{
		"b/x.sh":  {Data: []byte("xx"), Mode: 0o751},
		"a.txt":   {Data: []byte("a"), Mode: 0o400},
		"l":       {Data: []byte("../outside"), Mode: fs.ModeSymlink | 0o777},
		"b/empty": {Mode: fs.ModeDir | 0o700},
	}
	var got []string
	err := sandbox.WalkTree(src, func(e sandbox.TreeEntry) error {
		got = append(got, fmt.Sprintf("%s %v %d %s", e.Name, e.Mode, e.Size, e.Target))
		return nil
	})
	if err != nil {
		t.Fatalf("WalkTree = %v, want no error", err)
	}
	want := []string{
		"a.txt -rw-r--r-- 1 ",
		"b drwxr-xr-x 0 ",
		"b/empty drwxr-xr-x 0 ",
		"b/x.sh -rwxr-xr-x 2 ",
		"l Lrwxrwxrwx 0 ../outside",
	}
	if !slices.Equal(got, want) {
		t.Errorf("WalkTree entries =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := sandbox.WalkTree(fstest.MapFS{"f": {Data: []byte("f")}}, func(sandbox.TreeEntry) error { return io.ErrShortWrite }); !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("WalkTree with a failing callback = %v, want its error", err)
	}
}

func TestExactReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		data     string
		size     int64
		mismatch bool
	}{
		{"hello", 5, false},
		{"", 0, false},
		{"hel", 5, true},
		{"hello!", 5, true},
		{"x", 0, true},
	}
	for _, tt := range tests {
		got, err := io.ReadAll(sandbox.ExactReader(strings.NewReader(tt.data), tt.size))
		if tt.mismatch {
			if !errors.Is(err, sandbox.ErrSizeMismatch) {
				t.Errorf("ExactReader(%q, %d): error %v, want ErrSizeMismatch", tt.data, tt.size, err)
			}
			continue
		}
		if err != nil || string(got) != tt.data {
			t.Errorf("ExactReader(%q, %d) = %q, %v; want %q, no error", tt.data, tt.size, got, err, tt.data)
		}
	}
	// Bytes are delivered in order, never more than size.
	r := sandbox.ExactReader(io.MultiReader(strings.NewReader("ab"), strings.NewReader("cd")), 4)
	if got, err := io.ReadAll(r); err != nil || string(got) != "abcd" {
		t.Errorf("ExactReader over two readers = %q, %v; want %q", got, err, "abcd")
	}
}

func TestInSessionPaths(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"/mnt/session":           true,
		"/mnt/session/outputs/x": true,
		"/workspace":             true,
		"/workspace/a/../b":      true,
		"/mnt/sessionx":          false,
		"/mnt":                   false,
		"/workspace/../etc":      false,
		"/etc/passwd":            false,
	} {
		if got := sandbox.InSessionPaths(p); got != want {
			t.Errorf("InSessionPaths(%q) = %v, want %v", p, got, want)
		}
	}
}
