package wire

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/lib/environments"

	"github.com/mangohq/mango/internal/poll"
)

// storeContents lists a store's memories (full view): wire path → content.
func storeContents(ctx context.Context, client anthropic.Client, storeID string) (map[string]string, error) {
	out := map[string]string{}
	pager := client.Beta.MemoryStores.Memories.ListAutoPaging(ctx, storeID, anthropic.BetaMemoryStoreMemoryListParams{
		View: anthropic.BetaManagedAgentsMemoryViewFull})
	for pager.Next() {
		it := pager.Current()
		if it.Type == "memory" {
			out[it.Path] = it.Content
		}
	}
	return out, pager.Err()
}

// TestMemorySelfHostedThroughSDK runs the SDK's EnvironmentWorker against
// Mango for a self-hosted session with a memory store attached: the worker
// downloads the store under its Workdir (mount_path is null), bash reads a
// memory there and writes a new one, and the worker's sync uploads it with
// the work item's token, attributed to the session; an API edit reaches
// the next turn's download.
func TestMemorySelfHostedThroughSDK(t *testing.T) {
	t.Parallel()
	e := newSelfHostedEnv(t, nil, nil)
	idle := time.Second
	e.runSDKWorker(t, "sdk-memory", sdkWorkerClient(e.srv), environments.EnvironmentWorkerOptions{Workdir: t.TempDir(), MaxIdle: &idle})
	ctx := context.Background()
	store := newMemoryStore(t, e.client, "notes", "Team notes.")
	first, err := e.client.Beta.MemoryStores.Memories.New(ctx, store, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/notes.md",
		Content: anthropic.String("remember: blue")})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "memory",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: toolset})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: e.envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{memoryResourceParam(store, "", "")}})
	if err != nil {
		t.Fatal(err)
	}
	events := e.watch(t, s.ID)
	e.say(t, s.ID, `#tool bash {"command": "cat memory/notes/notes.md && printf 'learned: green' > memory/notes/new.md"}`+"\n#reply Done.")
	evs := until(t, events, "session.status_idle", 90*time.Second)
	if out := resultText(last(evs, "user.tool_result")); !strings.Contains(out, "remember: blue") {
		t.Fatalf("bash on the SDK worker printed %q, want the memory downloaded under memory/notes (%v)", out, typesOf(evs))
	}
	poll.Until(t, 60*time.Second, "the SDK worker to upload memory/notes/new.md", func() (bool, string) {
		got, err := storeContents(ctx, e.client, store)
		if err != nil {
			return false, err.Error()
		}
		return got["/new.md"] == "learned: green" && got["/notes.md"] == "remember: blue", fmt.Sprint(got)
	})
	page, err := e.client.Beta.MemoryStores.MemoryVersions.List(ctx, store, anthropic.BetaMemoryStoreMemoryVersionListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var bySession int
	for _, v := range page.Data {
		if v.CreatedBy.Type == "session_actor" && v.CreatedBy.SessionID == s.ID && v.Path == "/new.md" && v.Operation == "created" {
			bySession++
		}
	}
	if bySession != 1 {
		t.Errorf("versions of /new.md created by session %s = %d, want 1", s.ID, bySession)
	}
	e.workSettles(t, s.ID)

	// An edit through the API reaches the next work item's download.
	if _, err := e.client.Beta.MemoryStores.Memories.Update(ctx, first.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: store,
		Content: anthropic.String("remember: red")}); err != nil {
		t.Fatal(err)
	}
	e.say(t, s.ID, `#tool bash {"command": "cat memory/notes/notes.md memory/notes/new.md"}`+"\n#reply Done.")
	evs = until(t, events, "session.status_idle", 90*time.Second)
	if out := resultText(last(evs, "user.tool_result")); !strings.Contains(out, "remember: red") || !strings.Contains(out, "learned: green") {
		t.Errorf("second turn's bash printed %q, want the API's edit and the memory the first turn wrote", out)
	}
}
