package sandboxtest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// largeFileSize is the size of the file the large transfer test streams.
const largeFileSize = 50 << 20

// transfer returns the sandbox's FileTransfer or skips t.
func transfer(t *testing.T, sb sandbox.Sandbox) sandbox.FileTransfer {
	t.Helper()
	ft, ok := sb.(sandbox.FileTransfer)
	if !ok {
		t.Skipf("sandbox %T does not implement sandbox.FileTransfer", sb)
	}
	return ft
}

func putFile(t *testing.T, ft sandbox.FileTransfer, name string, data []byte, perm fs.FileMode) {
	t.Helper()
	if err := ft.PutFile(t.Context(), name, bytes.NewReader(data), int64(len(data)), perm); err != nil {
		t.Fatalf("PutFile(%q) = %v, want no error", name, err)
	}
}

func getFile(t *testing.T, ft sandbox.FileTransfer, name string) []byte {
	t.Helper()
	rc, size, err := ft.GetFile(t.Context(), name)
	if err != nil {
		t.Fatalf("GetFile(%q) = %v, want no error", name, err)
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("GetFile(%q): reading = %v, want no error", name, err)
	}
	if int64(len(data)) != size {
		t.Errorf("GetFile(%q) announced %d bytes, the reader yielded %d", name, size, len(data))
	}
	return data
}

func listFiles(t *testing.T, ft sandbox.FileTransfer, dir string) []sandbox.FileInfo {
	t.Helper()
	files, err := ft.ListFiles(t.Context(), dir)
	if err != nil {
		t.Fatalf("ListFiles(%q) = %v, want no error", dir, err)
	}
	if !slices.IsSortedFunc(files, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) }) {
		t.Errorf("ListFiles(%q) is not sorted by Path", dir)
	}
	return files
}

// fileSizes renders a listing as "path size" lines, for comparisons.
func fileSizes(files []sandbox.FileInfo) string {
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "%s %d\n", f.Path, f.Size)
	}
	return b.String()
}

// heapPeak samples the bytes of live and not yet swept heap objects until
// stop is called, and returns the peak growth over the level at the start
// (after a collection).
func heapPeak() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC()
	base := read()
	peak := base
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				peak = max(peak, read())
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak - base
	}
}

// hashingReader yields n pseudo-random bytes, generated as they are read,
// and hashes them.
type hashingReader struct {
	src  io.Reader
	left int64
	h    hash.Hash
}

func newHashingReader(seed byte, n int64) *hashingReader {
	var s [32]byte
	s[0] = seed
	return &hashingReader{src: rand.NewChaCha8(s), left: n, h: sha256.New()}
}

func (r *hashingReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.src.Read(p)
	r.h.Write(p[:n])
	r.left -= int64(n)
	return n, err
}

func (s *suite) testTransferLarge(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	ft := transfer(t, sb)
	const name = sandbox.UploadsDir + "/large/blob.bin"

	src := newHashingReader(7, largeFileSize)
	stop := heapPeak()
	start := time.Now()
	if err := ft.PutFile(t.Context(), name, src, largeFileSize, 0o644); err != nil {
		t.Fatalf("PutFile(%q, %d bytes) = %v, want no error", name, largeFileSize, err)
	}
	putTime := time.Since(start)
	putGrowth := stop()
	want := src.h.Sum(nil)

	stop = heapPeak()
	start = time.Now()
	rc, size, err := ft.GetFile(t.Context(), name)
	if err != nil {
		t.Fatalf("GetFile(%q) = %v, want no error", name, err)
	}
	h := sha256.New()
	n, err := io.Copy(h, rc)
	_ = rc.Close()
	getTime := time.Since(start)
	getGrowth := stop()
	if err != nil {
		t.Fatalf("GetFile(%q): reading = %v after %d bytes, want no error", name, err, n)
	}
	if size != largeFileSize || n != largeFileSize {
		t.Errorf("GetFile(%q): size %d, read %d bytes; want %d for both", name, size, n, largeFileSize)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want) {
		t.Errorf("GetFile(%q): sha256 %x, want %x of the bytes put", name, got, want)
	}
	t.Logf("%d MiB: PutFile %v (heap +%d KiB), GetFile %v (heap +%d KiB)",
		largeFileSize>>20, putTime.Round(time.Millisecond), putGrowth>>10, getTime.Round(time.Millisecond), getGrowth>>10)
	if s.h.FilesInProcess {
		return
	}
	// A whole file in memory would show as at least its size.
	const limit = largeFileSize / 2
	if putGrowth > limit || getGrowth > limit {
		t.Errorf("heap grew by %d KiB during PutFile and %d KiB during GetFile of %d MiB, want each below %d KiB (stream, never hold the file)",
			putGrowth>>10, getGrowth>>10, largeFileSize>>20, limit>>10)
	}
}

// manyFiles returns a tree of n small files in nested directories, plus an
// executable file and a symbolic link, and the files' sizes by name.
func manyFiles(n int) (fstest.MapFS, map[string]int) {
	tree := fstest.MapFS{}
	sizes := map[string]int{}
	for i := range n {
		name := fmt.Sprintf("d%02d/e%d/f%03d.txt", i%10, i%3, i)
		data := strings.Repeat(fmt.Sprintf("file %d\n", i), i%7)
		tree[name] = &fstest.MapFile{Data: []byte(data), Mode: 0o644}
		sizes[name] = len(data)
	}
	tree["bin/run.sh"] = &fstest.MapFile{Data: []byte("#!/bin/sh\necho ran\n"), Mode: 0o755}
	sizes["bin/run.sh"] = len("#!/bin/sh\necho ran\n")
	tree["link"] = &fstest.MapFile{Data: []byte("bin/run.sh"), Mode: fs.ModeSymlink | 0o777}
	return tree, sizes
}

func (s *suite) testTransferTree(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	ft := transfer(t, sb)
	tree, sizes := manyFiles(500)

	start := time.Now()
	if err := sandbox.PutTree(t.Context(), ft, "tree", tree); err != nil {
		t.Fatalf("PutTree(tree, %d files) = %v, want no error", len(sizes), err)
	}
	elapsed := time.Since(start)
	_, oneStream := ft.(sandbox.TreePutter)
	t.Logf("PutTree of %d files: %v (TreePutter: %v)", len(sizes), elapsed.Round(time.Millisecond), oneStream)

	var want []sandbox.FileInfo
	for name, size := range sizes {
		want = append(want, sandbox.FileInfo{Path: path.Join(sb.Root(), "tree", name), Size: int64(size)})
	}
	slices.SortFunc(want, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	if got := listFiles(t, ft, "tree"); fileSizes(got) != fileSizes(want) {
		t.Errorf("ListFiles(tree) after PutTree =\n%s\nwant (regular files only, no link)\n%s", head(fileSizes(got)), head(fileSizes(want)))
	}
	if got := readFile(t, sb, "tree/d03/e2/f023.txt"); string(got) != strings.Repeat("file 23\n", 2) {
		t.Errorf("ReadFile(tree/d03/e2/f023.txt) = %q, want %q", got, strings.Repeat("file 23\n", 2))
	}
	check := "test -x tree/bin/run.sh && echo exec; test -x tree/d00/e0/f000.txt && echo not-exec; test -L tree/link && echo link; true"
	wantOut := "exec\n"
	if oneStream {
		wantOut += "link\n" // a TreePutter keeps links
	}
	if got := run(t, sb, check); got != wantOut {
		t.Errorf("after PutTree, %q printed %q, want %q (executable bit kept, other files not executable)", check, got, wantOut)
	}
}

func (s *suite) testTransferSessionPaths(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	ft := transfer(t, sb)
	upload := sandbox.UploadsDir + "/a.csv"
	putFile(t, ft, upload, []byte("x,y\n1,2\n"), 0o444)
	if got := readFile(t, sb, upload); string(got) != "x,y\n1,2\n" {
		t.Errorf("ReadFile(%q) = %q, want the content put there %q", upload, got, "x,y\n1,2\n")
	}
	if got := getFile(t, ft, upload); string(got) != "x,y\n1,2\n" {
		t.Errorf("GetFile(%q) = %q, want %q", upload, got, "x,y\n1,2\n")
	}
	output := sandbox.OutputsDir + "/r.txt"
	writeFile(t, sb, output, []byte("report"))
	writeFile(t, sb, sandbox.OutputsDir+"/sub/deep.txt", []byte("deeper"))
	got := fileSizes(listFiles(t, ft, sandbox.OutputsDir))
	want := output + " 6\n" + sandbox.OutputsDir + "/sub/deep.txt 6\n"
	if got != want {
		t.Errorf("ListFiles(%q) =\n%s\nwant\n%s", sandbox.OutputsDir, got, want)
	}
	// PutFile replaces a file, with the new mode.
	putFile(t, ft, output, []byte("second"), 0o600)
	if got := getFile(t, ft, output); string(got) != "second" {
		t.Errorf("GetFile(%q) after a second PutFile = %q, want %q", output, got, "second")
	}
	if got := fileSizes(listFiles(t, ft, sandbox.SessionDir)); !strings.Contains(got, upload+" 8\n") || !strings.Contains(got, output+" 6\n") {
		t.Errorf("ListFiles(%q) =\n%s\nwant it to include %s and %s", sandbox.SessionDir, got, upload, output)
	}
}

func (s *suite) testTransferPathEscape(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	ft := transfer(t, sb)
	name := "mango-escape-" + strings.TrimPrefix(newKey(t), "sesn_conformance_")
	run(t, sb, "ln -s / escape-link")
	for _, p := range []string{"/etc/" + name, "../" + name, "/tmp/" + name, "escape-link/tmp/" + name, "/mnt/" + name} {
		err := ft.PutFile(t.Context(), p, strings.NewReader("x"), 1, 0o644)
		if !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("PutFile(%q) = %v, want ErrPathEscape", p, err)
		}
	}
	for _, p := range []string{"/etc/passwd", "../x", "escape-link/etc/passwd"} {
		if _, _, err := ft.GetFile(t.Context(), p); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("GetFile(%q) = %v, want ErrPathEscape", p, err)
		}
	}
	for _, p := range []string{"/etc", "..", "escape-link", "escape-link/etc"} {
		if _, err := ft.ListFiles(t.Context(), p); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("ListFiles(%q) = %v, want ErrPathEscape", p, err)
		}
	}
	for _, p := range []string{"/etc/" + name, "../" + name, "escape-link/tmp"} {
		if err := ft.RemoveAll(t.Context(), p); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("RemoveAll(%q) = %v, want ErrPathEscape", p, err)
		}
	}
	if got := run(t, sb, "ls -d /etc/"+name+" /tmp/"+name+" ../"+name+" 2>/dev/null; ls -d /tmp; true"); got != "/tmp\n" {
		t.Errorf("after rejected transfers, ls printed %q, want only %q (nothing created, /tmp kept)", got, "/tmp\n")
	}
	// The link itself is inside the workspace: removing it is fine and
	// leaves its target alone.
	if err := ft.RemoveAll(t.Context(), "escape-link"); err != nil {
		t.Errorf("RemoveAll(escape-link) = %v, want no error (it removes the link)", err)
	}
	if got := run(t, sb, "test -L escape-link && echo link; test -d /etc && echo etc; true"); got != "etc\n" {
		t.Errorf("after RemoveAll of a link, test printed %q, want %q (link gone, target kept)", got, "etc\n")
	}
}

func (s *suite) testTransferRemoveAndMissing(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	ft := transfer(t, sb)
	putFile(t, ft, "doomed/a/1.txt", []byte("1"), 0o644)
	putFile(t, ft, "doomed/2.txt", []byte("22"), 0o644)
	putFile(t, ft, "kept.txt", []byte("kept"), 0o644)
	if got := fileSizes(listFiles(t, ft, "doomed")); got != path.Join(sb.Root(), "doomed/2.txt")+" 2\n"+path.Join(sb.Root(), "doomed/a/1.txt")+" 1\n" {
		t.Errorf("ListFiles(doomed) =\n%s\nwant doomed/2.txt and doomed/a/1.txt under Root", got)
	}
	if err := ft.RemoveAll(t.Context(), "doomed"); err != nil {
		t.Fatalf("RemoveAll(doomed) = %v, want no error", err)
	}
	if got := listFiles(t, ft, "doomed"); len(got) != 0 {
		t.Errorf("ListFiles(doomed) after RemoveAll = %v, want empty", got)
	}
	if err := ft.RemoveAll(t.Context(), "doomed"); err != nil {
		t.Errorf("second RemoveAll(doomed) = %v, want no error (missing is not an error)", err)
	}
	if err := ft.RemoveAll(t.Context(), sandbox.OutputsDir+"/never/made"); err != nil {
		t.Errorf("RemoveAll of a path with a missing parent = %v, want no error", err)
	}
	if got := getFile(t, ft, "kept.txt"); string(got) != "kept" {
		t.Errorf("GetFile(kept.txt) after RemoveAll of a sibling = %q, want %q", got, "kept")
	}
	for _, p := range []string{"doomed/2.txt", "missing.txt", sandbox.OutputsDir + "/missing.txt"} {
		_, _, err := ft.GetFile(t.Context(), p)
		if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("GetFile(%q) of a missing file = %v, want an error satisfying fs.ErrNotExist and not sandbox.ErrNotFound", p, err)
		}
	}
	for _, dir := range []string{"no-such-dir", sandbox.OutputsDir + "/no-such-dir"} {
		files, err := ft.ListFiles(t.Context(), dir)
		if err != nil || len(files) != 0 {
			t.Errorf("ListFiles(%q) of a missing directory = %v, %v; want an empty list and no error", dir, files, err)
		}
	}
}

func (s *suite) testTransferSizeMismatch(t *testing.T) {
	sb, _ := s.create(t, s.client(t), newKey(t))
	ft := transfer(t, sb)
	for _, tc := range []struct {
		data string
		size int64
	}{{"abc", 5}, {"abcdef", 3}} {
		err := ft.PutFile(t.Context(), "sized.txt", strings.NewReader(tc.data), tc.size, 0o644)
		if err == nil {
			t.Errorf("PutFile of %d bytes announced as %d = nil, want an error", len(tc.data), tc.size)
		}
	}
	putFile(t, ft, "sized.txt", []byte("exact"), 0o644)
	if got := getFile(t, ft, "sized.txt"); string(got) != "exact" {
		t.Errorf("GetFile after failed PutFile calls and a good one = %q, want %q", got, "exact")
	}
}

// head keeps the first lines of a long listing for a failure message.
func head(s string) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) <= 12 {
		return s
	}
	return strings.Join(lines[:12], "") + fmt.Sprintf("... (%d lines)\n", len(lines))
}
