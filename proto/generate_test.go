package proto_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates the Go code with the pinned buf and
// plugins into a temporary directory and compares it with the committed
// gen/ tree, so a .proto edit without `buf generate` fails the build. It is
// skipped when the tools have not been built into ../bin.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	for _, tool := range []string{"buf", "protoc-gen-go", "protoc-gen-go-grpc"} {
		if _, err := os.Stat(filepath.Join("..", "bin", tool)); err != nil {
			t.Skipf("../bin/%s not built (make tools); skipping generated-code drift check", tool)
		}
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join("..", "bin", "buf"), "generate", "--output", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("buf generate: %v\n%s", err, msg)
	}
	want := readTree(t, filepath.Join(out, "gen"))
	got := readTree(t, "gen")
	for path, w := range want {
		g, ok := got[path]
		switch {
		case !ok:
			t.Errorf("gen/%s is missing; run `cd proto && ../bin/buf generate`", path)
		case !bytes.Equal(g, w):
			t.Errorf("gen/%s is stale; run `cd proto && ../bin/buf generate`", path)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("gen/%s is not generated from any .proto file; delete it", path)
		}
	}
	if len(want) == 0 {
		t.Error("buf generate produced no files")
	}
}

func readTree(t *testing.T, root string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", root, err)
	}
	return files
}
