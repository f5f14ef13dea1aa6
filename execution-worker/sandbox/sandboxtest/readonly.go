package sandboxtest

import (
	"fmt"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/internal/testenv"
)

// readOnlyDir is where the read-only tree check places its trees: where
// the worker places a session's skills.
const readOnlyDir = sandbox.SessionDir + "/skills/conformance-skill"

// readOnlyTrees returns two versions of a skill-like tree: the second
// drops old.txt and changes SKILL.md.
func readOnlyTrees() (v1, v2 fstest.MapFS) {
	script := &fstest.MapFile{Data: []byte("#!/bin/sh\necho \"hello from $(basename \"$(dirname \"$(dirname \"$0\")\")\")\"\n"), Mode: 0o755}
	v1 = fstest.MapFS{
		"SKILL.md":         {Data: []byte("---\nname: conformance-skill\n---\nversion 1\n"), Mode: 0o644},
		"old.txt":          {Data: []byte("only in version 1"), Mode: 0o644},
		"scripts/hello.sh": script,
	}
	v2 = fstest.MapFS{
		"SKILL.md":         {Data: []byte("---\nname: conformance-skill\n---\nversion 2\n"), Mode: 0o644},
		"scripts/hello.sh": script,
	}
	return v1, v2
}

// testTransferReadOnlyTree places a tree with [sandbox.PutReadOnlyTree]
// under the session directory as the worker places a skill, replaces it
// with a second version (RemoveAll, then PutReadOnlyTree: a file the new
// version dropped is gone), and checks with a command that the files are
// read-only, the script executable and runnable by its absolute path.
func (s *suite) testTransferReadOnlyTree(t *testing.T) {
	p := s.client(t)
	sb, _ := s.create(t, p, newKey(t))
	ft := transfer(t, sb)
	v1, v2 := readOnlyTrees()
	put := func(tree fstest.MapFS) {
		t.Helper()
		if err := ft.RemoveAll(t.Context(), readOnlyDir); err != nil {
			t.Fatalf("RemoveAll(%q) = %v, want no error", readOnlyDir, err)
		}
		if err := sandbox.PutReadOnlyTree(t.Context(), ft, readOnlyDir, tree); err != nil {
			t.Fatalf("PutReadOnlyTree(%q) = %v, want no error", readOnlyDir, err)
		}
	}
	put(v1)
	if got, want := fileSizes(listFiles(t, ft, readOnlyDir)), treeListing(v1); got != want {
		t.Errorf("ListFiles(%q) after PutReadOnlyTree =\n%s\nwant\n%s", readOnlyDir, got, want)
	}
	put(v2)
	if got, want := fileSizes(listFiles(t, ft, readOnlyDir)), treeListing(v2); got != want {
		t.Errorf("ListFiles(%q) after replacing the tree =\n%s\nwant (old.txt gone)\n%s", readOnlyDir, got, want)
	}
	if got := getFile(t, ft, readOnlyDir+"/SKILL.md"); string(got) != string(v2["SKILL.md"].Data) {
		t.Errorf("GetFile(SKILL.md) after replacing the tree = %q, want version 2's %q", got, v2["SKILL.md"].Data)
	}

	if s.h.SessionDirHidden != nil {
		if why := s.h.SessionDirHidden(p); why != "" {
			testenv.Unavailable(t, "commands do not see %s here (%s); the tree's modes and script are not checked", sandbox.SessionDir, why)
		}
	}
	// find prints relative paths: some fakes map the session directory to
	// a host path that output read back from a file does not hide.
	check := fmt.Sprintf("cat %[1]s/SKILL.md && %[1]s/scripts/hello.sh && (cd %[1]s && echo writable: $(find . -type f -perm -200) && echo executable: $(find . -type f -perm -100))", readOnlyDir)
	want := string(v2["SKILL.md"].Data) + "hello from conformance-skill\nwritable:\nexecutable: ./scripts/hello.sh\n"
	if got := runAsAgent(t, sb, check); got != want {
		t.Errorf("%q printed\n%s\nwant (files read-only, the script executable)\n%s", check, got, want)
	}
}

// treeListing renders the regular files of tree placed at readOnlyDir as
// fileSizes does.
func treeListing(tree fstest.MapFS) string {
	var files []sandbox.FileInfo
	_ = fs.WalkDir(tree, ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, sandbox.FileInfo{Path: readOnlyDir + "/" + name, Size: int64(len(tree[name].Data))})
		}
		return err
	})
	return fileSizes(files)
}

// runAsAgent runs command as the bash tool does (in the persistent shell
// when the sandbox has one), requires exit code 0 and returns its stdout.
func runAsAgent(t *testing.T, sb sandbox.Sandbox, command string) string {
	t.Helper()
	sh, ok := sb.(sandbox.Shell)
	if !ok {
		return run(t, sb, command)
	}
	res, err := sh.ShellExec(t.Context(), sandbox.ExecRequest{Command: command})
	if err != nil {
		t.Fatalf("ShellExec(%q) = %v, want no error", command, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("ShellExec(%q) exit code = %d, want 0 (stdout %q, stderr %q)", command, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}
