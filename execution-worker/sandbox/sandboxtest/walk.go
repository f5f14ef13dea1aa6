package sandboxtest

import (
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// walkFiles collects what [sandbox.WalkFiles] reports under dir: each
// path's content, checking that the announced size is what was read.
func walkFiles(t *testing.T, ft sandbox.FileTransfer, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := sandbox.WalkFiles(t.Context(), ft, dir, func(p string, size int64, r io.Reader) error {
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if int64(len(data)) != size {
			t.Errorf("WalkFiles(%q) announced %d bytes for %q, the reader yielded %d", dir, size, p, len(data))
		}
		if _, dup := got[p]; dup {
			t.Errorf("WalkFiles(%q) reported %q twice", dir, p)
		}
		got[p] = string(data)
		return nil
	})
	if err != nil {
		t.Fatalf("WalkFiles(%q) = %v, want no error", dir, err)
	}
	return got
}

// testTransferWalkFiles checks [sandbox.WalkFiles] (the provider's
// [sandbox.TreeGetter] when it has one): it reports exactly the regular
// files under a directory with their contents (a nested one, an empty
// one, a name with a space), at the paths ListFiles gives them, skips
// symbolic links (to a file and to a directory) without following them,
// reports nothing for a missing directory, and reads a memory mount at
// its absolute paths.
func (s *suite) testTransferWalkFiles(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	ft := transfer(t, sb)
	const dir = "walk-files"
	want := map[string]string{
		"a.txt":              "alpha\n",
		"empty":              "",
		"with space.md":      "spaced out",
		"nested/deep/b.json": `{"b":1}`,
	}
	for name, data := range want {
		putFile(t, ft, dir+"/"+name, []byte(data), 0o644)
	}
	run(t, sb, "cd "+dir+" && ln -s a.txt link.txt && ln -s nested dir-link && ln -s /etc escape")

	got := walkFiles(t, ft, dir)
	listed := listFiles(t, ft, dir)
	paths := slices.Sorted(maps.Keys(got))
	var listedPaths []string
	for _, f := range listed {
		listedPaths = append(listedPaths, f.Path)
	}
	if !slices.Equal(paths, listedPaths) {
		t.Errorf("WalkFiles(%q) reported %q, want the paths ListFiles gives %q", dir, paths, listedPaths)
	}
	byName := map[string]string{}
	for p, data := range got {
		_, name, ok := strings.Cut(p, dir+"/")
		if !ok {
			t.Errorf("WalkFiles(%q) reported %q, not under the directory", dir, p)
			continue
		}
		byName[name] = data
	}
	if !maps.Equal(byName, want) {
		t.Errorf("WalkFiles(%q) = %q, want the regular files alone %q", dir, byName, want)
	}

	if got := walkFiles(t, ft, dir+"/missing"); len(got) != 0 {
		t.Errorf("WalkFiles(%q) of a missing directory = %q, want nothing", dir+"/missing", got)
	}

	mem := map[string]string{memoryMount + "/notes.md": "remember\n", memoryMount + "/projects/a b.md": "project a\n"}
	for p, data := range mem {
		putFile(t, ft, p, []byte(data), 0o644)
	}
	if got := walkFiles(t, ft, memoryMount); !maps.Equal(got, mem) {
		t.Errorf("WalkFiles(%q) = %q, want %q", memoryMount, got, mem)
	}
}
