package tools_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/tools"
)

// TestSessionPaths checks that the file tools pass the absolute session
// paths (/mnt/session/...) and /workspace/... to the sandbox, which
// accepts them on every provider, and still refuse other absolute paths.
// It does not run in parallel: the cleanup of dockerSandboxes removes
// every container of the process, those of TestDocker included.
func TestSessionPaths(t *testing.T) {
	for _, tc := range []struct {
		name  string
		newSB func(t *testing.T) newSandbox
	}{
		{"local", localSandboxes},
		{"docker", dockerSandboxes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := tc.newSB(t)(t, "sesn_tools_session_paths")
			output := sandbox.OutputsDir + "/x.txt"
			steps := []struct {
				tool, input string
				wantErr     bool
				want        string
			}{
				{"write", `{"file_path":"` + output + `","content":"alpha\nbeta\n"}`, false, "Wrote 11 bytes to " + output},
				{"read", `{"file_path":"` + output + `"}`, false, "     1\talpha\n     2\tbeta\n"},
				{"edit", `{"file_path":"` + output + `","old_string":"beta","new_string":"gamma"}`, false, "Replaced 1 occurrence in " + output},
				{"read", `{"file_path":"` + output + `","view_range":[2,2]}`, false, "     2\tgamma\n"},
				{"write", `{"file_path":"/workspace/ws.txt","content":"in the workspace"}`, false, "Wrote 16 bytes to /workspace/ws.txt"},
				{"read", `{"file_path":"/workspace/ws.txt"}`, false, "     1\tin the workspace\n"},
				{"read", `{"file_path":"/mnt/elsewhere.txt"}`, true, ""},
				{"glob", `{"pattern":"*.txt","path":"/mnt/session/outputs"}`, false, ""},
				{"glob", `{"pattern":"/mnt/session/outputs/*.txt"}`, false, ""},
				{"grep", `{"pattern":"gamma","path":"/mnt/session/outputs"}`, false, ""},
				{"glob", `{"pattern":"*.txt","path":"/mnt/elsewhere"}`, true, ""},
			}
			for _, st := range steps {
				res, err := tools.Execute(t.Context(), sb, st.tool, json.RawMessage(st.input))
				if err != nil {
					t.Fatalf("Execute(%s, %s) returned error %v, want a Result", st.tool, st.input, err)
				}
				if res.IsError != st.wantErr {
					t.Errorf("Execute(%s, %s): IsError = %v, want %v; content:\n%s", st.tool, st.input, res.IsError, st.wantErr, res.Content)
				}
				if st.want != "" && res.Content != st.want {
					t.Errorf("Execute(%s, %s) = %q, want %q", st.tool, st.input, res.Content, st.want)
				}
				// Searches of the session paths find the output.
				if (st.tool == "glob" || st.tool == "grep") && !st.wantErr && !strings.Contains(res.Content, "x.txt") {
					t.Errorf("Execute(%s, %s) = %q, want it to name x.txt", st.tool, st.input, res.Content)
				}
			}
			got, err := sb.ReadFile(t.Context(), output)
			if err != nil || string(got) != "alpha\ngamma\n" {
				t.Errorf("ReadFile(%q) after the tools = %q, %v; want %q", output, got, err, "alpha\ngamma\n")
			}
		})
	}
}

// TestReadOnlyRoots checks that write and edit refuse paths in a
// read-only root (a read_only memory store's mount), by absolute or
// relative path, and leave the file unchanged; read works, and paths
// beside the root are writable.
func TestReadOnlyRoots(t *testing.T) {
	t.Parallel()
	sb := localSandboxes(t)(t, "sesn_tools_read_only")
	root := sandbox.MemoryDir + "/ro"
	if err := sb.WriteFile(t.Context(), root+"/notes.md", []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := tools.WithReadOnlyRoots(t.Context(), []string{root + "/"})
	for _, st := range []struct {
		tool, input string
		wantErr     bool
	}{
		{"write", `{"file_path":"` + root + `/notes.md","content":"changed"}`, true},
		{"write", `{"file_path":"` + root + `/sub/../new.md","content":"new"}`, true},
		{"edit", `{"file_path":"` + root + `/notes.md","old_string":"kept","new_string":"changed"}`, true},
		{"write", `{"file_path":"` + root + `","content":"x"}`, true},
		{"read", `{"file_path":"` + root + `/notes.md"}`, false},
		{"write", `{"file_path":"` + root + `-rw/notes.md","content":"beside"}`, false},
		{"write", `{"file_path":"rel.md","content":"in the workspace"}`, false},
	} {
		res, err := tools.Execute(ctx, sb, st.tool, json.RawMessage(st.input))
		if err != nil {
			t.Fatalf("Execute(%s, %s) = %v, want a Result", st.tool, st.input, err)
		}
		if res.IsError != st.wantErr {
			t.Errorf("Execute(%s, %s): IsError = %v, want %v; content %q", st.tool, st.input, res.IsError, st.wantErr, res.Content)
		}
		if st.wantErr && !strings.Contains(res.Content, "read_only") {
			t.Errorf("Execute(%s, %s) = %q, want it to say the store is read_only", st.tool, st.input, res.Content)
		}
	}
	if got, err := sb.ReadFile(t.Context(), root+"/notes.md"); err != nil || string(got) != "kept\n" {
		t.Errorf("the read-only file holds %q, %v; want %q", got, err, "kept\n")
	}
	// A relative path resolved into a read-only root is refused too.
	ctx = tools.WithReadOnlyRoots(t.Context(), []string{sb.Root() + "/memory/ro"})
	res, err := tools.Execute(ctx, sb, "write", json.RawMessage(`{"file_path":"memory/ro/a.md","content":"x"}`))
	if err != nil || !res.IsError {
		t.Errorf("write of a relative path in a read-only root = %+v, %v; want an IsError result", res, err)
	}
}
