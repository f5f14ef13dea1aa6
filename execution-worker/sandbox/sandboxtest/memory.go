package sandboxtest

import (
	"errors"
	"strings"
	"testing"

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
