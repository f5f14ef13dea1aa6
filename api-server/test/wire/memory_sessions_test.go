package wire

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/testenv"
)

// memoryFixture is a store with one memory, /prefs.md, an agent with the
// default toolset and an environment.
type memoryFixture struct {
	e       *turnEnv
	envID   string
	agentID string
	store   *anthropic.BetaManagedAgentsMemoryStore
	prefs   *anthropic.BetaManagedAgentsMemory
}

const prefsV1 = "drinks: tea\n"

func newMemoryFixture(t *testing.T, e *turnEnv, envMetadata map[string]string) *memoryFixture {
	t.Helper()
	ctx := context.Background()
	f := &memoryFixture{e: e}
	var err error
	f.store, err = e.client.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "Project Notes",
		Description: anthropic.String("What the team decided, and the user's preferences.")})
	if err != nil {
		t.Fatalf("create memory store: %v", err)
	}
	f.prefs, err = e.client.Beta.MemoryStores.Memories.New(ctx, f.store.ID, anthropic.BetaMemoryStoreMemoryNewParams{
		Path: "/prefs.md", Content: param.NewOpt(prefsV1)})
	if err != nil {
		t.Fatalf("create memory: %v", err)
	}
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "remembers",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: toolset})
	if err != nil {
		t.Fatal(err)
	}
	f.agentID = agent.ID
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{
		Name: fmt.Sprintf("memory-%d", time.Now().UnixNano()), Metadata: envMetadata})
	if err != nil {
		t.Fatal(err)
	}
	f.envID = env.ID
	return f
}

// session starts a session with the store attached with access.
func (f *memoryFixture) session(t *testing.T, access anthropic.BetaManagedAgentsMemoryStoreResourceParamAccess) string {
	t.Helper()
	s, err := f.e.client.Beta.Sessions.New(context.Background(), anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(f.agentID)}, EnvironmentID: f.envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{
			MemoryStoreID: f.store.ID, Access: access, Instructions: anthropic.String("Keep notes short.")}}}})
	if err != nil {
		t.Fatalf("create session with the memory store: %v", err)
	}
	return s.ID
}

// memory returns the store's memory at path (nil when none).
func (f *memoryFixture) memory(t *testing.T, path string) *anthropic.BetaManagedAgentsMemory {
	t.Helper()
	ctx := context.Background()
	pager := f.e.client.Beta.MemoryStores.Memories.ListAutoPaging(ctx, f.store.ID, anthropic.BetaMemoryStoreMemoryListParams{})
	for pager.Next() {
		item := pager.Current()
		if item.Type != "memory" || item.Path != path {
			continue
		}
		m, err := f.e.client.Beta.MemoryStores.Memories.Get(ctx, item.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: f.store.ID})
		if err != nil {
			t.Fatalf("get memory %s: %v", path, err)
		}
		return m
	}
	if err := pager.Err(); err != nil {
		t.Fatal(err)
	}
	return nil
}

// lastVersion returns the newest version of a memory.
func (f *memoryFixture) lastVersion(t *testing.T, memoryID string) anthropic.BetaManagedAgentsMemoryVersion {
	t.Helper()
	page, err := f.e.client.Beta.MemoryStores.MemoryVersions.List(context.Background(), f.store.ID,
		anthropic.BetaMemoryStoreMemoryVersionListParams{MemoryID: anthropic.String(memoryID), Limit: anthropic.Int(1)})
	if err != nil || len(page.Data) == 0 {
		t.Fatalf("list versions of %s = %v, %v; want at least one", memoryID, page, err)
	}
	return page.Data[0]
}

// TestMemoryInSessionsLocal is issue 33's acceptance on the local sandbox.
func TestMemoryInSessionsLocal(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	memoryInSessions(t, newMemoryFixture(t, e, nil))
}

// TestMemoryInSessionsDocker is the same on the docker sandbox.
func TestMemoryInSessionsDocker(t *testing.T) {
	t.Parallel()
	if err := exec.Command("docker", "image", "inspect", "mango-sandbox:latest").Run(); err != nil {
		testenv.Unavailable(t, "no Docker daemon or image mango-sandbox:latest (scripts/build-sandbox-image.sh): %v", err)
	}
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SANDBOX_PROVIDERS", "local,docker"))
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	startWorkerWith(t, srv, "wire-memory-docker", e.root, map[string]string{"MANGO_SANDBOX": "docker", "MANGO_DOCKER_LABELS": "mango.test=" + srv.TaskQueuePrefix})
	memoryInSessions(t, newMemoryFixture(t, e, map[string]string{"mango.sandbox": "docker"}))
}

const memoryMount = "/mnt/memory/project-notes"

// memoryInSessions: a read_write session writes a new memory with the
// write tool and edits one with bash; the API shows both, with versions
// whose actor is the session. A stale precondition gets 409; redacting a
// version clears its content and keeps it.
func memoryInSessions(t *testing.T, f *memoryFixture) {
	t.Helper()
	ctx := context.Background()
	sid := f.session(t, anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadWrite)
	events := f.e.watch(t, sid)
	f.e.say(t, sid, strings.Join([]string{
		`#tool write {"file_path": "` + memoryMount + `/notes.md", "content": "we ship on fridays\n"}`,
		`#tool bash {"command": "cat ` + memoryMount + `/prefs.md && echo 'food: pasta' >> ` + memoryMount + `/prefs.md"}`,
		`#reply Noted.`,
	}, "\n"))
	evs := until(t, events, "session.status_idle", 90*time.Second)
	if n := count(evs, "session.error"); n != 0 {
		t.Fatalf("the turn reported %d session.error events: %v", n, typesOf(evs))
	}
	if r := resultText(all(evs, "agent.tool_result")[1]); !strings.Contains(r, "drinks: tea") {
		t.Fatalf("bash read the mounted memory as %q, want its content", r)
	}
	notes := f.memory(t, "/notes.md")
	if notes == nil || notes.Content != "we ship on fridays\n" {
		t.Fatalf("memory /notes.md after the turn = %+v; want the content the agent wrote", notes)
	}
	prefs := f.memory(t, "/prefs.md")
	if prefs == nil || prefs.Content != prefsV1+"food: pasta\n" {
		t.Fatalf("memory /prefs.md after the turn = %+v; want the agent's edit", prefs)
	}
	for _, m := range []*anthropic.BetaManagedAgentsMemory{notes, prefs} {
		v := f.lastVersion(t, m.ID)
		if v.CreatedBy.Type != "session_actor" || v.CreatedBy.SessionID != sid {
			t.Errorf("last version of %s was made by %+v; want session_actor %s", m.Path, v.CreatedBy, sid)
		}
	}

	// A stale precondition: the content the client last saw changed.
	_, err := f.e.client.Beta.MemoryStores.Memories.Update(ctx, prefs.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{
		MemoryStoreID: f.store.ID, Content: param.NewOpt("drinks: water\n"),
		Precondition: anthropic.BetaManagedAgentsPreconditionParam{ContentSha256: param.NewOpt(f.prefs.ContentSha256)}})
	wantAPIError(t, err, 409)

	// Redact the first version of /prefs.md: its content goes, the row stays.
	first := f.firstVersion(t, prefs.ID)
	red, err := f.e.client.Beta.MemoryStores.MemoryVersions.Redact(ctx, first.ID, anthropic.BetaMemoryStoreMemoryVersionRedactParams{MemoryStoreID: f.store.ID})
	if err != nil {
		t.Fatalf("redact: %v", err)
	}
	got, err := f.e.client.Beta.MemoryStores.MemoryVersions.Get(ctx, first.ID, anthropic.BetaMemoryStoreMemoryVersionGetParams{MemoryStoreID: f.store.ID})
	if err != nil || got.Content != "" || got.RedactedAt.IsZero() || red.ID != first.ID {
		t.Errorf("version after redaction = %+v, %v; want it kept, without content, with redacted_at", got, err)
	}
}

func (f *memoryFixture) firstVersion(t *testing.T, memoryID string) anthropic.BetaManagedAgentsMemoryVersion {
	t.Helper()
	var out []anthropic.BetaManagedAgentsMemoryVersion
	pager := f.e.client.Beta.MemoryStores.MemoryVersions.ListAutoPaging(context.Background(), f.store.ID,
		anthropic.BetaMemoryStoreMemoryVersionListParams{MemoryID: anthropic.String(memoryID)})
	for pager.Next() {
		out = append(out, pager.Current())
	}
	if err := pager.Err(); err != nil || len(out) == 0 {
		t.Fatalf("versions of %s: %v, %v", memoryID, out, err)
	}
	return out[len(out)-1] // newest first
}

// TestMemoryReadOnly: a read_only store refuses the agent's write tool,
// and what bash changes anyway is not written back.
func TestMemoryReadOnly(t *testing.T) {
	t.Parallel()
	f := newMemoryFixture(t, newTurnEnv(t), nil)
	sid := f.session(t, anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadOnly)
	events := f.e.watch(t, sid)
	f.e.say(t, sid, strings.Join([]string{
		`#tool write {"file_path": "` + memoryMount + `/prefs.md", "content": "drinks: rum\n"}`,
		`#tool bash {"command": "echo 'drinks: gin' > ` + memoryMount + `/prefs.md; cat ` + memoryMount + `/prefs.md"}`,
		`#reply Tried.`,
	}, "\n"))
	evs := until(t, events, "session.status_idle", 90*time.Second)
	results := all(evs, "agent.tool_result")
	if len(results) != 2 {
		t.Fatalf("tool results = %d, want 2 (%v)", len(results), typesOf(evs))
	}
	if isErr, _ := results[0]["is_error"].(bool); !isErr {
		t.Errorf("write into a read_only memory store = %q; want an error result", resultText(results[0]))
	}
	if m := f.memory(t, "/prefs.md"); m == nil || m.Content != prefsV1 {
		t.Errorf("memory /prefs.md after a read_only session = %+v; want it unchanged", m)
	}
}

// TestMemoryAPIEditDuringTurnSurvives: a memory changed through the API
// while a turn has it mounted and edits it is not overwritten by the
// turn's sync: the API's content stays, and the agent's is kept beside it.
func TestMemoryAPIEditDuringTurnSurvives(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	f := newMemoryFixture(t, e, nil)
	sid := f.session(t, anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadWrite)
	events := e.watch(t, sid)
	marker := "mango-held-" + strings.TrimPrefix(sid, "sesn_")
	e.say(t, sid, fmt.Sprintf(`#tool bash {"command": "echo 'drinks: coffee' > %s/prefs.md && touch %s && while [ ! -e %s.release ]; do sleep 0.05; done"}`,
		memoryMount, marker, marker))
	// The command holds the turn until the test releases it.
	var held string
	poll.Until(t, 60*time.Second, "the held bash command to start", func() (bool, string) {
		_ = filepath.WalkDir(e.root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == marker {
				held = p
			}
			return nil
		})
		return held != "", "no " + marker + " in the sandbox yet"
	})
	if _, err := e.client.Beta.MemoryStores.Memories.Update(context.Background(), f.prefs.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{
		MemoryStoreID: f.store.ID, Content: param.NewOpt("drinks: water\n")}); err != nil {
		t.Fatalf("API edit during the turn: %v", err)
	}
	if err := os.WriteFile(held+".release", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	until(t, events, "session.status_idle", 90*time.Second)
	if m := f.memory(t, "/prefs.md"); m == nil || m.Content != "drinks: water\n" {
		t.Errorf("memory /prefs.md after the turn = %+v; want the API's edit kept", m)
	}
	conflict := f.memory(t, "/prefs.conflict-"+sid+".md")
	if conflict == nil || conflict.Content != "drinks: coffee\n" {
		t.Errorf("the agent's concurrent edit = %+v; want it kept at /prefs.conflict-%s.md", conflict, sid)
	}
}

// TestMemoryTurnCost measures what an attached memory store adds to a
// turn (placement at its first sandbox use, the turn-end sync): turns of
// one bash call, timed from the user.message event to session.status_idle,
// with and without a store of 200 memories of 1 kB. Opt-in:
// MANGO_MEMORY_COST=<turns> (docker too when its image is built).
func TestMemoryTurnCost(t *testing.T) {
	n := 0
	if _, err := fmt.Sscan(os.Getenv("MANGO_MEMORY_COST"), &n); err != nil || n <= 0 {
		t.Skip("set MANGO_MEMORY_COST=<turns> to measure")
	}
	providers := map[string]map[string]string{"local": nil}
	if exec.Command("docker", "image", "inspect", "mango-sandbox:latest").Run() == nil {
		providers["docker"] = map[string]string{"mango.sandbox": "docker"}
	}
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SANDBOX_PROVIDERS", "local,docker"))
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	startWorkerWith(t, srv, "wire-memory-cost-local", e.root, nil)
	if _, ok := providers["docker"]; ok {
		startWorkerWith(t, srv, "wire-memory-cost-docker", t.TempDir(), map[string]string{"MANGO_SANDBOX": "docker", "MANGO_DOCKER_LABELS": "mango.test=" + srv.TaskQueuePrefix})
	}
	for name, md := range providers {
		f := newMemoryFixture(t, e, md)
		for i := range 199 {
			if _, err := e.client.Beta.MemoryStores.Memories.New(context.Background(), f.store.ID, anthropic.BetaMemoryStoreMemoryNewParams{
				Path: fmt.Sprintf("/notes/n%03d.md", i), Content: param.NewOpt(strings.Repeat("x", 1023) + "\n")}); err != nil {
				t.Fatal(err)
			}
		}
		plain, err := e.client.Beta.Sessions.New(context.Background(), anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(f.agentID)}, EnvironmentID: f.envID})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ what, sid string }{{"without a store", plain.ID},
			{"with 200 memories", f.session(t, anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadWrite)}} {
			events := e.watch(t, c.sid)
			var ds []time.Duration
			for i := range n + 1 {
				e.say(t, c.sid, fmt.Sprintf(`#tool bash {"command": "echo %d"}`, i))
				evs := until(t, events, "session.status_idle", 90*time.Second)
				if i == 0 {
					continue // the sandbox's provisioning
				}
				ds = append(ds, createdAt(t, last(evs, "session.status_idle")).Sub(createdAt(t, last(evs, "user.message"))))
			}
			t.Logf("%s, %s: turn p50 %v p90 %v max %v over %d turns", name, c.what, pct(ds, 50), pct(ds, 90), pct(ds, 100), n)
		}
	}
}
