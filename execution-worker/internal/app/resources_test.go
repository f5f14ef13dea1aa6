package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/gitrepo/gittest"
	"github.com/mangohq/mango/execution-worker/internal/cptest"
)

// createSessionWith creates a session of a toolset agent with resources.
func createSessionWith(t *testing.T, srv *cptest.Server, resources []any) string {
	t.Helper()
	var agent, env, sess struct{ ID string }
	srv.Do(t, http.MethodPost, "/v1/agents", map[string]any{"name": "resources", "model": "fake",
		"tools": []any{map[string]any{"type": "agent_toolset_20260401"}}}, &agent)
	srv.Do(t, http.MethodPost, "/v1/environments", map[string]any{"name": fmt.Sprintf("resources-%d", time.Now().UnixNano())}, &env)
	srv.Do(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": env.ID, "resources": resources}, &sess)
	return sess.ID
}

// uploadFile uploads a file through the Files API.
func uploadFile(t *testing.T, srv *cptest.Server, name, mediaType string, data []byte) string {
	t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	h := make(map[string][]string)
	h["Content-Disposition"] = []string{fmt.Sprintf(`form-data; name="file"; filename=%q`, name)}
	h["Content-Type"] = []string{mediaType}
	part, err := w.CreatePart(h)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = part.Write(data)
	_ = w.Close()
	req, err := http.NewRequest(http.MethodPost, srv.BaseURL+"/v1/files", &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	req.Header.Set("x-api-key", srv.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var f struct {
		ID string `json:"id"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&f) != nil {
		t.Fatalf("upload %s: status %d", name, resp.StatusCode)
	}
	return f.ID
}

func toolResults(evs []listedEvent) []string {
	var out []string
	for _, e := range evs {
		if e.Type == "agent.tool_result" && len(e.Content) > 0 {
			out = append(out, e.Content[0].Text)
		}
	}
	return out
}

// TestRepositoryResources mounts a public repository at a branch and a
// private one with its token, served over smart HTTP by the test; the
// agent sees both checkouts. A refused token ends the turn with a
// session.error naming the resource, and the session stays usable.
func TestRepositoryResources(t *testing.T) {
	t.Parallel()
	git := gittest.Start(t)
	public := git.AddRepo(t, "acme/widgets", map[string]string{"README.md": "widgets on main\n"})
	git.Commit(t, "acme/widgets", "feature", map[string]string{"README.md": "widgets on feature\n"})
	const token = "ghp_test_private_token_5c4b3a"
	private := git.AddRepo(t, "acme/secret", map[string]string{"plan.txt": "the private plan\n"}, gittest.RequireToken(token))

	srv, env := startStack(t)
	runWorker(t, env)
	sid := createSessionWith(t, srv, []any{
		map[string]any{"type": "github_repository", "url": public, "checkout": map[string]any{"type": "branch", "name": "feature"}},
		map[string]any{"type": "github_repository", "url": private, "authorization_token": token, "mount_path": "/workspace/private"},
	})
	// On local, /workspace/X is X under the workspace.
	sendMessage(t, srv, sid, "#tool read {\"file_path\": \"/workspace/widgets/README.md\"}\n#tool bash {\"command\": \"cat private/plan.txt; ls -a private\"}\n#reply ok")
	evs := waitFor(t, srv, sid, func(e []listedEvent) bool { return idleCount(e) == 1 })
	res := toolResults(evs)
	if len(res) != 2 || !strings.Contains(res[0], "widgets on feature") || !strings.Contains(res[1], "the private plan") || !strings.Contains(res[1], ".git") {
		t.Fatalf("tool results = %q; want the feature branch's README and the private repository with its .git", res)
	}
	if n := countType(evs, "session.error"); n != 0 {
		t.Fatalf("%d session.error events: %s", n, types(evs))
	}

	// A second session with a wrong token: the turn ends with an error
	// naming the resource; the session takes the next message.
	bad := createSessionWith(t, srv, []any{
		map[string]any{"type": "github_repository", "url": private, "authorization_token": "ghp_wrong"},
	})
	sendMessage(t, srv, bad, `#tool bash {"command": "ls"}`)
	evs = waitFor(t, srv, bad, func(e []listedEvent) bool { return idleCount(e) == 1 })
	errEv := lastOf(evs, "session.error")
	if errEv == nil || !strings.Contains(errEv.Error.Message, "sesrsc_") || !strings.Contains(errEv.Error.Message, "authentication") ||
		errEv.Error.RetryStatus.Type != "exhausted" {
		t.Fatalf("session.error = %+v; want one naming the resource and the authentication failure, retry_status exhausted", errEv)
	}
	if strings.Contains(string(errEv.Raw), "ghp_wrong") || strings.Contains(string(errEv.Raw), token) {
		t.Fatal("the session.error contains a token")
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	srv.Do(t, http.MethodGet, "/v1/sessions/"+bad+"/resources", nil, &list)
	srv.Do(t, http.MethodDelete, "/v1/sessions/"+bad+"/resources/"+list.Data[0].ID, nil, nil)
	sendMessage(t, srv, bad, `#tool bash {"command": "echo usable"}`)
	evs = waitFor(t, srv, bad, func(e []listedEvent) bool { return idleCount(e) == 2 })
	if res := toolResults(evs); len(res) == 0 || !strings.Contains(res[len(res)-1], "usable") {
		t.Fatalf("after deleting the bad resource the session did not run its turn: %s", types(evs))
	}
}

// TestFileResourceAddedAndDeleted: a file added to a session with a
// sandbox appears at its mount path on the next turn, read-only; once the
// resource is deleted, the next turn no longer sees it.
func TestFileResourceAddedAndDeleted(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	sid := createSessionWith(t, srv, nil)
	sendMessage(t, srv, sid, `#tool bash {"command": "echo first"}`)
	waitFor(t, srv, sid, func(e []listedEvent) bool { return idleCount(e) == 1 })

	fid := uploadFile(t, srv, "notes.txt", "text/plain", []byte("added later\n"))
	var res struct {
		ID        string `json:"id"`
		MountPath string `json:"mount_path"`
	}
	srv.Do(t, http.MethodPost, "/v1/sessions/"+sid+"/resources", map[string]any{"type": "file", "file_id": fid, "mount_path": "notes.txt"}, &res)
	sendMessage(t, srv, sid, "#tool read {\"file_path\": \"/mnt/session/uploads/notes.txt\"}\n#reply ok")
	evs := waitFor(t, srv, sid, func(e []listedEvent) bool { return idleCount(e) == 2 })
	out := toolResults(evs)
	if len(out) != 2 || !strings.Contains(out[1], "added later") {
		t.Fatalf("tool results = %q; want the added file's content", out)
	}
	srv.Do(t, http.MethodDelete, "/v1/sessions/"+sid+"/resources/"+res.ID, nil, nil)
	sendMessage(t, srv, sid, `#tool bash {"command": "ls mnt/session/uploads/ | wc -l"}`)
	evs = waitFor(t, srv, sid, func(e []listedEvent) bool { return idleCount(e) == 3 })
	out = toolResults(evs)
	if got := strings.TrimSpace(out[len(out)-1]); !strings.HasPrefix(got, "0") {
		t.Fatalf("after deleting the resource the uploads directory lists %q files, want 0", got)
	}
	// Each turn read its resources and context snapshot with its run: one
	// call, not three.
	calls := controlPlaneCalls(t, srv)
	if calls["GetRun"] < 3 || calls["ListSessionResources"] != 0 || calls["GetContextSnapshot"] != 0 {
		t.Errorf("ControlPlane calls GetRun %v, ListSessionResources %v, GetContextSnapshot %v; want at least 3, 0, 0",
			calls["GetRun"], calls["ListSessionResources"], calls["GetContextSnapshot"])
	}
}

// controlPlaneCalls counts the ControlPlane calls srv served, by method
// (mango_controlplane_requests_total summed over status codes).
func controlPlaneCalls(t *testing.T, srv *cptest.Server) map[string]float64 {
	t.Helper()
	resp, err := http.Get(srv.BaseURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		rest, ok := strings.CutPrefix(line, "mango_controlplane_requests_total{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		_, method, _ := strings.Cut(labels, `method="`)
		method, _, _ = strings.Cut(method, `"`)
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		calls[method] += n
	}
	return calls
}

// TestOutputLimits: a session publishes at most MANGO_OUTPUTS_MAX_FILES
// outputs; the rest are left out and a session.error names the limit and
// the files, while the turn still ends normally.
func TestOutputLimits(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	env["MANGO_OUTPUTS_MAX_FILES"] = "2"
	runWorker(t, env)
	sid := createSessionWith(t, srv, nil)
	sendMessage(t, srv, sid, `#tool bash {"command": "for f in a b c d; do echo $f > mnt/session/outputs/$f.txt; done"}`)
	evs := waitFor(t, srv, sid, func(e []listedEvent) bool { return idleCount(e) == 1 })
	errEv := lastOf(evs, "session.error")
	if errEv == nil || !strings.Contains(errEv.Error.Message, "at most 2 output files") || !strings.Contains(errEv.Error.Message, "/mnt/session/outputs/c.txt") ||
		errEv.Error.RetryStatus.Type != "exhausted" {
		t.Fatalf("session.error = %+v; want the limit and the files left out", errEv)
	}
	if idle := lastOf(evs, "session.status_idle"); idle.StopReason == nil || idle.StopReason.Type != "end_turn" {
		t.Fatalf("idle = %s, want end_turn", idle.Raw)
	}
	var files struct {
		Data []struct {
			Filename     string `json:"filename"`
			Downloadable bool   `json:"downloadable"`
		} `json:"data"`
	}
	srv.Do(t, http.MethodGet, "/v1/files?scope_id="+sid, nil, &files)
	var names []string
	for _, f := range files.Data {
		if f.Downloadable {
			names = append(names, f.Filename)
		}
	}
	if len(names) != 2 {
		t.Fatalf("published %v, want the first 2 outputs by path (a.txt, b.txt)", names)
	}
}

// TestResourcesMaterializedOnceAcrossRestarts: what a sandbox holds is
// recorded with the api-server, not in the worker's memory: after a
// worker restart a mounted file is not copied again (the agent's change
// to it stays), and a file added meanwhile is mounted by the new worker.
func TestResourcesMaterializedOnceAcrossRestarts(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	stop := runWorker(t, env)
	fid := uploadFile(t, srv, "notes.txt", "text/plain", []byte("original\n"))
	sid := createSessionWith(t, srv, []any{map[string]any{"type": "file", "file_id": fid, "mount_path": "notes.txt"}})
	sendMessage(t, srv, sid, `#tool bash {"command": "chmod u+w mnt/session/uploads/notes.txt && echo changed > mnt/session/uploads/notes.txt && cat mnt/session/uploads/notes.txt"}`)
	evs := waitFor(t, srv, sid, func(e []listedEvent) bool { return idleCount(e) == 1 })
	if out := toolResults(evs); len(out) != 1 || !strings.Contains(out[0], "changed") {
		t.Fatalf("first turn: %q", out)
	}
	stop()
	second := uploadFile(t, srv, "more.txt", "text/plain", []byte("added while down\n"))
	srv.Do(t, http.MethodPost, "/v1/sessions/"+sid+"/resources", map[string]any{"type": "file", "file_id": second, "mount_path": "more.txt"}, nil)
	runWorker(t, env)
	sendMessage(t, srv, sid, `#tool bash {"command": "cat mnt/session/uploads/notes.txt mnt/session/uploads/more.txt"}`)
	evs = waitFor(t, srv, sid, func(e []listedEvent) bool { return idleCount(e) == 2 })
	out := toolResults(evs)
	if got := out[len(out)-1]; !strings.Contains(got, "changed") || strings.Contains(got, "original") || !strings.Contains(got, "added while down") {
		t.Fatalf("after the restart: %q; want the agent's change kept (not mounted again) and the new file mounted", got)
	}
}
