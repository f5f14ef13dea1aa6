package sandboxdocker_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
)

// TestSessionPathsAreContainerPaths checks that /mnt/session is the real
// container directory, and that a link planted on the way to it cannot
// lead file access elsewhere.
func TestSessionPathsAreContainerPaths(t *testing.T) {
	daemon(t)
	sb, _ := create(t, newProvider(t, sandboxdocker.Config{}), newKey(t))
	ft := sb.(sandbox.FileTransfer)
	if err := ft.PutFile(t.Context(), sandbox.UploadsDir+"/f/a.csv", strings.NewReader("a,b"), 3, 0o444); err != nil {
		t.Fatalf("PutFile = %v", err)
	}
	if got := mustExec(t, sb, "cat /mnt/session/uploads/f/a.csv; stat -c ' %a' /mnt/session/uploads/f/a.csv /mnt/session/uploads/f"); got != "a,b 444\n 755\n" {
		t.Errorf("in the container: %q, want the file with mode 444 in a directory of mode 755", got)
	}

	mustExec(t, sb, "rm -rf /mnt/session && ln -s /etc /mnt/session")
	if err := sb.WriteFile(t.Context(), sandbox.OutputsDir+"/x", []byte("x"), 0o644); !errors.Is(err, sandbox.ErrPathEscape) {
		t.Errorf("WriteFile through a link /mnt/session -> /etc = %v, want ErrPathEscape", err)
	}
	if _, err := ft.ListFiles(t.Context(), sandbox.SessionDir); !errors.Is(err, sandbox.ErrPathEscape) {
		t.Errorf("ListFiles through a link /mnt/session -> /etc = %v, want ErrPathEscape", err)
	}
	if err := ft.RemoveAll(t.Context(), sandbox.SessionDir); err == nil {
		t.Error("RemoveAll(/mnt/session) = nil, want an error (a top directory)")
	}
	mustExec(t, sb, "test -d /etc && test ! -e /etc/outputs")
}

// TestMemoryPathsAreContainerPaths checks that /mnt/memory is the real
// container directory, and that a link planted in its place cannot lead
// file access elsewhere.
func TestMemoryPathsAreContainerPaths(t *testing.T) {
	daemon(t)
	sb, _ := create(t, newProvider(t, sandboxdocker.Config{}), newKey(t))
	ft := sb.(sandbox.FileTransfer)
	name := sandbox.MemoryDir + "/store/notes.md"
	if err := ft.PutFile(t.Context(), name, strings.NewReader("note"), 4, 0o644); err != nil {
		t.Fatalf("PutFile(%q) = %v", name, err)
	}
	if got := mustExec(t, sb, "cat "+name+"; stat -c ' %a' "+name+" /mnt/memory/store"); got != "note 644\n 755\n" {
		t.Errorf("in the container: %q, want the file with mode 644 in a directory of mode 755", got)
	}
	mustExec(t, sb, "rm -rf /mnt/memory && ln -s /etc /mnt/memory")
	if err := ft.PutFile(t.Context(), sandbox.MemoryDir+"/store/x", strings.NewReader("x"), 1, 0o644); !errors.Is(err, sandbox.ErrPathEscape) {
		t.Errorf("PutFile through a link /mnt/memory -> /etc = %v, want ErrPathEscape", err)
	}
	if _, err := ft.ListFiles(t.Context(), sandbox.MemoryDir); !errors.Is(err, sandbox.ErrPathEscape) {
		t.Errorf("ListFiles through a link /mnt/memory -> /etc = %v, want ErrPathEscape", err)
	}
	if err := ft.RemoveAll(t.Context(), sandbox.MemoryDir); err == nil {
		t.Error("RemoveAll(/mnt/memory) = nil, want an error (a top directory)")
	}
	mustExec(t, sb, "test -d /etc && test ! -e /etc/store")
}

// TestListFilesOddNames checks names with spaces, quotes and newlines, and
// that links are neither followed nor listed.
func TestListFilesOddNames(t *testing.T) {
	daemon(t)
	sb, _ := create(t, newProvider(t, sandboxdocker.Config{}), newKey(t))
	ft := sb.(sandbox.FileTransfer)
	mustExec(t, sb, `mkdir -p "o/a b" && printf 1 > "o/a b/it's" && printf 22 > "o/new
line" && printf 333 > o/plain && ln -s plain o/link && ln -s / o/root`)
	files, err := ft.ListFiles(t.Context(), "/workspace/o")
	if err != nil {
		t.Fatalf("ListFiles = %v", err)
	}
	var got []string
	for _, f := range files {
		got = append(got, fmt.Sprintf("%s=%d", f.Path, f.Size))
		if f.ModTime.IsZero() {
			t.Errorf("ListFiles: %s has no ModTime", f.Path)
		}
	}
	want := "/workspace/o/a b/it's=1|/workspace/o/new\nline=2|/workspace/o/plain=3"
	if strings.Join(got, "|") != want {
		t.Errorf("ListFiles = %q, want %q", strings.Join(got, "|"), want)
	}
	rc, size, err := ft.GetFile(t.Context(), "o/new\nline")
	if err != nil {
		t.Fatalf("GetFile = %v", err)
	}
	data, _ := io.ReadAll(rc)
	_ = rc.Close()
	if string(data) != "22" || size != 2 {
		t.Errorf("GetFile(o/new\\nline) = %q (size %d), want %q (2)", data, size, "22")
	}
}

// TestPutTreeOneStream checks links and modes of the tar-based PutTree
// into a directory that does not exist yet.
func TestPutTreeOneStream(t *testing.T) {
	daemon(t)
	sb, _ := create(t, newProvider(t, sandboxdocker.Config{}), newKey(t))
	src := fstest.MapFS{
		"bin/x":     {Data: []byte("#!/bin/sh\necho x\n"), Mode: 0o700},
		"doc/a.txt": {Data: []byte("a"), Mode: 0o600},
		"ln":        {Data: []byte("doc/a.txt"), Mode: 0o777 | fs.ModeSymlink},
	}
	if err := sandbox.PutTree(t.Context(), sb.(sandbox.FileTransfer), "/mnt/session/uploads/r", src); err != nil {
		t.Fatalf("PutTree = %v", err)
	}
	got := mustExec(t, sb, "cd /mnt/session/uploads/r && ./bin/x && stat -c '%a %n' bin/x doc/a.txt doc . && readlink ln")
	if want := "x\n755 bin/x\n644 doc/a.txt\n755 doc\n755 .\ndoc/a.txt\n"; got != want {
		t.Errorf("after PutTree: %q, want %q", got, want)
	}
}
