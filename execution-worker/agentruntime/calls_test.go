package agentruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/internal/poll"
)

// errGivenUp stands for Temporal answering an attempt's heartbeat "no
// such attempt": the attempt is abandoned, not asked to stop.
var errGivenUp = errors.New("attempt given up")

// startStore is a memStore that reports each MarkStarted call.
type startStore struct {
	*memStore
	marked chan bool
}

func (s *startStore) MarkStarted(ctx context.Context, key string) (bool, error) {
	first, err := s.memStore.MarkStarted(ctx, key)
	s.marked <- first
	return first, err
}

// A bash call that announces it runs, waits for the test's release, and
// counts its runs.
const heldCommand = `#tool bash {"command":"touch started; while [ ! -e release ]; do sleep 0.01; done; echo ran >> runs; echo finished"}`

// heldTurn is a turn whose bash call holds until the test releases it.
type heldTurn struct {
	t     *testing.T
	box   sandbox.Sandbox
	tools *agentruntime.ToolConfig
	store *startStore
}

func newHeldTurn(t *testing.T) *heldTurn {
	box, tools := bashSandbox(t, "sess_calls")
	return &heldTurn{t: t, box: box, tools: tools, store: &startStore{memStore: newMemStore(), marked: make(chan bool, 4)}}
}

// attempt runs an attempt of the turn from what the store holds, like
// RunTurn does, with the process's calls.
func (h *heldTurn) attempt(ctx context.Context, calls *agentruntime.Calls) (*agentruntime.Result, error) {
	agent := &agentruntime.Agent{ID: "agent_1"}
	agent.Model.ID = "claude-sonnet-4-5"
	conv, keys, _, _ := h.store.load()
	run := &agentruntime.Run{TurnKey: "sevt_t", SessionID: "sess_calls", Agent: agent, Tools: h.tools,
		Sandbox: func(context.Context) (sandbox.Sandbox, error) { return h.box, nil }, Conversation: conv, TurnMessages: len(keys)}
	if len(keys) == 0 {
		msg := model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: heldCommand}}}
		run.Conversation, run.TurnMessages = []model.Message{msg}, 1
		run.Unsaved = []agentruntime.TranscriptMessage{{Key: "sevt_t/0", Msg: msg}}
	}
	core := &agentruntime.Core{Model: modelfake.New(), Store: h.store, Calls: calls}
	return core.Run(ctx, run)
}

// stopMidCall runs a first attempt until its call runs, cancels it with
// cause and returns the attempt's error.
func (h *heldTurn) stopMidCall(calls *agentruntime.Calls, cause error) error {
	ctx, cancel := context.WithCancelCause(h.t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := h.attempt(ctx, calls)
		done <- err
	}()
	if !<-h.store.marked {
		h.t.Fatal("the first attempt found the call started")
	}
	waitFile(h.t, h.box, "started")
	cancel(cause)
	return <-done
}

func (h *heldTurn) release() {
	if err := h.box.WriteFile(h.t.Context(), "release", nil, 0o600); err != nil {
		h.t.Fatal(err)
	}
}

// runs is how many times the call ran to its end.
func (h *heldTurn) runs() int {
	b, _ := h.box.ReadFile(h.t.Context(), "runs")
	return strings.Count(string(b), "ran\n")
}

func newCalls() *agentruntime.Calls {
	return &agentruntime.Calls{Abandoned: func(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errGivenUp) }}
}

// TestAbandonedAttemptLeavesItsToolCallToTheNext: an attempt given up
// while its tool runs (its worker alive) does not take the call down
// with it; the next attempt in the same process takes the call over and
// gets its real result, and the tool runs once. An attempt in another
// process (a worker that died: its Calls are gone) reports the call
// ambiguous instead, as before.
func TestAbandonedAttemptLeavesItsToolCallToTheNext(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		sameProcess   bool
		wantAmbiguous bool
	}{
		{"same process", true, false},
		{"another process", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHeldTurn(t)
			calls := newCalls()
			if err := h.stopMidCall(calls, errGivenUp); !errors.Is(err, errGivenUp) {
				t.Fatalf("first attempt ended with %v, want its cause %v", err, errGivenUp)
			}
			next := calls
			if !tc.sameProcess {
				next = newCalls()
			}
			res := make(chan *agentruntime.Result, 1)
			go func() {
				r, err := h.attempt(t.Context(), next)
				if err != nil {
					t.Error(err)
				}
				res <- r
			}()
			if <-h.store.marked {
				t.Fatal("the second attempt marked the call started again")
			}
			// The call is still held. In the same process the second
			// attempt waits for it, so it is released first; from another
			// process the attempt must decide while the call still runs
			// (released after, else its result may be journaled first and
			// the attempt would rightly find it).
			if tc.sameProcess {
				h.release()
			}
			if r := <-res; r == nil || r.Outcome != agentruntime.OutcomeEndTurn {
				t.Fatalf("second attempt: %+v, want the turn ended", r)
			}
			if !tc.sameProcess {
				h.release()
			}
			result := toolResultText(t, h.store.memStore)
			if got := strings.Contains(result, "may or may not have completed"); got != tc.wantAmbiguous {
				t.Errorf("tool result %q: ambiguous %v, want %v", result, got, tc.wantAmbiguous)
			}
			if !tc.wantAmbiguous && !strings.Contains(result, "finished") {
				t.Errorf("tool result %q, want the call's own output", result)
			}
			waitFile(t, h.box, "runs")
			if n := h.runs(); n != 1 {
				t.Errorf("the call ran %d times, want once", n)
			}
		})
	}
}

// TestStoppedCallsDoNotOutliveTheirAttemptOrWorker: an attempt asked to
// stop (an interrupt, a worker shutting down) cancels its call as before,
// and a worker's Stop cancels the calls abandoned attempts left behind.
func TestStoppedCallsDoNotOutliveTheirAttemptOrWorker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cause error
	}{
		{"interrupted", errors.New("interrupted")},
		{"abandoned, then the worker stops", errGivenUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHeldTurn(t)
			calls := newCalls()
			if err := h.stopMidCall(calls, tc.cause); err == nil {
				t.Fatal("the stopped attempt ended without an error")
			}
			calls.Stop(t.Context())
			// Released now, the call never finishes: it ended already.
			h.release()
			if n := h.runs(); n != 0 {
				t.Errorf("the call ran to its end %d times after it was stopped", n)
			}
		})
	}
}

// toolResultText is the text of the one agent.tool_result committed.
func toolResultText(t *testing.T, s *memStore) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var texts []string
	for _, e := range s.events {
		if e.Type != "agent.tool_result" {
			continue
		}
		raw, _ := json.Marshal(e.Body)
		var body struct{ Content []struct{ Text string } }
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatal(err)
		}
		for _, b := range body.Content {
			texts = append(texts, b.Text)
		}
	}
	if len(texts) != 1 {
		t.Fatalf("tool results %q, want one", texts)
	}
	return texts[0]
}

// waitFile waits until the sandbox has a file at path.
func waitFile(t *testing.T, box sandbox.Sandbox, path string) {
	t.Helper()
	poll.Until(t, 30*time.Second, path+" in the sandbox", func() (bool, string) {
		_, err := box.ReadFile(t.Context(), path)
		return err == nil, fmt.Sprint(err)
	})
}
