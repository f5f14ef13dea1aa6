package wire

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/internal/poll"
)

// dreamOutputMount is where a dream's session mounts its output store.
const dreamOutputMount = "/mnt/memory/dream-output"

// talkedSession is a session of the fixture's environment that had one
// turn (the dream's input).
func talkedSession(t *testing.T, f *memoryFixture) string {
	t.Helper()
	sid := f.session(t, anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadOnly)
	events := f.e.watch(t, sid)
	f.e.say(t, sid, "we decided to ship on fridays")
	until(t, events, "session.status_idle", 90*time.Second)
	return sid
}

func dreamParams(storeID, sessionID, instructions string) anthropic.BetaDreamNewParams {
	return anthropic.BetaDreamNewParams{
		Inputs: []anthropic.BetaDreamInputUnionParam{anthropic.BetaDreamInputParamOfMemoryStore(storeID),
			anthropic.BetaDreamInputParamOfSessions([]string{sessionID})},
		Model:        anthropic.BetaDreamNewParamsModelUnion{OfString: anthropic.String("fake")},
		Instructions: anthropic.String(instructions)}
}

// waitDream polls a dream until it has status want.
func waitDream(t *testing.T, e *turnEnv, id string, want anthropic.BetaDreamStatus) *anthropic.BetaDream {
	t.Helper()
	var d *anthropic.BetaDream
	poll.Until(t, 90*time.Second, "dream "+id+" "+string(want), func() (bool, string) {
		var err error
		d, err = e.client.Beta.Dreams.Get(context.Background(), id, anthropic.BetaDreamGetParams{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status == want, string(d.Status) + " " + d.Error.Message
	})
	return d
}

// storeMemory returns the content of the memory at path in a store, and
// whether there is one.
func storeMemory(t *testing.T, e *turnEnv, storeID, path string) (string, bool) {
	t.Helper()
	ctx := context.Background()
	pager := e.client.Beta.MemoryStores.Memories.ListAutoPaging(ctx, storeID, anthropic.BetaMemoryStoreMemoryListParams{})
	for pager.Next() {
		if it := pager.Current(); it.Type == "memory" && it.Path == path {
			m, err := e.client.Beta.MemoryStores.Memories.Get(ctx, it.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: storeID})
			if err != nil {
				t.Fatalf("get memory %s of %s: %v", path, storeID, err)
			}
			return m.Content, true
		}
	}
	if err := pager.Err(); err != nil {
		t.Fatal(err)
	}
	return "", false
}

// TestDreamCompletes: a scripted dream writes /summary.md into a new
// store holding a copy of the input store; the input store is unchanged;
// the completed dream archives and leaves the default list.
func TestDreamCompletes(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	f := newMemoryFixture(t, e, nil)
	sid := talkedSession(t, f)
	ctx := context.Background()
	d, err := e.client.Beta.Dreams.New(ctx, dreamParams(f.store.ID, sid, strings.Join([]string{
		`#tool write {"file_path": "` + dreamOutputMount + `/summary.md", "content": "ship on fridays\n"}`,
		`#reply Done.`}, "\n")))
	if err != nil {
		t.Fatalf("create dream: %v", err)
	}
	if !strings.HasPrefix(d.ID, "drm_") || d.SessionID == "" || len(d.Outputs) != 1 || d.Outputs[0].MemoryStoreID == f.store.ID ||
		d.Model.ID != "fake" || d.Model.Speed != "standard" || d.OutputBehavior.Type != "create_new" {
		t.Fatalf("created dream = %s; want a drm_ id, a session, a new output store, model {fake, standard}, create_new", d.RawJSON())
	}
	// The dream's agent is archived once its session exists: it does not
	// crowd the agents list.
	agents := e.client.Beta.Agents.ListAutoPaging(ctx, anthropic.BetaAgentListParams{})
	for agents.Next() {
		if a := agents.Current(); a.Name == "dream "+d.ID {
			t.Errorf("the agents list shows the dream's agent %s; want it archived", a.ID)
		}
	}
	if err := agents.Err(); err != nil {
		t.Fatal(err)
	}
	done := waitDream(t, e, d.ID, anthropic.BetaDreamStatusCompleted)
	if done.EndedAt.IsZero() || done.Error.Type != "" {
		t.Errorf("completed dream = %s; want ended_at and no error", done.RawJSON())
	}
	out := d.Outputs[0].MemoryStoreID
	if got, ok := storeMemory(t, e, out, "/summary.md"); !ok || got != "ship on fridays\n" {
		t.Errorf("output store /summary.md = %q, %v; want what the dream wrote", got, ok)
	}
	if got, _ := storeMemory(t, e, out, "/prefs.md"); got != prefsV1 {
		t.Errorf("output store /prefs.md = %q; want the input store's copy %q", got, prefsV1)
	}
	if _, ok := storeMemory(t, e, f.store.ID, "/summary.md"); ok {
		t.Errorf("the input store got /summary.md; create_new must leave it unchanged")
	}
	if got, _ := storeMemory(t, e, f.store.ID, "/prefs.md"); got != prefsV1 {
		t.Errorf("input store /prefs.md = %q; want it unchanged %q", got, prefsV1)
	}
	dreamArchiveAndList(t, e, d.ID)
}

// dreamArchiveAndList archives an ended dream: the default list leaves
// it out, include_archived lists it.
func dreamArchiveAndList(t *testing.T, e *turnEnv, id string) {
	t.Helper()
	ctx := context.Background()
	a, err := e.client.Beta.Dreams.Archive(ctx, id, anthropic.BetaDreamArchiveParams{})
	if err != nil || a.ArchivedAt.IsZero() {
		t.Fatalf("archive dream = %v, %v; want archived_at", a, err)
	}
	listed := func(includeArchived bool) bool {
		page, err := e.client.Beta.Dreams.List(ctx, anthropic.BetaDreamListParams{IncludeArchived: anthropic.Bool(includeArchived), Limit: anthropic.Int(100)})
		if err != nil {
			t.Fatalf("list dreams: %v", err)
		}
		for _, d := range page.Data {
			if d.ID == id {
				return true
			}
		}
		return false
	}
	if listed(false) {
		t.Errorf("the default list holds archived dream %s", id)
	}
	if !listed(true) {
		t.Errorf("include_archived=true leaves out archived dream %s", id)
	}
}

// TestDreamCancel: a dream cancelled while its session runs a held
// command ends canceled, and its session goes idle.
func TestDreamCancel(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	f := newMemoryFixture(t, e, nil)
	sid := talkedSession(t, f)
	ctx := context.Background()
	d, err := e.client.Beta.Dreams.New(ctx, dreamParams(f.store.ID, sid, `#tool bash {"command": "while true; do sleep 0.05; done"}`))
	if err != nil {
		t.Fatalf("create dream: %v", err)
	}
	waitDream(t, e, d.ID, anthropic.BetaDreamStatusRunning)
	poll.Until(t, 90*time.Second, "the dream's session calls the held bash command", func() (bool, string) {
		evs, err := e.client.Beta.Sessions.Events.List(ctx, d.SessionID, anthropic.BetaSessionEventListParams{})
		if err != nil {
			return false, err.Error()
		}
		var types []string
		for _, ev := range evs.Data {
			if ev.Type == "agent.tool_use" {
				return true, ""
			}
			types = append(types, ev.Type)
		}
		return false, strings.Join(types, ",")
	})
	_, err = e.client.Beta.Dreams.Archive(ctx, d.ID, anthropic.BetaDreamArchiveParams{})
	wantAPIError(t, err, 400)
	c, err := e.client.Beta.Dreams.Cancel(ctx, d.ID, anthropic.BetaDreamCancelParams{})
	if err != nil || c.Status != anthropic.BetaDreamStatusCanceled {
		t.Fatalf("cancel dream = %v, %v; want canceled", c, err)
	}
	poll.Until(t, 90*time.Second, "the dream's session idle after the cancel", func() (bool, string) {
		s, err := e.client.Beta.Sessions.Get(ctx, d.SessionID, anthropic.BetaSessionGetParams{})
		if err != nil {
			return false, err.Error()
		}
		return s.Status == "idle", string(s.Status)
	})
	if got := waitDream(t, e, d.ID, anthropic.BetaDreamStatusCanceled); got.EndedAt.IsZero() {
		t.Errorf("canceled dream = %s; want ended_at", got.RawJSON())
	}
	again, err := e.client.Beta.Dreams.Cancel(ctx, d.ID, anthropic.BetaDreamCancelParams{})
	if err != nil || again.Status != anthropic.BetaDreamStatusCanceled {
		t.Errorf("cancel a canceled dream = %v, %v; want it unchanged", again, err)
	}
}

// TestDreamValidation: malformed creates answer 400.
func TestDreamValidation(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	f := newMemoryFixture(t, e, nil)
	sid := f.session(t, anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadOnly)
	ctx := context.Background()
	store := anthropic.BetaDreamInputParamOfMemoryStore(f.store.ID)
	sessions := anthropic.BetaDreamInputParamOfSessions([]string{sid})
	cases := map[string]func(p *anthropic.BetaDreamNewParams){
		"two memory_store inputs": func(p *anthropic.BetaDreamNewParams) {
			p.Inputs = []anthropic.BetaDreamInputUnionParam{store, store, sessions}
		},
		"no sessions input": func(p *anthropic.BetaDreamNewParams) { p.Inputs = []anthropic.BetaDreamInputUnionParam{store} },
		"instructions too long": func(p *anthropic.BetaDreamNewParams) {
			p.Instructions = anthropic.String(strings.Repeat("x", 4097))
		},
		"unknown store": func(p *anthropic.BetaDreamNewParams) {
			p.Inputs = []anthropic.BetaDreamInputUnionParam{anthropic.BetaDreamInputParamOfMemoryStore("memstore_000000000000000000000000"), sessions}
		},
		"unknown session": func(p *anthropic.BetaDreamNewParams) {
			p.Inputs = []anthropic.BetaDreamInputUnionParam{store, anthropic.BetaDreamInputParamOfSessions([]string{"sesn_000000000000000000000000"})}
		},
		"update_existing of another store": func(p *anthropic.BetaDreamNewParams) {
			p.OutputBehavior = anthropic.BetaOutputBehaviorParamOfUpdateExisting("memstore_000000000000000000000000")
		},
		"fast model": func(p *anthropic.BetaDreamNewParams) {
			p.Model = anthropic.BetaDreamNewParamsModelUnion{OfBetaDreamModelConfig: &anthropic.BetaDreamModelConfigParam{ID: "fake", Speed: "fast"}}
		},
	}
	for name, mutate := range cases {
		p := dreamParams(f.store.ID, sid, "reorganise")
		mutate(&p)
		_, err := e.client.Beta.Dreams.New(ctx, p)
		t.Run(name, func(t *testing.T) { wantAPIError(t, err, 400) })
	}
	_, err := e.client.Beta.Dreams.Get(ctx, "drm_000000000000000000000000", anthropic.BetaDreamGetParams{})
	wantAPIError(t, err, 404)
}

// TestDreamUpdateExisting: an update_existing dream writes into the input
// store itself.
func TestDreamUpdateExisting(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	f := newMemoryFixture(t, e, nil)
	sid := talkedSession(t, f)
	p := dreamParams(f.store.ID, sid, strings.Join([]string{
		`#tool write {"file_path": "` + dreamOutputMount + `/prefs.md", "content": "drinks: tea, always\n"}`,
		`#reply Done.`}, "\n"))
	p.OutputBehavior = anthropic.BetaOutputBehaviorParamOfUpdateExisting(f.store.ID)
	d, err := e.client.Beta.Dreams.New(context.Background(), p)
	if err != nil {
		t.Fatalf("create dream: %v", err)
	}
	if len(d.Outputs) != 1 || d.Outputs[0].MemoryStoreID != f.store.ID || d.OutputBehavior.MemoryStoreID != f.store.ID {
		t.Fatalf("created dream = %s; want the input store as its output", d.RawJSON())
	}
	waitDream(t, e, d.ID, anthropic.BetaDreamStatusCompleted)
	if got, _ := storeMemory(t, e, f.store.ID, "/prefs.md"); got != "drinks: tea, always\n" {
		t.Errorf("input store /prefs.md = %q; want the dream's rewrite", got)
	}
}
