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
