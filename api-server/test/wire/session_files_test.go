package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/testenv"
)

// TestSessionFilesLocal is issue 13's acceptance on the local sandbox:
// upload a CSV, mount it, a turn reads it with a built-in tool and writes
// results to /mnt/session/outputs, and the client lists the session's
// outputs and downloads their bytes. On local, bash sees the session
// directories inside the workspace (mnt/session/...).
func TestSessionFilesLocal(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	env, err := e.client.Beta.Environments.New(context.Background(), anthropic.BetaEnvironmentNewParams{
		Name: fmt.Sprintf("files-local-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	sessionFilesTurn(t, e, env.ID, "mnt/session", false)
}

// TestSessionFilesDocker is the same on the docker sandbox, where the
// session directories are the container's own /mnt/session.
func TestSessionFilesDocker(t *testing.T) {
	t.Parallel()
	if err := exec.Command("docker", "image", "inspect", "mango-sandbox:latest").Run(); err != nil {
		testenv.Unavailable(t, "no Docker daemon or image mango-sandbox:latest (scripts/build-sandbox-image.sh): %v", err)
	}
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SANDBOX_PROVIDERS", "local,docker"))
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	startWorkerWith(t, srv, "wire-files-docker", e.root, map[string]string{"MANGO_SANDBOX": "docker", "MANGO_DOCKER_LABELS": "mango.test=" + srv.TaskQueuePrefix})
	env, err := e.client.Beta.Environments.New(context.Background(), anthropic.BetaEnvironmentNewParams{
		Name: fmt.Sprintf("files-docker-%d", time.Now().UnixNano()), Metadata: map[string]string{"mango.sandbox": "docker"}})
	if err != nil {
		t.Fatal(err)
	}
	sessionFilesTurn(t, e, env.ID, "/mnt/session", true)
}

// sessionFilesTurn runs the acceptance scenario in environment envID;
// sessionDir is how bash addresses /mnt/session on that provider. With
// teardown, the session (and its container) is deleted when the test ends.
func sessionFilesTurn(t *testing.T, e *turnEnv, envID, sessionDir string, teardown bool) {
	t.Helper()
	ctx := context.Background()
	up := uploadCSV(t, e.client, "cities.csv")
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "files",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: toolset})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)},
		EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{
			FileID: up.ID, MountPath: anthropic.String("data.csv")}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if teardown {
		t.Cleanup(func() { deleteAndWait(t, e, s.ID) })
	}
	events := e.watch(t, s.ID)
	e.say(t, s.ID, strings.Join([]string{
		`#tool read {"file_path": "/mnt/session/uploads/data.csv"}`,
		fmt.Sprintf(`#tool bash {"command": "grep -c , %[1]s/uploads/data.csv > %[1]s/outputs/rows.txt && ls -l %[1]s/uploads/data.csv"}`, sessionDir),
		`#tool write {"file_path": "/mnt/session/outputs/report/summary.md", "content": "# Cities\nLyon is the largest.\n"}`,
		`#reply Done.`,
	}, "\n"))
	evs := until(t, events, "session.status_idle", 90*time.Second)
	results := all(evs, "agent.tool_result")
	if len(results) != 3 {
		t.Fatalf("tool results = %d, want 3 (%v)", len(results), typesOf(evs))
	}
	if r := resultText(results[0]); !strings.Contains(r, "Lyon,522250") {
		t.Fatalf("read of the mounted CSV returned %q, want its rows", r)
	}
	if r := resultText(results[1]); !strings.Contains(r, "-r--r--r--") {
		t.Errorf("the mounted file is %q, want it read-only (-r--r--r--)", r)
	}
	if n := count(evs, "session.error"); n != 0 {
		t.Fatalf("the turn reported %d session.error events: %v", n, typesOf(evs))
	}

	// The outputs are listed before the session went idle.
	outputs := checkSessionOutputs(t, e.client, s.ID)
	secondTurnOutputs(t, e, events, s.ID, sessionDir, outputs)
}

// checkSessionOutputs lists the session's downloadable files, checks they
// are the two outputs with their sizes, scope and media type, downloads
// their bytes, and returns them.
func checkSessionOutputs(t *testing.T, client anthropic.Client, sessionID string) []anthropic.BetaFileMetadata {
	t.Helper()
	ctx := context.Background()
	var outputs []anthropic.BetaFileMetadata
	pager := client.Beta.Files.ListAutoPaging(ctx, anthropic.BetaFileListParams{ScopeID: anthropic.String(sessionID)})
	for pager.Next() {
		if f := pager.Current(); f.Downloadable {
			outputs = append(outputs, f)
		}
	}
	if err := pager.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"rows.txt": "3\n", "summary.md": "# Cities\nLyon is the largest.\n"}
	if len(outputs) != len(want) {
		t.Fatalf("outputs = %d files, want %d: %+v", len(outputs), len(want), outputs)
	}
	for _, f := range outputs {
		body, ok := want[f.Filename]
		if !ok {
			t.Errorf("unexpected output %q", f.Filename)
			continue
		}
		if f.SizeBytes != int64(len(body)) || f.Scope.ID != sessionID {
			t.Errorf("output %s: %d bytes, scope %q; want %d bytes in scope %s", f.Filename, f.SizeBytes, f.Scope.ID, len(body), sessionID)
		}
		if f.Filename == "summary.md" && f.MimeType != "text/markdown; charset=utf-8" && f.MimeType != "text/markdown" {
			t.Errorf("summary.md media type = %q, want text/markdown", f.MimeType)
		}
		resp, err := client.Beta.Files.Download(ctx, f.ID, anthropic.BetaFileDownloadParams{})
		if err != nil {
			t.Fatalf("download %s: %v", f.Filename, err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || string(got) != body {
			t.Errorf("downloaded %s = %q (%v), want %q", f.Filename, got, err, body)
		}
	}
	return outputs
}

// secondTurnOutputs: a second turn that changes nothing publishes nothing
// new; a changed output replaces the file at its path.
func secondTurnOutputs(t *testing.T, e *turnEnv, events <-chan streamed, sessionID, sessionDir string, outputs []anthropic.BetaFileMetadata) {
	t.Helper()
	ctx := context.Background()
	e.say(t, sessionID, fmt.Sprintf(`#tool bash {"command": "echo 4 > %s/outputs/rows.txt"}`, sessionDir))
	until(t, events, "session.status_idle", 90*time.Second)
	var again []anthropic.BetaFileMetadata
	pager := e.client.Beta.Files.ListAutoPaging(ctx, anthropic.BetaFileListParams{ScopeID: anthropic.String(sessionID)})
	for pager.Next() {
		if f := pager.Current(); f.Downloadable {
			again = append(again, f)
		}
	}
	if len(again) != 2 {
		t.Fatalf("after a second turn: %d outputs, want 2 (one per path)", len(again))
	}
	for _, f := range again {
		switch f.Filename {
		case "summary.md":
			if !hasID(outputs, f.ID) {
				t.Errorf("the unchanged summary.md was published again as %s", f.ID)
			}
		case "rows.txt":
			if hasID(outputs, f.ID) || f.SizeBytes != 2 {
				t.Errorf("the changed rows.txt is %s (%d bytes), want a new file of 2 bytes", f.ID, f.SizeBytes)
			}
		}
	}
}

func hasID(files []anthropic.BetaFileMetadata, id string) bool {
	for _, f := range files {
		if f.ID == id {
			return true
		}
	}
	return false
}

// all returns the events of a type, in order, decoded.
func all(evs []streamed, typ string) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e.Type == typ {
			var m map[string]any
			_ = json.Unmarshal([]byte(e.Raw), &m)
			out = append(out, m)
		}
	}
	return out
}

// deleteAndWait deletes a session and waits until its sandbox was torn
// down and the row is gone.
func deleteAndWait(t *testing.T, e *turnEnv, sid string) {
	_, _ = e.client.Beta.Sessions.Delete(context.Background(), sid, anthropic.BetaSessionDeleteParams{})
	waitSessionGone(t, e.srv, sid, "sandbox teardown")
}
