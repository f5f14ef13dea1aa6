package sandboxtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Received reports what a provider's fake recorded for an upload to the
// sandbox path p (absolute, under the sandbox's root): the number of bytes,
// their hex sha256, and whether it saw an upload there at all.
type Received func(p string) (n int64, sha256 string, ok bool)

// CheckStreamingTransfer checks, against a provider's in-process fake, that
// a 50 MiB PutFile of sb reaches the fake as a stream (received reports
// every byte) while the test process (client and fake) allocates under
// 16 MiB in total, that the mode asked for is set, that GetFile streams the
// file back intact, and that PutFile fails when the reader yields fewer or
// more bytes than announced.
func CheckStreamingTransfer(t *testing.T, sb sandbox.Sandbox, received Received) {
	t.Helper()
	ft, ok := sb.(sandbox.FileTransfer)
	if !ok {
		t.Fatalf("%T does not implement sandbox.FileTransfer", sb)
	}
	const size = largeFileSize
	src := newHashingReader(42, size)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := ft.PutFile(t.Context(), "big.bin", src, size, 0o600); err != nil {
		t.Fatalf("PutFile(big.bin, 50 MiB) = %v, want no error", err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("PutFile of 50 MiB allocated %d MiB in this process (client and fake), want under 16 MiB (a stream)", grew>>20)
	}
	want := hex.EncodeToString(src.h.Sum(nil))
	if n, sum, ok := received(path.Join(sb.Root(), "big.bin")); !ok || n != size || sum != want {
		t.Errorf("fake received %d bytes with sha256 %s (recorded: %v), want %d bytes with sha256 %s", n, sum, ok, size, want)
	}
	if got := strings.TrimSpace(run(t, sb, "stat -c %a big.bin")); got != "600" {
		t.Errorf("mode after PutFile(0600) = %q, want 600", got)
	}
	rc, n, err := ft.GetFile(t.Context(), "big.bin")
	if err != nil {
		t.Fatalf("GetFile(big.bin) = %v, want no error", err)
	}
	defer func() { _ = rc.Close() }()
	h := sha256.New()
	copied, err := io.Copy(h, rc)
	if got := hex.EncodeToString(h.Sum(nil)); err != nil || n != size || copied != size || got != want {
		t.Errorf("GetFile: size %d, read %d bytes (err %v), sha256 %s; want %d bytes, sha256 %s", n, copied, err, got, size, want)
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

// CheckSessionPaths checks files of sb at the session paths
// ([sandbox.UploadsDir], [sandbox.OutputsDir]) and at absolute /workspace
// paths: a read-only upload read back, a listing sorted by path with odd
// names (spaces, nested directories, an empty file) and sizes and times,
// removal (a missing directory is no error, a removed file is
// [fs.ErrNotExist]), and [sandbox.ErrPathEscape] for paths outside both. It
// expects a fresh sandbox whose root is /workspace and whose outputs
// directory is empty.
func CheckSessionPaths(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	ft, ok := sb.(sandbox.FileTransfer)
	if !ok {
		t.Fatalf("%T does not implement sandbox.FileTransfer", sb)
	}
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
	for _, bad := range []string{"/etc/x", "../x", "/mnt/sessionx/y", "/mnt/memoryx/y", "/mnt/x"} {
		if err := ft.PutFile(ctx, bad, strings.NewReader("x"), 1, 0o644); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("PutFile(%q) = %v, want ErrPathEscape", bad, err)
		}
	}
}
