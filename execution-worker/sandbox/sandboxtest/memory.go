package sandboxtest

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/internal/testenv"
)

// memoryMount is where the memory check mounts its store: where the worker
// mounts a memory store named "conformance-store".
const memoryMount = sandbox.MemoryDir + "/conformance-store"

// testTransferMemoryPaths checks the memory root ([sandbox.MemoryDir]) as
// the worker uses it for memory stores: files put under
// /mnt/memory/<name> are read back (GetFile, ReadFile) and listed with
// their absolute paths, the roots themselves cannot be removed, paths
// beside them (/mnt/memoryx, /mnt/x) are escapes, a command sees the
// mount at its absolute path, a file it writes there is listed and read
// back, and a removed mount is gone for both and can be placed again.
func (s *suite) testTransferMemoryPaths(t *testing.T) {
	p := s.client(t)
	sb, _ := s.create(t, p, newKey(t))
	ft := transfer(t, sb)
	notes, nested := memoryMount+"/notes.md", memoryMount+"/projects/a.md"
	putFile(t, ft, notes, []byte("remember\n"), 0o644)
	putFile(t, ft, nested, []byte("project a\n"), 0o644)
	if got := getFile(t, ft, notes); string(got) != "remember\n" {
		t.Errorf("GetFile(%q) = %q, want %q", notes, got, "remember\n")
	}
	if got := readFile(t, sb, nested); string(got) != "project a\n" {
		t.Errorf("ReadFile(%q) = %q, want %q", nested, got, "project a\n")
	}
	want := notes + " 9\n" + nested + " 10\n"
	if got := fileSizes(listFiles(t, ft, memoryMount)); got != want {
		t.Errorf("ListFiles(%q) =\n%s\nwant\n%s", memoryMount, got, want)
	}
	if got := fileSizes(listFiles(t, ft, sandbox.MemoryDir)); got != want {
		t.Errorf("ListFiles(%q) =\n%s\nwant\n%s", sandbox.MemoryDir, got, want)
	}
	checkMemoryRefusals(t, ft)

	if s.h.SessionDirHidden != nil {
		if why := s.h.SessionDirHidden(p); why != "" {
			testenv.Unavailable(t, "commands do not see %s here (%s); the agent's side is not checked", sandbox.MemoryDir, why)
		}
	}
	agent := memoryMount + "/by-agent/log.md"
	cmd := "cat " + notes + " && mkdir -p " + memoryMount + "/by-agent && printf 'agent wrote' > " + agent + " && rm " + nested
	if got := runAsAgent(t, sb, cmd); got != "remember\n" {
		t.Errorf("%q printed %q, want %q", cmd, got, "remember\n")
	}
	want = agent + " 11\n" + notes + " 9\n"
	if got := fileSizes(listFiles(t, ft, memoryMount)); got != want {
		t.Errorf("ListFiles(%q) after the agent wrote %s and removed %s =\n%s\nwant\n%s", memoryMount, agent, nested, got, want)
	}
	if got := getFile(t, ft, agent); string(got) != "agent wrote" {
		t.Errorf("GetFile(%q) = %q, want what the agent wrote %q", agent, got, "agent wrote")
	}

	if err := ft.RemoveAll(t.Context(), memoryMount); err != nil {
		t.Fatalf("RemoveAll(%q) = %v, want no error", memoryMount, err)
	}
	if got := listFiles(t, ft, memoryMount); len(got) != 0 {
		t.Errorf("ListFiles(%q) after RemoveAll = %v, want empty", memoryMount, got)
	}
	check := "test -e " + memoryMount + " && echo kept; test -d " + sandbox.MemoryDir + " && echo root; true"
	if got := runAsAgent(t, sb, check); got != "root\n" {
		t.Errorf("after RemoveAll(%q), %q printed %q, want %q (the mount gone, %s kept)", memoryMount, check, got, "root\n", sandbox.MemoryDir)
	}
	putFile(t, ft, notes, []byte("again"), 0o444)
	if got := runAsAgent(t, sb, "cat "+notes); got != "again" {
		t.Errorf("cat %s after placing it again printed %q, want %q", notes, got, "again")
	}
	checkEmptyMemoryStore(t, sb, ft)
}

// checkEmptyMemoryStore places an empty store as the worker does (PutTree
// of its directory alone under [sandbox.MemoryDir]) and checks that the
// agent can write into it by its absolute path and that what it wrote is
// listed.
func checkEmptyMemoryStore(t *testing.T, sb sandbox.Sandbox, ft sandbox.FileTransfer) {
	t.Helper()
	if _, ok := ft.(sandbox.TreePutter); !ok {
		t.Logf("%T is no TreePutter: PutTree skips empty directories, an empty store is not placed", ft)
		return
	}
	empty := fstest.MapFS{"empty-store": &fstest.MapFile{Mode: fs.ModeDir | 0o755}}
	if err := sandbox.PutTree(t.Context(), ft, sandbox.MemoryDir, empty); err != nil {
		t.Fatalf("PutTree(%q, an empty store directory) = %v, want no error", sandbox.MemoryDir, err)
	}
	name := sandbox.MemoryDir + "/empty-store/first.md"
	if got := runAsAgent(t, sb, "printf first > "+name+" && cat "+name); got != "first" {
		t.Errorf("writing %s with a command printed %q, want %q", name, got, "first")
	}
	if got := fileSizes(listFiles(t, ft, sandbox.MemoryDir+"/empty-store")); got != name+" 5\n" {
		t.Errorf("ListFiles of the empty store after the agent wrote %s =\n%s\nwant %s 5", name, got, name)
	}
}

// checkMemoryRefusals checks that the session roots cannot be removed
// themselves and that paths beside the memory root are escapes.
func checkMemoryRefusals(t *testing.T, ft sandbox.FileTransfer) {
	t.Helper()
	for _, root := range sandbox.SessionRoots {
		if err := ft.RemoveAll(t.Context(), root); err == nil {
			t.Errorf("RemoveAll(%q) = nil, want an error (a session root cannot be removed)", root)
		}
	}
	if got := listFiles(t, ft, memoryMount); len(got) != 2 {
		t.Errorf("ListFiles(%q) after the refused RemoveAll = %v, want its 2 files kept", memoryMount, got)
	}
	for _, bad := range []string{"/mnt/memoryx/y", "/mnt/x", "/mnt/memory/../x"} {
		if err := ft.PutFile(t.Context(), bad, strings.NewReader("x"), 1, 0o644); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("PutFile(%q) = %v, want ErrPathEscape", bad, err)
		}
		if _, _, err := ft.GetFile(t.Context(), bad); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("GetFile(%q) = %v, want ErrPathEscape", bad, err)
		}
	}
	for _, bad := range []string{"/mnt/memoryx", "/mnt"} {
		if _, err := ft.ListFiles(t.Context(), bad); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("ListFiles(%q) = %v, want ErrPathEscape", bad, err)
		}
		if err := ft.RemoveAll(t.Context(), bad+"/y"); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("RemoveAll(%q) = %v, want ErrPathEscape", bad+"/y", err)
		}
	}
}
