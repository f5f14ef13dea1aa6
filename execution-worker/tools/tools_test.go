package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker/dockertest"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/tools"
)

// TestMain removes every container this test process created, whatever
// the outcome.
func TestMain(m *testing.M) {
	code := m.Run()
	if cli, err := client.New(client.FromEnv); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := dockertest.Cleanup(ctx, cli); err != nil {
			fmt.Fprintln(os.Stderr, "cleanup of test containers:", err)
			if code == 0 {
				code = 1
			}
		}
		cancel()
		_ = cli.Close()
	}
	os.Exit(code)
}

// newSandbox creates a fresh sandbox for the session key.
type newSandbox func(t *testing.T, key string) sandbox.Sandbox

func localSandboxes(t *testing.T) newSandbox {
	t.Helper()
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), Installation: "tools-test"})
	if err != nil {
		t.Fatalf("sandboxlocal.New: %v", err)
	}
	return func(t *testing.T, key string) sandbox.Sandbox {
		t.Helper()
		sb, _, err := p.Create(t.Context(), key, sandbox.Spec{})
		if err != nil {
			t.Fatalf("Create(%q): %v", key, err)
		}
		return sb
	}
}

var (
	imageOnce sync.Once
	imageErr  error
)

// dockerSandboxes skips t without a Docker daemon (fails it with
// MANGO_REQUIRE_SERVICES=1).
func dockerSandboxes(t *testing.T) newSandbox {
	t.Helper()
	cli := dockertest.Client(t)
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		imageErr = dockertest.EnsureImage(ctx, cli, dockertest.Image, false)
	})
	if imageErr != nil {
		t.Fatalf("build sandbox image: %v", imageErr)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dockertest.Cleanup(ctx, cli); err != nil {
			t.Errorf("cleanup of test containers: %v", err)
		}
	})
	p, err := sandboxdocker.New(t.Context(), sandboxdocker.Config{Labels: dockertest.Labels(), Installation: "tools-test"})
	if err != nil {
		t.Fatalf("sandboxdocker.New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return func(t *testing.T, key string) sandbox.Sandbox {
		t.Helper()
		key = fmt.Sprintf("%s_%d", key, time.Now().UnixNano())
		sb, _, err := p.Create(t.Context(), key, sandbox.Spec{})
		if err != nil {
			t.Fatalf("Create(%q): %v", key, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = sb.Destroy(ctx)
		})
		return sb
	}
}

func TestLocal(t *testing.T) {
	t.Parallel()
	runSuite(t, localSandboxes(t))
}

// oneOff hides a sandbox's persistent shell: the bash tool then emulates
// one, as on the remote providers.
type oneOff struct{ sandbox.Sandbox }

func TestEmulatedShell(t *testing.T) {
	t.Parallel()
	newSB := localSandboxes(t)
	sb := oneOff{newSB(t, "sesn_tools_emulated")}
	t.Cleanup(func() { _ = os.Remove("/tmp/.mango-bash-state") }) // the host's /tmp, under the local provider
	root := sb.Root()
	if res := bash(t, sb, `{"command":"mkdir -p repo && cd repo && export GREETING=hello && UNEXPORTED=1"}`); res.IsError {
		t.Fatalf("cd and export: %s", res.Content)
	}
	if res := bash(t, sb, `{"command":"pwd; echo \"$GREETING [$UNEXPORTED]\""}`); res.Content != root+"/repo\nhello []\n" {
		t.Fatalf("second call: %q; want the directory and the exported variable of the first", res.Content)
	}
	if res := bash(t, sb, `{"command":"cd /; exit 4"}`); res.Content != "[exit code 4]" {
		t.Fatalf("exit: %q", res.Content)
	}
	if res := bash(t, sb, `{"command":"pwd"}`); res.Content != "/\n" {
		t.Fatalf("after exit: %q; want the directory the exiting call left", res.Content)
	}
	if res := bash(t, sb, `{"restart":true,"command":"pwd; echo \"[$GREETING]\""}`); res.Content != root+"\n[]\n" {
		t.Fatalf("restart: %q; want the workspace root and no variable", res.Content)
	}
}

func TestDocker(t *testing.T) {
	t.Parallel()
	runSuite(t, dockerSandboxes(t))
}

// toolCase is one tool call against a prepared case directory. In input,
// want, contains and files, {d} stands for the case directory (relative to
// the workspace root) and {root} for the workspace root.
type toolCase struct {
	name    string
	files   map[string]string // relative to {d}
	tool    string
	input   string
	wantErr bool     // Result.IsError
	want    *string  // the exact content, when set
	has     []string // substrings of the content
	hasNot  []string // strings the content must not contain
	// check runs after the call, for effects on the workspace.
	check func(t *testing.T, sb sandbox.Sandbox, d string)
	// own runs the case in a sandbox of its own: it ends the shell the
	// other cases share.
	own bool
}

func exactly(s string) *string { return &s }

func runSuite(t *testing.T, newSB newSandbox) {
	shared := newSB(t, "sesn_tools_test")
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sb := shared
			if tc.own {
				sb = newSB(t, "sesn_tools_test_"+tc.name)
			}
			d := "cases/" + tc.name
			expand := strings.NewReplacer("{d}", d, "{root}", sb.Root()).Replace
			for name, content := range tc.files {
				if err := sb.WriteFile(t.Context(), d+"/"+name, []byte(content), 0); err != nil {
					t.Fatalf("WriteFile(%s): %v", name, err)
				}
			}
			res, err := tools.Execute(t.Context(), sb, tc.tool, json.RawMessage(expand(tc.input)))
			if err != nil {
				t.Fatalf("Execute(%s, %s) returned error %v, want a Result", tc.tool, expand(tc.input), err)
			}
			if res.IsError != tc.wantErr {
				t.Errorf("IsError = %v, want %v; content:\n%s", res.IsError, tc.wantErr, res.Content)
			}
			if tc.want != nil && res.Content != expand(*tc.want) {
				t.Errorf("content:\n%q\nwant:\n%q", res.Content, expand(*tc.want))
			}
			for _, s := range tc.has {
				if !strings.Contains(res.Content, expand(s)) {
					t.Errorf("content does not contain %q:\n%s", expand(s), res.Content)
				}
			}
			for _, s := range tc.hasNot {
				if strings.Contains(res.Content, expand(s)) {
					t.Errorf("content contains %q:\n%s", expand(s), res.Content)
				}
			}
			if tc.check != nil {
				tc.check(t, sb, d)
			}
		})
	}
	t.Run("PersistentShell", func(t *testing.T) {
		t.Parallel()
		testPersistentShell(t, newSB(t, "sesn_tools_shell"))
	})
	t.Run("SessionPaths", func(t *testing.T) {
		t.Parallel()
		testSessionPaths(t, newSB(t, "sesn_tools_session_paths"))
	})
	t.Run("TurnEnding", func(t *testing.T) {
		t.Parallel()
		testTurnEnding(t, newSB(t, "sesn_tools_turn_ending"), newSB)
	})
}

// fileIs checks the content of a workspace file.
func fileIs(name, want string) func(t *testing.T, sb sandbox.Sandbox, d string) {
	return func(t *testing.T, sb sandbox.Sandbox, d string) {
		t.Helper()
		got, err := sb.ReadFile(t.Context(), d+"/"+name)
		if err != nil {
			t.Fatalf("ReadFile(%s): %v", name, err)
		}
		if string(got) != want {
			t.Errorf("%s holds %q, want %q", name, got, want)
		}
	}
}

func numbered(from, to int) string {
	var b strings.Builder
	for n := from; n <= to; n++ {
		fmt.Fprintf(&b, "%6d\tline %d\n", n, n)
	}
	return b.String()
}

func lines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// cases are the tool cases runSuite runs against every sandbox, tool by
// tool.
func cases() []toolCase {
	var cs []toolCase
	for _, part := range [][]toolCase{bashCases(), readCases(), writeAndEditCases(), globCases(), grepAndDispatchCases()} {
		cs = append(cs, part...)
	}
	return cs
}

func bashCases() []toolCase {
	return []toolCase{
		{name: "bash_stdout", tool: "bash", input: `{"command":"echo hello"}`, want: exactly("hello\n")},
		{name: "bash_stderr_only", tool: "bash", input: `{"command":"echo oops >&2"}`, want: exactly("oops\n")},
		{name: "bash_both_streams", tool: "bash", input: `{"command":"echo out; echo err >&2"}`, want: exactly("out\n[stderr]\nerr\n")},
		{name: "bash_exit_code", tool: "bash", input: `{"command":"echo partial; (exit 3)"}`, wantErr: true, want: exactly("partial\n[exit code 3]")},
		{name: "bash_exit_ends_shell", tool: "bash", own: true, input: `{"command":"echo partial; exit 3"}`, wantErr: true,
			want: exactly("partial\n[exit code 3]\n[the shell exited with status 3; the next command runs in a new shell in the same working directory]")},
		{name: "bash_exit_code_no_output", tool: "bash", input: `{"command":"false"}`, wantErr: true, want: exactly("[exit code 1]")},
		{name: "bash_no_output", tool: "bash", input: `{"command":"true"}`, want: exactly("(no output)")},
		{name: "bash_timeout", tool: "bash", own: true, input: `{"command":"echo started; sleep 5; echo never","timeout_ms":500}`, wantErr: true,
			has: []string{"timed out after 500ms"}, hasNot: []string{"never"}},
		{name: "bash_long_timeout_capped", tool: "bash", input: `{"command":"echo ok","timeout_ms":99999999999}`, want: exactly("ok\n")},
		{name: "bash_runs_in_root", tool: "bash", input: `{"command":"pwd"}`, want: exactly("{root}\n")},
		{name: "bash_sees_files", tool: "bash", files: map[string]string{"f.txt": "from a file\n"}, input: `{"command":"cat {d}/f.txt"}`, want: exactly("from a file\n")},
		{name: "bash_creates_files", tool: "bash", input: `{"command":"mkdir -p {d} && echo made > {d}/out.txt"}`, want: exactly("(no output)"),
			check: fileIs("out.txt", "made\n")},
		{name: "bash_long_output_clipped", tool: "bash", input: `{"command":"yes abcdefgh | head -c 100000; echo; echo END"}`,
			has: []string{"bytes omitted", "abcdefgh", "END"}},
		{name: "bash_nul_output", tool: "bash", input: `{"command":"printf 'a\\000b'"}`, want: exactly("a\uFFFDb")},
		{name: "bash_restart", tool: "bash", own: true, input: `{"restart":true}`, has: []string{"Shell restarted"}},
		{name: "bash_missing_command", tool: "bash", input: `{}`, wantErr: true, want: exactly("invalid input for bash: missing required field command")},
		{name: "bash_empty_command", tool: "bash", input: `{"command":"  "}`, wantErr: true, has: []string{"command must not be empty"}},
		{name: "bash_bad_timeout_type", tool: "bash", input: `{"command":"true","timeout_ms":"5"}`, wantErr: true, has: []string{"timeout_ms must be an integer, got string"}},
		{name: "bash_negative_timeout", tool: "bash", input: `{"command":"true","timeout_ms":-1}`, wantErr: true, has: []string{"timeout_ms must be a positive"}},
		{name: "bash_unknown_field", tool: "bash", input: `{"command":"true","cwd":"/"}`, wantErr: true, has: []string{`unknown field "cwd"`}},
	}
}

func readCases() []toolCase {
	return []toolCase{
		{name: "read_whole", tool: "read", files: map[string]string{"a.txt": "alpha\nbeta\ngamma\n"}, input: `{"file_path":"{d}/a.txt"}`,
			want: exactly("     1\talpha\n     2\tbeta\n     3\tgamma\n")},
		{name: "read_no_final_newline", tool: "read", files: map[string]string{"a.txt": "alpha\nbeta"}, input: `{"file_path":"{d}/a.txt"}`,
			want: exactly("     1\talpha\n     2\tbeta\n")},
		{name: "read_view_range", tool: "read", files: map[string]string{"a.txt": lines(10)}, input: `{"file_path":"{d}/a.txt","view_range":[3,5]}`,
			want: exactly(numbered(3, 5))},
		{name: "read_view_range_to_eof", tool: "read", files: map[string]string{"a.txt": lines(10)}, input: `{"file_path":"{d}/a.txt","view_range":[8,-1]}`,
			want: exactly(numbered(8, 10))},
		{name: "read_view_range_end_past_eof", tool: "read", files: map[string]string{"a.txt": lines(10)}, input: `{"file_path":"{d}/a.txt","view_range":[9,50]}`,
			want: exactly(numbered(9, 10))},
		{name: "read_view_range_start_past_eof", tool: "read", files: map[string]string{"a.txt": lines(10)}, input: `{"file_path":"{d}/a.txt","view_range":[11,12]}`,
			wantErr: true, has: []string{"view_range starts at line 11", "has 10 lines"}},
		{name: "read_view_range_shape", tool: "read", files: map[string]string{"a.txt": "x\n"}, input: `{"file_path":"{d}/a.txt","view_range":[1]}`,
			wantErr: true, has: []string{"view_range must be [start, end]"}},
		{name: "read_view_range_zero", tool: "read", files: map[string]string{"a.txt": "x\n"}, input: `{"file_path":"{d}/a.txt","view_range":[0,1]}`,
			wantErr: true, has: []string{"view_range start must be at least 1"}},
		{name: "read_absolute", tool: "read", files: map[string]string{"a.txt": "abs\n"}, input: `{"file_path":"{root}/{d}/a.txt"}`, want: exactly("     1\tabs\n")},
		{name: "read_capped", tool: "read", files: map[string]string{"a.txt": lines(2500)}, input: `{"file_path":"{d}/a.txt"}`,
			has: []string{"  2000\tline 2000\n", "[showing lines 1-2000 of 2500; use view_range"}, hasNot: []string{"line 2001"}},
		{name: "read_long_line", tool: "read", files: map[string]string{"a.txt": strings.Repeat("x", 5000) + "\n"}, input: `{"file_path":"{d}/a.txt"}`,
			has: []string{"[line truncated]"}, hasNot: []string{strings.Repeat("x", 4097)}},
		{name: "read_empty", tool: "read", files: map[string]string{"a.txt": ""}, input: `{"file_path":"{d}/a.txt"}`, want: exactly("({d}/a.txt is empty)")},
		{name: "read_missing", tool: "read", input: `{"file_path":"{d}/nope.txt"}`, wantErr: true, want: exactly("file not found: {d}/nope.txt")},
		{name: "read_binary", tool: "read", files: map[string]string{"b.bin": "ab\x00cd"}, input: `{"file_path":"{d}/b.bin"}`, wantErr: true,
			has: []string{"binary file (5 bytes)"}},
		{name: "read_escape_relative", tool: "read", input: `{"file_path":"../../outside.txt"}`, wantErr: true, has: []string{"path escapes the workspace: ../../outside.txt"}},
		{name: "read_escape_absolute", tool: "read", input: `{"file_path":"/etc/passwd"}`, wantErr: true, has: []string{"path escapes the workspace: /etc/passwd"}},
		{name: "read_directory", tool: "read", files: map[string]string{"sub/a.txt": "x"}, input: `{"file_path":"{d}/sub"}`, wantErr: true,
			has: []string{"{d}/sub"}, hasNot: []string{"{root}"}},
		{name: "read_missing_path", tool: "read", input: `{"view_range":[1,2]}`, wantErr: true, want: exactly("invalid input for read: missing required field file_path")},
		{name: "read_unknown_field", tool: "read", input: `{"file_path":"a.txt","offset":3}`, wantErr: true, want: exactly(`invalid input for read: unknown field "offset"`)},
		{name: "read_wrong_type", tool: "read", input: `{"file_path":7}`, wantErr: true, has: []string{"file_path must be a string, got number"}},
	}
}

func writeAndEditCases() []toolCase {
	return []toolCase{
		// write
		{name: "write_new", tool: "write", input: `{"file_path":"{d}/new/sub/f.txt","content":"hi\n"}`, want: exactly("Wrote 3 bytes to {d}/new/sub/f.txt"),
			check: fileIs("new/sub/f.txt", "hi\n")},
		{name: "write_overwrite", tool: "write", files: map[string]string{"f.txt": "old content\n"}, input: `{"file_path":"{d}/f.txt","content":"new"}`,
			want: exactly("Wrote 3 bytes to {d}/f.txt"), check: fileIs("f.txt", "new")},
		{name: "write_empty_content", tool: "write", input: `{"file_path":"{d}/empty.txt","content":""}`, want: exactly("Wrote 0 bytes to {d}/empty.txt"),
			check: fileIs("empty.txt", "")},
		{name: "write_then_read", tool: "write", input: `{"file_path":"{d}/wr.txt","content":"one\ntwo\n"}`, want: exactly("Wrote 8 bytes to {d}/wr.txt"),
			check: func(t *testing.T, sb sandbox.Sandbox, d string) {
				res, err := tools.Execute(t.Context(), sb, "read", json.RawMessage(`{"file_path":"`+d+`/wr.txt"}`))
				if err != nil || res.IsError || res.Content != "     1\tone\n     2\ttwo\n" {
					t.Errorf("read after write = %+v, %v; want the two numbered lines", res, err)
				}
			}},
		{name: "write_missing_content", tool: "write", input: `{"file_path":"{d}/f.txt"}`, wantErr: true, want: exactly("invalid input for write: missing required field content")},
		{name: "write_escape", tool: "write", input: `{"file_path":"../escaped.txt","content":"x"}`, wantErr: true, has: []string{"path escapes the workspace"}},

		// edit
		{name: "edit_unique", tool: "edit", files: map[string]string{"f.txt": "alpha beta gamma\n"}, input: `{"file_path":"{d}/f.txt","old_string":"beta","new_string":"BETA"}`,
			want: exactly("Replaced 1 occurrence in {d}/f.txt"), check: fileIs("f.txt", "alpha BETA gamma\n")},
		{name: "edit_not_found", tool: "edit", files: map[string]string{"f.txt": "alpha\n"}, input: `{"file_path":"{d}/f.txt","old_string":"delta","new_string":"x"}`,
			wantErr: true, has: []string{"old_string not found in {d}/f.txt"}, check: fileIs("f.txt", "alpha\n")},
		{name: "edit_multiple", tool: "edit", files: map[string]string{"f.txt": "x-x-x"}, input: `{"file_path":"{d}/f.txt","old_string":"x","new_string":"y"}`,
			wantErr: true, has: []string{"old_string occurs 3 times", "replace_all"}, check: fileIs("f.txt", "x-x-x")},
		{name: "edit_replace_all", tool: "edit", files: map[string]string{"f.txt": "x-x-x"}, input: `{"file_path":"{d}/f.txt","old_string":"x","new_string":"yy","replace_all":true}`,
			want: exactly("Replaced 3 occurrences in {d}/f.txt"), check: fileIs("f.txt", "yy-yy-yy")},
		{name: "edit_multiline", tool: "edit", files: map[string]string{"f.txt": "func a() {\n\treturn 1\n}\n"}, input: `{"file_path":"{d}/f.txt","old_string":"\treturn 1\n}","new_string":"\treturn 2\n}"}`,
			want: exactly("Replaced 1 occurrence in {d}/f.txt"), check: fileIs("f.txt", "func a() {\n\treturn 2\n}\n")},
		{name: "edit_identical", tool: "edit", files: map[string]string{"f.txt": "same\n"}, input: `{"file_path":"{d}/f.txt","old_string":"same","new_string":"same"}`,
			wantErr: true, has: []string{"identical"}},
		{name: "edit_empty_old", tool: "edit", files: map[string]string{"f.txt": "x\n"}, input: `{"file_path":"{d}/f.txt","old_string":"","new_string":"y"}`,
			wantErr: true, has: []string{"old_string must not be empty"}},
		{name: "edit_missing_new", tool: "edit", input: `{"file_path":"{d}/f.txt","old_string":"a"}`, wantErr: true, has: []string{"missing required field new_string"}},
		{name: "edit_missing_file", tool: "edit", input: `{"file_path":"{d}/nope.txt","old_string":"a","new_string":"b"}`, wantErr: true, want: exactly("file not found: {d}/nope.txt")},
		{name: "edit_escape", tool: "edit", input: `{"file_path":"/etc/hosts","old_string":"a","new_string":"b"}`, wantErr: true, has: []string{"path escapes the workspace: /etc/hosts"}},
	}
}

func globCases() []toolCase {
	goTree := map[string]string{
		"a.go": "package a\n", "sub/b.go": "package b\n", "sub/deep/c.go": "package c\n",
		"sub/x.txt": "x\n", ".hidden/h.go": "package h\n",
	}
	return []toolCase{
		{name: "glob_doublestar", tool: "glob", files: goTree, input: `{"pattern":"**/*.go","path":"{d}"}`,
			want: exactly("{d}/.hidden/h.go\n{d}/a.go\n{d}/sub/b.go\n{d}/sub/deep/c.go\n")},
		{name: "glob_single_level", tool: "glob", files: goTree, input: `{"pattern":"*.go","path":"{d}"}`, want: exactly("{d}/a.go\n")},
		{name: "glob_relative_pattern", tool: "glob", files: goTree, input: `{"pattern":"{d}/sub/*"}`, want: exactly("{d}/sub/b.go\n{d}/sub/x.txt\n")},
		{name: "glob_absolute_pattern", tool: "glob", files: goTree, input: `{"pattern":"{root}/{d}/sub/**/*.go"}`, want: exactly("{d}/sub/b.go\n{d}/sub/deep/c.go\n")},
		{name: "glob_middle_doublestar", tool: "glob", files: goTree, input: `{"pattern":"{d}/**/deep/*.go"}`, want: exactly("{d}/sub/deep/c.go\n")},
		{name: "glob_class", tool: "glob", files: goTree, input: `{"pattern":"**/[ab].go","path":"{d}"}`, want: exactly("{d}/a.go\n{d}/sub/b.go\n")},
		{name: "glob_absolute_path", tool: "glob", files: goTree, input: `{"pattern":"*.txt","path":"{root}/{d}/sub"}`, want: exactly("{d}/sub/x.txt\n")},
		{name: "glob_literal", tool: "glob", files: goTree, input: `{"pattern":"sub/b.go","path":"{d}"}`, want: exactly("{d}/sub/b.go\n")},
		{name: "glob_no_match", tool: "glob", files: goTree, input: `{"pattern":"**/*.rs","path":"{d}"}`, want: exactly("No files matched")},
		{name: "glob_missing_prefix", tool: "glob", files: goTree, input: `{"pattern":"nothing/here/*.go","path":"{d}"}`, want: exactly("No files matched")},
		{name: "glob_missing_dir", tool: "glob", input: `{"pattern":"*.go","path":"{d}/nope"}`, wantErr: true, want: exactly("no such directory: {d}/nope")},
		{name: "glob_escape_path", tool: "glob", input: `{"pattern":"*","path":".."}`, wantErr: true, has: []string{"path escapes the workspace: .."}},
		{name: "glob_escape_pattern", tool: "glob", input: `{"pattern":"../**/*"}`, wantErr: true, has: []string{"path escapes the workspace: ../**/*"}},
		{name: "glob_bad_pattern", tool: "glob", input: `{"pattern":"[a.go"}`, wantErr: true, has: []string{"malformed segment"}},
		{name: "glob_missing_pattern", tool: "glob", input: `{"path":"."}`, wantErr: true, want: exactly("invalid input for glob: missing required field pattern")},
		{name: "glob_quoting", tool: "glob", files: map[string]string{"it's dir/$x `y`.go": "x"}, input: `{"pattern":"**/*.go","path":"{d}"}`,
			want: exactly("{d}/it's dir/$x `y`.go\n")},
	}
}

func grepAndDispatchCases() []toolCase {
	return []toolCase{
		// grep
		{name: "grep_match", tool: "grep", files: map[string]string{"a.txt": "one\nneedle here\n", "sub/b.txt": "needle\nnope\n", "c.txt": "nothing\n"},
			input: `{"pattern":"ne+dle","path":"{d}"}`, has: []string{"{d}/a.txt:2:needle here\n", "{d}/sub/b.txt:1:needle\n"}, hasNot: []string{"nope", "nothing", "{root}"}},
		{name: "grep_extended", tool: "grep", files: map[string]string{"a.txt": "foo\nbar\nbaz\n"}, input: `{"pattern":"^(foo|baz)$","path":"{d}"}`,
			want: exactly("{d}/a.txt:1:foo\n{d}/a.txt:3:baz\n")},
		{name: "grep_single_file", tool: "grep", files: map[string]string{"a.txt": "x\ny\n"}, input: `{"pattern":"y","path":"{root}/{d}/a.txt"}`, want: exactly("{d}/a.txt:2:y\n")},
		{name: "grep_quoting", tool: "grep", files: map[string]string{"a.txt": "it's here\n"}, input: `{"pattern":"it's","path":"{d}"}`, want: exactly("{d}/a.txt:1:it's here\n")},
		{name: "grep_dash_pattern", tool: "grep", files: map[string]string{"a.txt": "a -v b\n"}, input: `{"pattern":"-v","path":"{d}"}`, want: exactly("{d}/a.txt:1:a -v b\n")},
		{name: "grep_shell_chars", tool: "grep", files: map[string]string{"a.txt": "cost $HOME; `x`\n"}, input: `{"pattern":"\\$HOME; ` + "`x`" + `","path":"{d}"}`,
			want: exactly("{d}/a.txt:1:cost $HOME; `x`\n")},
		{name: "grep_no_match", tool: "grep", files: map[string]string{"a.txt": "x\n"}, input: `{"pattern":"zzz","path":"{d}"}`, want: exactly("No matches")},
		{name: "grep_bad_regex", tool: "grep", files: map[string]string{"a.txt": "x\n"}, input: `{"pattern":"(","path":"{d}"}`, wantErr: true, has: []string{"grep failed"}},
		{name: "grep_missing_path", tool: "grep", input: `{"pattern":"x","path":"{d}/nope"}`, wantErr: true, has: []string{"grep failed", "{d}/nope"}, hasNot: []string{"{root}"}},
		{name: "grep_escape", tool: "grep", input: `{"pattern":"root","path":"/etc"}`, wantErr: true, has: []string{"path escapes the workspace: /etc"}},
		{name: "grep_binary", tool: "grep", files: map[string]string{"b.bin": "x\x00needle\n"}, input: `{"pattern":"needle","path":"{d}"}`,
			has: []string{"{d}/b.bin"}, hasNot: []string{"\x00", "{root}"}},
		{name: "grep_capped", tool: "grep", files: map[string]string{"a.txt": lines(1500)}, input: `{"pattern":"line","path":"{d}"}`,
			has: []string{"{d}/a.txt:1000:line 1000\n", "[showing 1000 of 1500 matching lines"}, hasNot: []string{"line 1001"}},

		// dispatch and decoding
		{name: "unknown_tool", tool: "rm", input: `{}`, wantErr: true, want: exactly(`unknown tool "rm"`)},
		{name: "server_tool", tool: "web_search", input: `{"query":"x"}`, wantErr: true, has: []string{"server tool"}},
		{name: "malformed_json", tool: "read", input: `{"file_path":`, wantErr: true, has: []string{"invalid input for read: malformed JSON"}},
		{name: "not_an_object", tool: "read", input: `["a.txt"]`, wantErr: true, has: []string{"input must be a JSON object"}},
		{name: "trailing_data", tool: "read", input: `{"file_path":"a"} {}`, wantErr: true, has: []string{"unexpected data after the input object"}},
		{name: "empty_input", tool: "glob", input: ``, wantErr: true, has: []string{"missing required field pattern"}},
	}
}

// testTurnEnding checks the failures that end the turn instead of the
// tool: cancellation and a destroyed sandbox.
func testTurnEnding(t *testing.T, sb sandbox.Sandbox, newSB newSandbox) {
	t.Run("CancelledBefore", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := tools.Execute(ctx, sb, "bash", json.RawMessage(`{"command":"echo hi"}`))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Execute with a cancelled context: error %v, want context.Canceled", err)
		}
	})
	t.Run("CancelledDuring", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := tools.Execute(ctx, sb, "bash", json.RawMessage(`{"command":"sleep 30"}`))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Execute cancelled while running: error %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("Execute returned %v after cancellation, want promptly", d)
		}
	})
	t.Run("Destroyed", func(t *testing.T) {
		gone := newSB(t, "sesn_tools_destroyed")
		if err := gone.Destroy(t.Context()); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
		for _, call := range []struct{ tool, input string }{
			{"bash", `{"command":"true"}`},
			{"read", `{"file_path":"a.txt"}`},
			{"write", `{"file_path":"a.txt","content":"x"}`},
			{"grep", `{"pattern":"x"}`},
		} {
			_, err := tools.Execute(t.Context(), gone, call.tool, json.RawMessage(call.input))
			if !errors.Is(err, sandbox.ErrDestroyed) {
				t.Errorf("%s on a destroyed sandbox: error %v, want sandbox.ErrDestroyed", call.tool, err)
			}
		}
	})
	t.Run("NilSandbox", func(t *testing.T) {
		if _, err := tools.Execute(t.Context(), nil, "bash", json.RawMessage(`{"command":"true"}`)); err == nil {
			t.Error("Execute with a nil sandbox: no error, want one")
		}
	})
}

func TestDefinitions(t *testing.T) {
	t.Parallel()
	all := []string{"bash", "read", "write", "edit", "glob", "grep", "web_fetch", "web_search"}
	defs := tools.Definitions(all)
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
		if d.Description == "" {
			t.Errorf("%s: empty description", d.Name)
		}
		var schema struct {
			Type                 string                     `json:"type"`
			Properties           map[string]json.RawMessage `json:"properties"`
			Required             []string                   `json:"required"`
			AdditionalProperties *bool                      `json:"additionalProperties"`
		}
		if err := json.Unmarshal(d.InputSchema, &schema); err != nil {
			t.Fatalf("%s: input schema is not JSON: %v", d.Name, err)
		}
		if schema.Type != "object" || schema.AdditionalProperties == nil || *schema.AdditionalProperties {
			t.Errorf("%s: schema type %q additionalProperties %v, want a closed object", d.Name, schema.Type, schema.AdditionalProperties)
		}
		for _, r := range schema.Required {
			if _, ok := schema.Properties[r]; !ok {
				t.Errorf("%s: required %q is not a property", d.Name, r)
			}
		}
		// Every declared property is accepted by Execute's strict decoding,
		// and every required one is enforced by it.
		for p := range schema.Properties {
			res, err := tools.Execute(t.Context(), noSandbox{}, d.Name, json.RawMessage(fmt.Sprintf(`{%q:null}`, p)))
			if err != nil || strings.Contains(res.Content, "unknown field") {
				t.Errorf("%s: declared property %q rejected: %+v, %v", d.Name, p, res, err)
			}
		}
		// Leaving out any one required field (all are strings) is reported
		// with that field's name.
		for _, r := range schema.Required {
			in := map[string]string{}
			for _, other := range schema.Required {
				if other != r {
					in[other] = "x"
				}
			}
			raw, _ := json.Marshal(in)
			res, err := tools.Execute(t.Context(), noSandbox{}, d.Name, raw)
			if want := "missing required field " + r; err != nil || !res.IsError || !strings.HasSuffix(res.Content, want) {
				t.Errorf("%s %s: %+v, %v; want an error ending in %q", d.Name, raw, res, err, want)
			}
		}
	}
	if got, want := strings.Join(names, ","), "bash,read,write,edit,glob,grep"; got != want {
		t.Errorf("Definitions(all) names = %s, want %s", got, want)
	}
	if got := tools.Definitions([]string{"grep", "read", "read", "nope"}); len(got) != 2 || got[0].Name != "read" || got[1].Name != "grep" {
		t.Errorf("Definitions(grep, read, read, nope) = %v, want read and grep", got)
	}
	if got := tools.Definitions(nil); len(got) != 0 {
		t.Errorf("Definitions(nil) = %v, want none", got)
	}
	b, err := json.Marshal(tools.Definitions([]string{"glob"})[0])
	if err != nil || !strings.HasPrefix(string(b), `{"name":"glob","description":`) || !strings.Contains(string(b), `"input_schema":{`) {
		t.Errorf("marshalled glob definition = %s, %v", b, err)
	}
}

func TestServerTools(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(tools.ServerTools([]string{"bash", "web_search", "web_fetch"}))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type":"web_fetch_20250910","name":"web_fetch"},{"type":"web_search_20250305","name":"web_search"}]`
	if string(b) != want {
		t.Errorf("ServerTools marshalled to %s, want %s", b, want)
	}
	if got := tools.ServerTools([]string{"bash", "read"}); len(got) != 0 {
		t.Errorf("ServerTools(bash, read) = %v, want none", got)
	}
}

// noSandbox fails every operation; it serves tests that never reach the
// sandbox, and panics never escape Execute either way.
type noSandbox struct{}

func (noSandbox) Ref() sandbox.Ref { return sandbox.Ref{} }
func (noSandbox) Root() string     { return "/workspace" }
func (noSandbox) Exec(context.Context, sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	return nil, errors.New("no sandbox")
}
func (noSandbox) ReadFile(context.Context, string) ([]byte, error) {
	return nil, errors.New("no sandbox")
}
func (noSandbox) WriteFile(context.Context, string, []byte, os.FileMode) error {
	return errors.New("no sandbox")
}
func (noSandbox) Destroy(context.Context) error { return nil }

// panicSandbox panics in Exec.
type panicSandbox struct{ noSandbox }

func (panicSandbox) Exec(context.Context, sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	panic("boom")
}

// nilResultSandbox returns neither a result nor an error.
type nilResultSandbox struct{ noSandbox }

func (nilResultSandbox) Exec(context.Context, sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	return nil, nil
}

// TestNeverPanics is not parallel: it silences the default logger, which
// records the recovered panics.
func TestNeverPanics(t *testing.T) {
	logger, w, flags := slog.Default(), log.Writer(), log.Flags()
	defer func() {
		slog.SetDefault(logger)
		log.SetOutput(w)
		log.SetFlags(flags)
	}()
	slog.SetDefault(slog.New(slog.DiscardHandler))
	for _, sb := range []sandbox.Sandbox{panicSandbox{}, nilResultSandbox{}} {
		for _, tool := range []string{"bash", "glob", "grep"} {
			res, err := tools.Execute(t.Context(), sb, tool, json.RawMessage(inputFor(tool)))
			if err != nil || !res.IsError || !strings.Contains(res.Content, "internal error") {
				t.Errorf("%s with %T: %+v, %v; want an internal-error result", tool, sb, res, err)
			}
		}
	}
}

func inputFor(tool string) string {
	if tool == "bash" {
		return `{"command":"x"}`
	}
	return `{"pattern":"x"}`
}

func TestSandboxErrorIsToolError(t *testing.T) {
	t.Parallel()
	res, err := tools.Execute(t.Context(), noSandbox{}, "read", json.RawMessage(`{"file_path":"a.txt"}`))
	if err != nil || !res.IsError || !strings.Contains(res.Content, "no sandbox") {
		t.Errorf("read with a failing sandbox = %+v, %v; want an IsError result with the cause", res, err)
	}
}

// bash runs one bash call and returns its result.
func bash(t *testing.T, sb sandbox.Sandbox, input string) tools.Result {
	t.Helper()
	res, err := tools.Execute(t.Context(), sb, "bash", json.RawMessage(input))
	if err != nil {
		t.Fatalf("bash %s: %v", input, err)
	}
	return res
}

// testPersistentShell checks what a model relies on: a cd and an exported
// variable carry over to the next call, a timed-out command leaves a
// usable shell in the same directory, restart clears the state, and
// concurrent calls run one after the other.
func testPersistentShell(t *testing.T, sb sandbox.Sandbox) {
	root := sb.Root()
	// A shell started ahead of the first call serves it.
	if err := sb.(sandbox.Shell).StartShell(t.Context()); err != nil {
		t.Fatalf("StartShell: %v", err)
	}
	if res := bash(t, sb, `{"command":"mkdir -p repo/src && cd repo && export GREETING=hello"}`); res.IsError {
		t.Fatalf("cd and export: %s", res.Content)
	}
	if res := bash(t, sb, `{"command":"pwd; echo \"$GREETING\""}`); res.Content != root+"/repo\nhello\n" {
		t.Fatalf("second call: %q, want the directory and variable of the first (%q)", res.Content, root+"/repo\nhello\n")
	}
	bash(t, sb, `{"command":"cd src"}`)
	if res := bash(t, sb, `{"command":"sleep 30","timeout_ms":300}`); !res.IsError || !strings.Contains(res.Content, "timed out") {
		t.Fatalf("timeout: %q", res.Content)
	}
	if res := bash(t, sb, `{"command":"pwd"}`); !strings.HasPrefix(res.Content, root+"/repo/src\n") || res.IsError {
		t.Fatalf("after a timeout: %q; want a usable shell still in %s", res.Content, root+"/repo/src")
	}
	if res := bash(t, sb, `{"restart":true,"command":"pwd; echo \"[$GREETING]\""}`); res.Content != root+"\n[]\n" {
		t.Fatalf("restart: %q, want the workspace root and no variable", res.Content)
	}
	// Concurrent calls run one after the other.
	var wg sync.WaitGroup
	results := make([]tools.Result, 4)
	for i := range results {
		wg.Go(func() {
			results[i] = bash(t, sb, fmt.Sprintf(`{"command":"if [ -e busy ]; then echo overlap; fi; touch busy; sleep 0.05; rm busy; echo call %d"}`, i))
		})
	}
	wg.Wait()
	for i, res := range results {
		if res.Content != fmt.Sprintf("call %d\n", i) {
			t.Errorf("concurrent call %d: %q", i, res.Content)
		}
	}
}

// testSessionPaths runs what a user would type: absolute /mnt/session paths
// in bash, as the file tools accept them.
func testSessionPaths(t *testing.T, sb sandbox.Sandbox) {
	if err := sb.WriteFile(t.Context(), sandbox.UploadsDir+"/data.csv", []byte("a,b\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := bash(t, sb, `{"command":"mkdir -p /mnt/session/outputs && cat /mnt/session/uploads/data.csv > /mnt/session/outputs/copy.csv && cd /mnt/session/outputs && ls"}`)
	if res.IsError || res.Content != "copy.csv\n" {
		t.Fatalf("bash with /mnt/session paths: %q", res.Content)
	}
	got, err := sb.ReadFile(t.Context(), sandbox.OutputsDir+"/copy.csv")
	if err != nil || string(got) != "a,b\n1,2\n" {
		t.Fatalf("ReadFile(outputs/copy.csv) = %q, %v", got, err)
	}
	if res := bash(t, sb, `{"command":"pwd"}`); res.Content != sandbox.OutputsDir+"\n" {
		t.Fatalf("the next call's directory: %q, want %s", res.Content, sandbox.OutputsDir)
	}
}
