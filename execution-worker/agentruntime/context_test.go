package agentruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/tools"
)

// memStore is an in-memory agentruntime.Store and ContextStore, keyed like
// the ControlPlane: a key stored twice keeps the first write.
type memStore struct {
	mu         sync.Mutex
	eventIDs   map[string]string
	events     []agentruntime.NewEvent
	keys       []string
	transcript map[string]agentruntime.TranscriptMessage
	journal    map[string]tools.Result
	snapshots  []*agentruntime.ContextSnapshot
	// crashOnSummary, when > 0, fails the n-th snapshot save that carries
	// a summary (after the summary call, before anything is stored), like
	// a worker dying mid-compaction.
	crashOnSummary int
	// crashAfterSummary, when > 0, stores the n-th snapshot that carries a
	// summary and then fails, like a worker dying right after the commit.
	crashAfterSummary int
	summarySaves      int
	crashes           int
	snapshotsAtCrash  int
}

var errCrash = errors.New("simulated worker crash before the snapshot commit")

func newMemStore() *memStore {
	return &memStore{eventIDs: map[string]string{}, transcript: map[string]agentruntime.TranscriptMessage{}, journal: map[string]tools.Result{}}
}

func (s *memStore) appendLocked(evs []agentruntime.NewEvent) []string {
	var ids []string
	for _, e := range evs {
		id, ok := s.eventIDs[e.Key]
		if !ok {
			id = fmt.Sprintf("sevt_%d", len(s.events))
			s.eventIDs[e.Key] = id
			s.events = append(s.events, e)
		}
		ids = append(ids, id)
	}
	return ids
}

func (s *memStore) recordLocked(ms []agentruntime.TranscriptMessage) {
	for _, m := range ms {
		if _, ok := s.transcript[m.Key]; ok {
			continue
		}
		// Stored as JSON, like the ControlPlane does.
		b, _ := json.Marshal(m.Msg)
		var back model.Message
		_ = json.Unmarshal(b, &back)
		m.Msg = back
		s.transcript[m.Key] = m
		s.keys = append(s.keys, m.Key)
	}
}

func (s *memStore) AppendEvents(_ context.Context, evs []agentruntime.NewEvent) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendLocked(evs), nil
}

func (s *memStore) AppendEvent(_ context.Context, e agentruntime.NewEvent) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, existed := s.eventIDs[e.Key]
	return s.appendLocked([]agentruntime.NewEvent{e})[0], existed, nil
}

func (s *memStore) AppendWithTranscript(_ context.Context, ms []agentruntime.TranscriptMessage, evs []agentruntime.NewEvent) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked(ms)
	return s.appendLocked(evs), nil
}

func (s *memStore) RecordMessage(_ context.Context, key string, msg model.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked([]agentruntime.TranscriptMessage{{Key: key, Msg: msg}})
	return nil
}

func (s *memStore) ToolResult(_ context.Context, id string) (*tools.Result, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.journal[id]
	return &r, ok, nil
}

func (s *memStore) RecordToolResult(_ context.Context, id string, r tools.Result) (tools.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.journal[id]; ok {
		return old, nil
	}
	s.journal[id] = r
	return r, nil
}

func (s *memStore) MarkStarted(_ context.Context, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.journal[key]; ok {
		return false, nil
	}
	s.journal[key] = tools.Result{Content: "started"}
	return true, nil
}

func (s *memStore) SaveContextSnapshot(_ context.Context, snap *agentruntime.ContextSnapshot, evs []agentruntime.NewEvent) (*agentruntime.ContextSnapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	summary := false
	for _, e := range evs {
		if e.Type == "span.model_request_end" {
			summary = true
			s.summarySaves++
			if s.summarySaves == s.crashOnSummary {
				s.crashes++
				s.snapshotsAtCrash = len(s.snapshots)
				return nil, errCrash
			}
			break
		}
	}
	for _, old := range s.snapshots {
		if old.Key == snap.Key {
			return old, nil
		}
	}
	b, _ := json.Marshal(snap)
	var stored agentruntime.ContextSnapshot
	_ = json.Unmarshal(b, &stored)
	s.snapshots = append(s.snapshots, &stored)
	s.appendLocked(evs)
	if summary && s.summarySaves == s.crashAfterSummary {
		s.crashes++
		s.snapshotsAtCrash = len(s.snapshots)
		return nil, errCrash
	}
	return &stored, nil
}

// lastSaveLost reports whether the last crash lost its snapshot.
func (s *memStore) lastSaveLost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.summarySaves == s.crashOnSummary
}

// load is what RunTurn gets from the ControlPlane: the conversation, the
// anchor of its newest assistant message and the latest snapshot.
func (s *memStore) load() ([]model.Message, []string, *agentruntime.Anchor, *agentruntime.ContextSnapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var conv []model.Message
	var anchor *agentruntime.Anchor
	for i, k := range s.keys {
		m := s.transcript[k]
		conv = append(conv, m.Msg)
		if m.Anchor != nil {
			a := *m.Anchor
			a.Index = i
			anchor = &a
		}
	}
	var snap *agentruntime.ContextSnapshot
	if n := len(s.snapshots); n > 0 {
		snap = s.snapshots[n-1]
	}
	return conv, append([]string(nil), s.keys...), anchor, snap
}

// usage sums the usage of the committed span ends.
func (s *memStore) usage(t *testing.T) model.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var u model.Usage
	for _, e := range s.events {
		if e.Type != "span.model_request_end" {
			continue
		}
		b, _ := json.Marshal(e.Body)
		var body struct {
			ModelUsage model.Usage `json:"model_usage"`
		}
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		u = addUsage(u, body.ModelUsage)
	}
	return u
}

func (s *memStore) count(typ string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func addUsage(a, b model.Usage) model.Usage {
	return model.Usage{InputTokens: a.InputTokens + b.InputTokens, OutputTokens: a.OutputTokens + b.OutputTokens,
		CacheReadInputTokens: a.CacheReadInputTokens + b.CacheReadInputTokens, CacheCreationInputTokens: a.CacheCreationInputTokens + b.CacheCreationInputTokens}
}

// bashSandbox is a local sandbox for session and the bashToolset tools.
func bashSandbox(t *testing.T, session string) (sandbox.Sandbox, *agentruntime.ToolConfig) {
	t.Helper()
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), Installation: "agentruntime-test"})
	if err != nil {
		t.Fatal(err)
	}
	box, _, err := p.Create(t.Context(), session, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := agentruntime.ParseToolConfig(json.RawMessage(bashToolset))
	if err != nil {
		t.Fatal(err)
	}
	return box, tc
}

const bashToolset = `[{"type":"agent_toolset_20260401","default_config":{"enabled":true,"permission_policy":{"type":"always_allow"}},"configs":[{"name":"bash","enabled":true,"permission_policy":{"type":"always_allow"}}]}]`

// harness drives turns like RunTurn does, over a memStore.
type harness struct {
	t     *testing.T
	store *memStore
	core  *agentruntime.Core
	fake  *modelfake.Client
	sb    func(ctx context.Context) (sandbox.Sandbox, error)
	tools *agentruntime.ToolConfig
	agent *agentruntime.Agent

	mu       sync.Mutex
	calls    int
	largest  int64
	observed model.Usage
	last     model.Usage
	// lost is the usage of calls whose commit the simulated crash lost.
	lost model.Usage
}

func newHarness(t *testing.T, window int) *harness {
	t.Helper()
	box, tc := bashSandbox(t, "sess_context")
	h := &harness{t: t, store: newMemStore(), fake: modelfake.New(), tools: tc,
		sb:    func(context.Context) (sandbox.Sandbox, error) { return box, nil },
		agent: &agentruntime.Agent{ID: "agent_1", System: "You are a test agent."}}
	h.agent.Model.ID = "mango-fake"
	h.fake.SetObserver(func(c modelfake.Call) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls++
		h.largest = max(h.largest, c.EstimatedInputTokens)
		h.observed = addUsage(h.observed, c.Response.Usage)
		h.last = c.Response.Usage
		// The input must leave room for the request's max_tokens.
		if limit := int64(window - c.Request.MaxTokens); c.EstimatedInputTokens > limit {
			t.Errorf("call %d: request of %d estimated tokens, over the %d the %d-token window leaves for input", h.calls, c.EstimatedInputTokens, limit, window)
		}
	})
	h.core = &agentruntime.Core{Model: h.fake, Store: h.store, Context: agentruntime.ContextConfig{Window: window}}
	return h
}

// turn runs turn i with the user text, retrying once after a simulated
// crash as a new RunTurn attempt would.
func (h *harness) turn(i int, text string) *agentruntime.Result {
	h.t.Helper()
	for attempt := 0; ; attempt++ {
		conv, keys, anchor, snap := h.store.load()
		turnKey := fmt.Sprintf("sevt_turn%04d", i)
		var unsaved []agentruntime.TranscriptMessage
		first := turnKey + "/0"
		turnMessages := 0
		for _, k := range keys {
			if strings.HasPrefix(k, turnKey+"/") {
				turnMessages++
			}
		}
		if !containsKey(keys, first) {
			msg := model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: text}}}
			unsaved = append(unsaved, agentruntime.TranscriptMessage{Key: first, Msg: msg})
			conv = append(conv, msg)
			turnMessages++
		}
		res, err := h.core.Run(h.t.Context(), &agentruntime.Run{TurnKey: turnKey, Agent: h.agent, Tools: h.tools,
			Conversation: conv, TurnMessages: turnMessages, Sandbox: h.sb, Unsaved: unsaved, Snapshot: snap, Anchor: anchor})
		if errors.Is(err, errCrash) && attempt == 0 {
			if h.store.lastSaveLost() {
				// The summary call, the last one made, was never committed.
				h.mu.Lock()
				h.lost = addUsage(h.lost, h.last)
				h.mu.Unlock()
			}
			continue
		}
		if err != nil {
			h.t.Fatalf("turn %d attempt %d: %v", i, attempt, err)
		}
		return res
	}
}

func containsKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// A long session of one-tool turns with 20 KB results against a
// 50,000-token window keeps working, never sends a request over the
// window, compacts the same way when a worker dies mid-compaction, and the
// usage committed adds up to what the model reported.
func TestLongSessionCompaction(t *testing.T) {
	t.Parallel()
	const turns, window = 300, 50_000
	// run runs the session; with crashes it stops 10 turns after the
	// last one (the rest of the run would repeat the plain run).
	run := func(t *testing.T, crashOnSummary, crashAfterSummary int) (*harness, time.Duration) {
		h := newHarness(t, window)
		h.store.crashOnSummary, h.store.crashAfterSummary = crashOnSummary, crashAfterSummary
		start := time.Now()
		lastCrash := -1
		for i := range turns {
			if h.store.crashes == 2 && lastCrash < 0 {
				lastCrash = i
			}
			if lastCrash >= 0 && i > lastCrash+10 {
				break
			}
			res := h.turn(i, fmt.Sprintf("turn %d\n#tool bash {\"command\": \"head -c 20000 /dev/zero | tr '\\\\0' a\"}", i))
			if res.Outcome != agentruntime.OutcomeEndTurn {
				t.Fatalf("turn %d ended %s (%s), want end_turn", i, res.Outcome, res.Detail)
			}
		}
		return h, time.Since(start)
	}
	var plain, crashed *harness
	var took time.Duration
	t.Run("runs", func(t *testing.T) {
		t.Run("plain", func(t *testing.T) {
			t.Parallel()
			plain, took = run(t, 0, 0)
		})
		t.Run("crashes before and after a snapshot commit", func(t *testing.T) {
			t.Parallel()
			crashed, _ = run(t, 2, 5)
		})
	})
	if t.Failed() {
		return
	}

	if crashed.store.crashes != 2 {
		t.Fatalf("simulated %d crashes, want 2", crashed.store.crashes)
	}
	summaries := 0
	for _, s := range plain.store.snapshots {
		if len(s.Messages) > 0 && strings.HasPrefix(s.Messages[0].Content[0].Text, "<context_summary>") {
			summaries++
		}
	}
	if summaries < 2 || len(plain.store.snapshots) < 10 {
		t.Fatalf("%d snapshots, %d with a summary; want at least 10 and 2", len(plain.store.snapshots), summaries)
	}
	if got := plain.store.count("agent.thread_context_compacted"); got != len(plain.store.snapshots) {
		t.Errorf("%d agent.thread_context_compacted events, want one per snapshot (%d)", got, len(plain.store.snapshots))
	}
	// Determinism: the crashed run's snapshots and transcript equal the
	// plain run's, including snapshots made after the crashes.
	if n := len(crashed.store.snapshots); n > len(plain.store.snapshots) || n <= crashed.store.snapshotsAtCrash {
		t.Fatalf("crashed run has %d snapshots (%d at its last crash), plain run %d; want more than at the crash and at most the plain run's",
			n, crashed.store.snapshotsAtCrash, len(plain.store.snapshots))
	}
	for i := range crashed.store.snapshots {
		if !reflect.DeepEqual(plain.store.snapshots[i], crashed.store.snapshots[i]) {
			t.Fatalf("snapshot %d differs after the crash: %s vs %s", i, plain.store.snapshots[i].Key, crashed.store.snapshots[i].Key)
		}
	}
	pc, _, _, _ := plain.store.load()
	cc, _, _, _ := crashed.store.load()
	if len(cc) > len(pc) || !reflect.DeepEqual(pc[:len(cc)], cc) {
		t.Error("the transcript of the crashed run is not a prefix of the plain run's")
	}
	// The lossless transcript keeps every tool result whole.
	big := 0
	for _, m := range pc {
		for _, b := range m.Content {
			if b.Type == "tool_result" && len(b.Content) >= 20_000 {
				big++
			}
		}
	}
	if big != turns {
		t.Errorf("transcript holds %d whole 20 KB tool results, want %d", big, turns)
	}
	// Usage adds up: what was committed is what the model reported, less
	// the call whose commit the crash lost.
	if got := plain.store.usage(t); got != plain.observed {
		t.Errorf("committed usage %+v, want the model's %+v", got, plain.observed)
	}
	if got, want := crashed.store.usage(t), crashed.observed; addUsage(got, crashed.lost) != want {
		t.Errorf("crashed run: committed usage %+v + lost %+v, want the model's %+v", got, crashed.lost, want)
	}
	t.Logf("crashed run: %d turns, %d snapshots", len(cc)/4, len(crashed.store.snapshots))
	t.Logf("%d turns: %d model calls, %d compactions (%d with a summary), largest request %d estimated tokens of %d, %v",
		turns, plain.calls, len(plain.store.snapshots), summaries, plain.largest, window, took)
}

// A request that still does not fit after compaction ends the turn with
// OutcomeContextWindow after one model call, instead of looping.
func TestOverWindowEndsTurn(t *testing.T) {
	t.Parallel()
	// 12,000 tokens less 8,192 of output leave 3,808 for input; the tool
	// result alone needs 5,000.
	h := newHarness(t, 12_000)
	res := h.turn(0, "#tool bash {\"command\": \"head -c 20000 /dev/zero | tr '\\\\0' a\"}")
	if res.Outcome != agentruntime.OutcomeContextWindow {
		t.Fatalf("outcome %s, want %s", res.Outcome, agentruntime.OutcomeContextWindow)
	}
	if !strings.Contains(res.Detail, "context window") {
		t.Errorf("detail %q, want it to name the context window", res.Detail)
	}
	if h.calls != 1 {
		t.Errorf("%d model calls, want 1 (the tool round; none over the window)", h.calls)
	}
	// The tool result is in the transcript: the turn's work is kept.
	conv, _, _, _ := h.store.load()
	if len(conv) != 3 {
		t.Errorf("transcript has %d messages, want 3 (user, tool use, tool result)", len(conv))
	}
}

func TestProfileFor(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]int{
		"claude-sonnet-4-5-20250929": 64_000,
		"claude-opus-4-1":            32_000,
		"claude-opus-4-5":            64_000,
		"claude-3-haiku-20240307":    4_096,
		"mango-fake":                 agentruntime.DefaultContextProfile.MaxOutput,
	} {
		if got := agentruntime.ProfileFor(id).MaxOutput; got != want {
			t.Errorf("ProfileFor(%q).MaxOutput = %d, want %d", id, got, want)
		}
	}
	if w := agentruntime.ProfileFor("unknown-model").Window; w != agentruntime.DefaultContextProfile.Window || w > 200_000 {
		t.Errorf("unknown model window %d, want the default %d", w, agentruntime.DefaultContextProfile.Window)
	}
}

// A request never asks for more output than the model's profile allows.
func TestMaxTokensFromProfile(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]int{"claude-3-haiku-20240307": 4_096, "claude-sonnet-4-5": 8_192, "mango-fake": 8_192} {
		h := newHarness(t, 0)
		h.agent.Model.ID = id
		var got int
		h.fake.SetObserver(func(c modelfake.Call) { got = c.Request.MaxTokens })
		if res := h.turn(0, "#reply hi"); res.Outcome != agentruntime.OutcomeEndTurn {
			t.Fatalf("%s: outcome %s", id, res.Outcome)
		}
		if got != want {
			t.Errorf("%s: max_tokens %d, want %d", id, got, want)
		}
	}
}

// A turn whose own rounds outgrow the window continues: the results of its
// earlier rounds are stubbed, the turns before it are summarized once, and
// the summary alone is never summarized again at every round.
func TestLongTurnAfterSummary(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 20_000)
	long := strings.Repeat("lorem ipsum ", 700) // 8,400 bytes, echoed back
	for i := range 4 {
		if res := h.turn(i, fmt.Sprintf("turn %d %s", i, long)); res.Outcome != agentruntime.OutcomeEndTurn {
			t.Fatalf("turn %d: %s (%s)", i, res.Outcome, res.Detail)
		}
	}
	summaries := func() int {
		h.store.mu.Lock()
		defer h.store.mu.Unlock()
		n := 0
		for _, e := range h.store.events {
			if e.Type == "span.model_request_start" && strings.HasPrefix(e.Key, "context/") {
				n++
			}
		}
		return n
	}
	if n := summaries(); n != 1 {
		t.Fatalf("%d summary calls in the long-text turns, want 1", n)
	}
	// 20 KB of text and three rounds of 20 KB results: after two
	// summaries only stubs can help, and the rest fits the input limit.
	tool := "\n#tool bash {\"command\": \"head -c 20000 /dev/zero | tr '\\\\0' a\"}"
	res := h.turn(4, "turn 4 "+strings.Repeat("lorem ipsum ", 1700)+strings.Repeat(tool, 3))
	if res.Outcome != agentruntime.OutcomeEndTurn {
		t.Fatalf("long turn: %s (%s)", res.Outcome, res.Detail)
	}
	if n := summaries(); n != 3 {
		t.Errorf("%d summary calls in all, want 3 (two more at the long turn's first rounds; never the summary alone)", n)
	}
	if n := len(h.store.snapshots); n < 3 {
		t.Errorf("%d snapshots, want at least 3 (rounds 2 and 3 stub the results before them)", n)
	}
}
