package sandboxk8s_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// genReader yields n pseudo-random bytes, hashing what it yields.
type genReader struct {
	rng  *rand.ChaCha8
	n    int64
	hash hash.Hash
}

func newGenReader(n int64) *genReader {
	return &genReader{rng: rand.NewChaCha8([32]byte{4, 2}), n: n, hash: sha256.New()}
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.n == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.n {
		p = p[:g.n]
	}
	_, _ = g.rng.Read(p)
	g.hash.Write(p)
	g.n -= int64(len(p))
	return len(p), nil
}

func (g *genReader) sum() string { return hex.EncodeToString(g.hash.Sum(nil)) }

// received returns what the fake recorded for an upload to a sandbox
// path: bytes, hex sha256, and whether it saw one.
type received func(p string) (int64, string, bool)

// checkPutFileStreams checks that a 50 MiB PutFile reaches the fake as a
// stream (the fake records every byte) without this process allocating
// anything near the file's size, and that GetFile streams it back.
func checkPutFileStreams(t *testing.T, sb sandbox.Sandbox, got received) {
	t.Helper()
	ft, ok := sb.(sandbox.FileTransfer)
	if !ok {
		t.Fatalf("%T does not implement sandbox.FileTransfer", sb)
	}
	const size = 50 << 20
	gen := newGenReader(size)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := ft.PutFile(t.Context(), "big.bin", gen, size, 0o600); err != nil {
		t.Fatalf("PutFile(big.bin, 50 MiB) = %v, want no error", err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("PutFile of 50 MiB allocated %d MiB in this process (client and fake), want under 16 MiB (a stream)", grew>>20)
	}
	if n, sum, ok := got(path.Join(sb.Root(), "big.bin")); !ok || n != size || sum != gen.sum() {
		t.Errorf("fake received %d bytes with sha256 %s (recorded: %v), want %d bytes with sha256 %s", n, sum, ok, size, gen.sum())
	}
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "stat -c %a big.bin"})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "600" {
		t.Errorf("mode after PutFile(0600) = %+v, %v; want 600", res, err)
	}
	rc, n, err := ft.GetFile(t.Context(), "big.bin")
	if err != nil {
		t.Fatalf("GetFile(big.bin) = %v, want no error", err)
	}
	defer func() { _ = rc.Close() }()
	h := sha256.New()
	copied, err := io.Copy(h, rc)
	if err != nil || n != size || copied != size || hex.EncodeToString(h.Sum(nil)) != gen.sum() {
		t.Errorf("GetFile: size %d, read %d bytes (err %v), sha256 %x; want %d bytes, sha256 %s", n, copied, err, h.Sum(nil), size, gen.sum())
	}
	for _, tc := range []struct {
		data string
		size int64
	}{{"short", 10}, {"too long", 3}} {
		if err := ft.PutFile(t.Context(), "x.txt", strings.NewReader(tc.data), tc.size, 0o644); err == nil {
			t.Errorf("PutFile(%q, size %d) = nil, want an error", tc.data, tc.size)
		}
	}
}

// checkSessionPaths checks files at /mnt/session and /workspace paths,
// listing with odd names, removal and escapes.
func checkSessionPaths(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	ft := sb.(sandbox.FileTransfer)
	ctx := t.Context()
	if err := ft.PutFile(ctx, sandbox.UploadsDir+"/a.csv", strings.NewReader("a,b\n"), 4, 0o444); err != nil {
		t.Fatalf("PutFile(uploads/a.csv) = %v", err)
	}
	if got, err := sb.ReadFile(ctx, sandbox.UploadsDir+"/a.csv"); err != nil || string(got) != "a,b\n" {
		t.Errorf("ReadFile(uploads/a.csv) = %q, %v; want %q", got, err, "a,b\n")
	}
	for name, data := range map[string]string{"r.txt": "result", "with space/x y.txt": "spaced", "deep/er/z": ""} {
		if err := sb.WriteFile(ctx, sandbox.OutputsDir+"/"+name, []byte(data), 0o644); err != nil {
			t.Fatalf("WriteFile(outputs/%s) = %v", name, err)
		}
	}
	got, err := ft.ListFiles(ctx, sandbox.OutputsDir)
	if err != nil {
		t.Fatalf("ListFiles(outputs) = %v", err)
	}
	want := []string{sandbox.OutputsDir + "/deep/er/z", sandbox.OutputsDir + "/r.txt", sandbox.OutputsDir + "/with space/x y.txt"}
	var paths []string
	for _, fi := range got {
		paths = append(paths, fi.Path)
	}
	if !slices.Equal(paths, want) || got[1].Size != 6 || got[1].ModTime.IsZero() {
		t.Errorf("ListFiles(outputs) = %+v, want paths %q with r.txt of 6 bytes and a time", got, want)
	}
	if err := sb.WriteFile(ctx, "/workspace/repo/main.go", []byte("package main"), 0o644); err != nil {
		t.Fatalf("WriteFile(/workspace/repo/main.go) = %v", err)
	}
	if got, err := sb.ReadFile(ctx, "repo/main.go"); err != nil || string(got) != "package main" {
		t.Errorf("ReadFile(repo/main.go) after a write to /workspace/repo/main.go = %q, %v", got, err)
	}
	if got, err := ft.ListFiles(ctx, "/workspace/repo"); err != nil || len(got) != 1 || got[0].Path != "/workspace/repo/main.go" {
		t.Errorf("ListFiles(/workspace/repo) = %+v, %v; want /workspace/repo/main.go", got, err)
	}
	if err := ft.RemoveAll(ctx, sandbox.OutputsDir); err != nil {
		t.Fatalf("RemoveAll(outputs) = %v", err)
	}
	if got, err := ft.ListFiles(ctx, sandbox.OutputsDir); err != nil || len(got) != 0 {
		t.Errorf("ListFiles after RemoveAll = %+v, %v; want empty, nil", got, err)
	}
	if err := ft.RemoveAll(ctx, sandbox.OutputsDir); err != nil {
		t.Errorf("RemoveAll of a missing dir = %v, want nil", err)
	}
	if _, _, err := ft.GetFile(ctx, sandbox.OutputsDir+"/r.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("GetFile of a removed file = %v, want fs.ErrNotExist", err)
	}
	for _, bad := range []string{"/etc/x", "../x", "/mnt/sessionx/y", "/mnt/x"} {
		if err := ft.PutFile(ctx, bad, strings.NewReader("x"), 1, 0o644); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("PutFile(%q) = %v, want ErrPathEscape", bad, err)
		}
	}
}

func TestPutFileStreams(t *testing.T) {
	f := newFake(t)
	sb, ref := create(t, newProvider(t, f, nil), "stream")
	checkPutFileStreams(t, sb, func(p string) (int64, string, bool) {
		u, ok := f.Upload(ns, name(ref), p)
		return u.Bytes, u.SHA256, ok
	})
}

func TestSessionPaths(t *testing.T) {
	f := newFake(t)
	sb, _ := create(t, newProvider(t, f, nil), "paths")
	checkSessionPaths(t, sb)
}
