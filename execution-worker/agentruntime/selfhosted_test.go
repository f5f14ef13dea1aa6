package agentruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/tools"
)

// fakeAwaiter is an agentruntime.ToolResults: answer, when set, answers
// every call at once; otherwise a call blocks until its context ends. It
// records the tool_use event ids it was asked about and announces each
// call on waiting.
type fakeAwaiter struct {
	answer  *tools.Result
	waiting chan string

	mu    sync.Mutex
	asked []string
}

func (f *fakeAwaiter) Await(ctx context.Context, useEventID string) (tools.Result, error) {
	f.mu.Lock()
	f.asked = append(f.asked, useEventID)
	f.mu.Unlock()
	if f.answer != nil {
		return *f.answer, nil
	}
	if f.waiting != nil {
		f.waiting <- useEventID
	}
	<-ctx.Done()
	return tools.Result{}, ctx.Err()
}

func (f *fakeAwaiter) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// selfHostedTurn drives the turns of a self-hosted session over a
// memStore: the session has no sandbox (any use of it fails the test).
type selfHostedTurn struct {
	t     *testing.T
	store *memStore
	tools *agentruntime.ToolConfig
}

func newSelfHostedTurn(t *testing.T, policy string) *selfHostedTurn {
	t.Helper()
	tc, err := agentruntime.ParseToolConfig(json.RawMessage(strings.ReplaceAll(bashToolset, "always_allow", policy)))
	if err != nil {
		t.Fatal(err)
	}
	return &selfHostedTurn{t: t, store: newMemStore(), tools: tc}
}

// attempt runs an attempt of the turn whose user says text, from what
// the store holds (as RunTurn does), with the awaiter and the approved
// tool_use event ids.
func (h *selfHostedTurn) attempt(ctx context.Context, text string, aw agentruntime.ToolResults, approved map[string]bool) (*agentruntime.Result, error) {
	agent := &agentruntime.Agent{ID: "agent_1"}
	agent.Model.ID = "claude-sonnet-4-5"
	conv, keys, _, _ := h.store.load()
	run := &agentruntime.Run{TurnKey: "sevt_t", SessionID: "sess_sh", Agent: agent, Tools: h.tools, ToolResults: aw,
		Approved: approved, Conversation: conv, TurnMessages: len(keys),
		Sandbox: func(context.Context) (sandbox.Sandbox, error) {
			h.t.Error("a self-hosted session's turn asked for a sandbox")
			return nil, errors.New("no sandbox")
		}}
	if len(keys) == 0 {
		msg := model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: text}}}
		run.Conversation, run.TurnMessages = []model.Message{msg}, 1
		run.Unsaved = []agentruntime.TranscriptMessage{{Key: "sevt_t/0", Msg: msg}}
	}
	return (&agentruntime.Core{Model: modelfake.New(), Store: h.store}).Run(ctx, run)
}

// useID is the id of the turn's (only) agent.tool_use event.
func (h *selfHostedTurn) useID() string {
	h.t.Helper()
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	for _, e := range h.store.events {
		if e.Type == "agent.tool_use" {
			return h.store.eventIDs[e.Key]
		}
	}
	h.t.Fatal("no agent.tool_use event was committed")
	return ""
}

// modelResult is the tool_result the model was given, as text.
func (h *selfHostedTurn) modelResult() (text string, isError bool) {
	h.t.Helper()
	conv, _, _, _ := h.store.load()
	for _, m := range conv {
		for _, b := range m.Content {
			if b.Type == "tool_result" {
				return model.ResultText(b.Content), b.IsError
			}
		}
	}
	h.t.Fatal("the transcript has no tool_result")
	return "", false
}

const selfHostedBash = `#tool bash {"command":"echo hi"}`

// TestSelfHostedToolCallAwaitsTheClientsAnswer: a built-in call of a
// self-hosted session is announced (with its evaluated permission) and
// answered by the client's worker, through ToolResults, asked with the
// tool_use event's id: the model gets the answer (an error result when the
// control plane timed the call out), the journal records it, no sandbox is
// used, and the runtime appends no agent.tool_result (the answer event is
// already in the session's log).
func TestSelfHostedToolCallAwaitsTheClientsAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer tools.Result
	}{
		{"answer", tools.Result{Content: "hi from the client's worker"}},
		{"timeout", tools.Result{Content: "no self-hosted worker returned a result for this bash call within 2m0s", IsError: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newSelfHostedTurn(t, "always_allow")
			aw := &fakeAwaiter{answer: &tc.answer}
			res, err := h.attempt(t.Context(), selfHostedBash, aw, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != agentruntime.OutcomeEndTurn {
				t.Fatalf("outcome %s, want end_turn", res.Outcome)
			}
			id := h.useID()
			if got := aw.calls(); !slices.Equal(got, []string{id}) {
				t.Errorf("awaited %v, want once for the tool_use event %s", got, id)
			}
			if text, isErr := h.modelResult(); text != tc.answer.Content || isErr != tc.answer.IsError {
				t.Errorf("model got result %q (is_error %v), want %q (is_error %v)", text, isErr, tc.answer.Content, tc.answer.IsError)
			}
			if r, ok, _ := h.store.ToolResult(t.Context(), id); !ok || r.Content != tc.answer.Content {
				t.Errorf("journal of %s: %+v (found %v), want the answer", id, r, ok)
			}
			if n := h.store.count("agent.tool_result"); n != 0 {
				t.Errorf("%d agent.tool_result events appended, want none", n)
			}
			h.store.mu.Lock()
			defer h.store.mu.Unlock()
			for _, e := range h.store.events {
				if e.Type == "agent.tool_use" {
					if p := e.Body.(map[string]any)["evaluated_permission"]; p != "allow" {
						t.Errorf("agent.tool_use evaluated_permission %v, want allow", p)
					}
				}
			}
		})
	}
}

// TestSelfHostedInterruptWhileAwaiting: an interrupt (the run's context
// cancelled) while the turn waits for the client's answer ends the run
// with the cancellation, journals nothing and appends no result; the next
// attempt waits for the same call again (never reporting it ambiguous)
// and takes the answer.
func TestSelfHostedInterruptWhileAwaiting(t *testing.T) {
	t.Parallel()
	h := newSelfHostedTurn(t, "always_allow")
	ctx, cancel := context.WithCancel(t.Context())
	waiting := &fakeAwaiter{waiting: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		_, err := h.attempt(ctx, selfHostedBash, waiting, nil)
		done <- err
	}()
	var id string
	select {
	case id = <-waiting.waiting:
	case err := <-done:
		t.Fatalf("the run ended (%v) without waiting for the client's answer", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v, want context.Canceled", err)
	}
	if _, ok, _ := h.store.ToolResult(t.Context(), id); ok {
		t.Error("the interrupted call has a journaled result")
	}
	if n := h.store.count("agent.tool_result"); n != 0 {
		t.Errorf("%d agent.tool_result events appended, want none", n)
	}

	aw := &fakeAwaiter{answer: &tools.Result{Content: "late answer"}}
	if _, err := h.attempt(t.Context(), selfHostedBash, aw, nil); err != nil {
		t.Fatal(err)
	}
	if got := aw.calls(); !slices.Equal(got, []string{id}) {
		t.Errorf("the next attempt awaited %v, want %s again", got, id)
	}
	if text, _ := h.modelResult(); text != "late answer" {
		t.Errorf("model got %q, want the answer", text)
	}
}

// TestSelfHostedAlwaysAsk: an always_ask call parks the turn for the
// client's confirmation without waiting for a result (its tool_use says
// evaluated_permission ask); once allowed, the resumed turn waits for the
// client's answer; once denied, it does not wait and reports the denial
// itself (no answer event exists for a call the client's worker never
// runs).
func TestSelfHostedAlwaysAsk(t *testing.T) {
	t.Parallel()
	for _, allow := range []bool{true, false} {
		name := map[bool]string{true: "allow", false: "deny"}[allow]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newSelfHostedTurn(t, "always_ask")
			aw := &fakeAwaiter{answer: &tools.Result{Content: "ran after approval"}}
			res, err := h.attempt(t.Context(), selfHostedBash, aw, nil)
			if err != nil {
				t.Fatal(err)
			}
			id := h.useID()
			if res.Outcome != agentruntime.OutcomeRequiresAction || !slices.Equal(res.RequiredEventIDs, []string{id}) {
				t.Fatalf("outcome %s requiring %v, want requires_action for %s", res.Outcome, res.RequiredEventIDs, id)
			}
			if got := aw.calls(); len(got) != 0 {
				t.Fatalf("awaited %v before the confirmation", got)
			}
			approved := map[string]bool{id: true}
			want, wantEvents := "ran after approval", 0
			if !allow {
				denial, _, _, err := agentruntime.Answer("user.tool_confirmation", json.RawMessage(`{"result":"deny"}`))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.store.RecordToolResult(t.Context(), id, denial); err != nil {
					t.Fatal(err)
				}
				approved, want, wantEvents = nil, denial.Content, 1
			}
			if res, err = h.attempt(t.Context(), selfHostedBash, aw, approved); err != nil {
				t.Fatal(err)
			}
			if res.Outcome != agentruntime.OutcomeEndTurn {
				t.Fatalf("resumed outcome %s, want end_turn", res.Outcome)
			}
			if text, _ := h.modelResult(); text != want {
				t.Errorf("model got %q, want %q", text, want)
			}
			if got, wantAsked := len(aw.calls()), map[bool]int{true: 1, false: 0}[allow]; got != wantAsked {
				t.Errorf("awaited %d times, want %d", got, wantAsked)
			}
			if n := h.store.count("agent.tool_result"); n != wantEvents {
				t.Errorf("%d agent.tool_result events, want %d", n, wantEvents)
			}
		})
	}
}

// TestSelfHostedLargeResultIsCut: a client's answer too large for the
// model is cut (the session has no sandbox to spill it to).
func TestSelfHostedLargeResultIsCut(t *testing.T) {
	t.Parallel()
	h := newSelfHostedTurn(t, "always_allow")
	big := strings.Repeat("x", agentruntime.MaxToolResultChars+10)
	if _, err := h.attempt(t.Context(), selfHostedBash, &fakeAwaiter{answer: &tools.Result{Content: big}}, nil); err != nil {
		t.Fatal(err)
	}
	text, _ := h.modelResult()
	if !strings.HasPrefix(text, big[:agentruntime.MaxToolResultChars]) || !strings.Contains(text, "[The result was cut at") || len(text) >= len(big)+100 {
		t.Errorf("model got %d characters ending %q, want the first %d and a note that it was cut", len(text), text[max(0, len(text)-80):], agentruntime.MaxToolResultChars)
	}
}

// TestContentResult: a client's answer content becomes the model's
// result: text blocks joined, other blocks kept as sent.
func TestContentResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, content string
		want          string
		blocks        bool
	}{
		{"empty", `[]`, "", false},
		{"null", `null`, "", false},
		{"text", `[{"type":"text","text":"a"},{"type":"text","text":"b"}]`, "a\nb", false},
		{"image", `[{"type":"text","text":"a"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]`, "a", true},
	} {
		r, err := agentruntime.ContentResult(json.RawMessage(tc.content), true)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.Content != tc.want || (len(r.Blocks) > 0) != tc.blocks || !r.IsError {
			t.Errorf("%s: %+v, want content %q, blocks %v, is_error", tc.name, r, tc.want, tc.blocks)
		}
	}
	if _, err := agentruntime.ContentResult(json.RawMessage(`{"type":"text"}`), false); err == nil {
		t.Error("content that is not an array: no error")
	}
}
