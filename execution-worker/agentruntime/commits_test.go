package agentruntime_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/sandbox"
)

// commitStore is a memStore recording the event types of each commit.
type commitStore struct {
	*memStore
	cmu     sync.Mutex
	commits [][]string
}

func (s *commitStore) record(evs []agentruntime.NewEvent) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	s.commits = append(s.commits, types)
}

func (s *commitStore) AppendEvents(ctx context.Context, evs []agentruntime.NewEvent) ([]string, error) {
	s.record(evs)
	return s.memStore.AppendEvents(ctx, evs)
}

func (s *commitStore) AppendEvent(ctx context.Context, e agentruntime.NewEvent) (string, bool, error) {
	s.record([]agentruntime.NewEvent{e})
	return s.memStore.AppendEvent(ctx, e)
}

func (s *commitStore) AppendWithTranscript(ctx context.Context, ms []agentruntime.TranscriptMessage, evs []agentruntime.NewEvent) ([]string, error) {
	s.record(evs)
	return s.memStore.AppendWithTranscript(ctx, ms, evs)
}

// runCommits runs one turn of text on a local sandbox and returns the
// store.
func runCommits(t *testing.T, text string) (*commitStore, *agentruntime.Result) {
	t.Helper()
	return runCommitsWith(t, text, false)
}

// runCommitsWith is runCommits with Core.HoldLast set as asked.
func runCommitsWith(t *testing.T, text string, holdLast bool) (*commitStore, *agentruntime.Result) {
	t.Helper()
	box, tc := bashSandbox(t, "sess_commits")
	store := &commitStore{memStore: newMemStore()}
	core := &agentruntime.Core{Model: modelfake.New(), Store: store, HoldLast: holdLast}
	agent := &agentruntime.Agent{ID: "agent_1"}
	agent.Model.ID = "claude-sonnet-4-5"
	msg := model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: text}}}
	res, err := core.Run(t.Context(), &agentruntime.Run{TurnKey: "sevt_t", SessionID: "sess_commits", Agent: agent, Tools: tc,
		Conversation: []model.Message{msg}, TurnMessages: 1, Unsaved: []agentruntime.TranscriptMessage{{Key: "sevt_t/0", Msg: msg}},
		Sandbox: func(context.Context) (sandbox.Sandbox, error) { return box, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return store, res
}

func types(evs []agentruntime.NewEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// TestToolResultRidesOnNextCommit: tool uses are committed with their
// model message and a round's last tool result with the next model
// request's span start (two round trips fewer per tool round); earlier
// results of a parallel round go before the next tool runs, and the log
// keeps its order: the round's uses, their results, the next request.
func TestToolResultRidesOnNextCommit(t *testing.T) {
	t.Parallel()
	store, res := runCommits(t, `#tool bash {"command":"echo one"}`)
	if res.Outcome != agentruntime.OutcomeEndTurn {
		t.Fatalf("outcome %s", res.Outcome)
	}
	if !slices.ContainsFunc(store.commits, func(c []string) bool {
		return slices.Equal(c, []string{"agent.tool_result", "span.model_request_start"})
	}) {
		t.Errorf("commits %v: want the tool result committed with the next span start", store.commits)
	}
	if !slices.ContainsFunc(store.commits, func(c []string) bool {
		return slices.Equal(c, []string{"span.model_request_end", "agent.tool_use"})
	}) {
		t.Errorf("commits %v: want the tool use committed with its model message", store.commits)
	}
	want := []string{"span.model_request_start", "span.model_request_end", "agent.tool_use", "agent.tool_result",
		"span.model_request_start", "agent.message", "span.model_request_end"}
	if got := types(store.events); !slices.Equal(got, want) {
		t.Errorf("log %v, want %v", got, want)
	}
	if n := len(store.commits); n != 4 {
		t.Errorf("%d commits %v; want 4 (span start; model message with the tool use; tool result with the next span start; final message), 6 before uses and results rode along", n, store.commits)
	}

	store, _ = runCommits(t, "#parallel\n#tool bash {\"command\":\"echo a\"}\n#tool bash {\"command\":\"echo b\"}")
	got := strings.Join(types(store.events), " ")
	if !strings.Contains(got, "span.model_request_end agent.tool_use agent.tool_use agent.tool_result agent.tool_result span.model_request_start") {
		t.Errorf("parallel round log %q: want both uses with their message, the results in order, then the next request", got)
	}
}

// TestPendingResultCommittedWhenTheTurnEnds: a tool result held for the
// next commit is committed when the turn ends without another request
// (here: the round limit).
func TestPendingResultCommittedWhenTheTurnEnds(t *testing.T) {
	t.Parallel()
	store, res := runCommits(t, "#loop")
	if res.Outcome != agentruntime.OutcomeRoundLimit {
		t.Fatalf("outcome %s, want the round limit", res.Outcome)
	}
	evs := types(store.events)
	uses, results := 0, 0
	for _, e := range evs {
		switch e {
		case "agent.tool_use":
			uses++
		case "agent.tool_result":
			results++
		}
	}
	if uses == 0 || uses != results || evs[len(evs)-1] != "agent.tool_result" {
		t.Errorf("%d uses, %d results, last event %s: want every result committed, the last one too", uses, results, evs[len(evs)-1])
	}
}

// TestHoldLastLeavesTheFinalCommitToTheCaller: with HoldLast the model's
// final response (the message and its span end, and its transcript
// message) is not committed by the runtime but returned in Result.Last,
// for the caller to commit with the turn's end; responses with tool uses
// are committed as before, and without HoldLast nothing is held.
func TestHoldLastLeavesTheFinalCommitToTheCaller(t *testing.T) {
	t.Parallel()
	store, res := runCommitsWith(t, `#tool bash {"command":"echo one"}`, true)
	if res.Outcome != agentruntime.OutcomeEndTurn {
		t.Fatalf("outcome %s", res.Outcome)
	}
	if n := len(store.commits); n != 3 {
		t.Errorf("%d commits %v; want 3 (the final message held)", n, store.commits)
	}
	want := []string{"span.model_request_start", "span.model_request_end", "agent.tool_use", "agent.tool_result", "span.model_request_start"}
	if got := types(store.events); !slices.Equal(got, want) {
		t.Errorf("committed %v, want %v", got, want)
	}
	if res.Last == nil {
		t.Fatal("Result.Last is nil: want the final response held")
	}
	if got := types(res.Last.Events); !slices.Equal(got, []string{"agent.message", "span.model_request_end"}) {
		t.Errorf("held events %v, want the final message and its span end", got)
	}
	if len(res.Last.Transcript) != 1 || res.Last.Transcript[0].Msg.Role != "assistant" || res.Last.Transcript[0].Anchor == nil {
		t.Errorf("held transcript %+v, want the final assistant message with its anchor", res.Last.Transcript)
	}
	for _, m := range res.Last.Transcript {
		store.mu.Lock()
		_, stored := store.transcript[m.Key]
		store.mu.Unlock()
		if stored {
			t.Errorf("held transcript message %s was stored too", m.Key)
		}
	}

	store, res = runCommitsWith(t, `#tool bash {"command":"echo one"}`, false)
	if res.Last != nil || len(store.commits) != 4 {
		t.Errorf("without HoldLast: Last %+v, %d commits; want nil and 4", res.Last, len(store.commits))
	}
}
