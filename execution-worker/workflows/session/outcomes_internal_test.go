package session

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// TestVerdictOf: only a submit_evaluation call with a known result is a
// verdict; an empty explanation is named as such.
func TestVerdictOf(t *testing.T) {
	use := func(name, input string) *model.Response {
		return &model.Response{Content: []model.Block{{Type: "text", Text: "thinking aloud"},
			{Type: "tool_use", Name: name, Input: json.RawMessage(input)}}}
	}
	for _, c := range []struct {
		name string
		resp *model.Response
		want string // result, or "" for errNoVerdict
	}{
		{"satisfied", use(graderTool, `{"result":"satisfied","explanation":"all met"}`), verdictSatisfied},
		{"needs revision", use(graderTool, `{"result":"needs_revision","explanation":"add a title"}`), verdictNeedsRevision},
		{"failed", use(graderTool, `{"result":"failed","explanation":"no report"}`), verdictFailed},
		{"unknown result", use(graderTool, `{"result":"great","explanation":"x"}`), ""},
		{"not the grader's tool", use("bash", `{"command":"ls"}`), ""},
		{"bad input", use(graderTool, `[1]`), ""},
		{"text only", &model.Response{Content: []model.Block{{Type: "text", Text: "satisfied"}}}, ""},
	} {
		v, err := verdictOf(c.resp)
		switch {
		case c.want == "" && !errors.Is(err, errNoVerdict):
			t.Errorf("%s: %+v, %v; want errNoVerdict", c.name, v, err)
		case c.want != "" && (err != nil || v.Result != c.want):
			t.Errorf("%s: %+v, %v; want %s", c.name, v, err, c.want)
		}
	}
	v, err := verdictOf(use(graderTool, `{"result":"satisfied","explanation":" "}`))
	if err != nil || !strings.Contains(v.Explanation, "no explanation") {
		t.Errorf("empty explanation: %+v, %v", v, err)
	}
}

// TestOutcomeMessage: the define event's description, and a verdict's
// explanation with what to do, open the agent's turn; other events are
// not outcome triggers.
func TestOutcomeMessage(t *testing.T) {
	msg, ok, err := outcomeMessage(&pb.Event{Id: "sevt_1", Type: defineOutcomeType,
		Body: `{"outcome_id":"outc_1","description":"Write the report.","rubric":{"type":"text","content":"r"},"max_iterations":3}`})
	if !ok || err != nil || msg.Role != "user" || msg.Content[0].Text != "Write the report." {
		t.Errorf("define: %+v, %v, %v", msg, ok, err)
	}
	msg, ok, err = outcomeMessage(&pb.Event{Id: "sevt_2", Type: evaluationEndType,
		Body: `{"iteration":0,"result":"needs_revision","explanation":"Add a title."}`})
	if text := msg.Content[0].Text; !ok || err != nil || !strings.Contains(text, "Add a title.") || !strings.Contains(text, "Revise") {
		t.Errorf("revision: %q, %v, %v", text, ok, err)
	}
	msg, _, _ = outcomeMessage(&pb.Event{Id: "sevt_3", Type: evaluationEndType,
		Body: `{"iteration":2,"result":"max_iterations_reached","explanation":"Still no title."}`})
	if text := msg.Content[0].Text; !strings.Contains(text, "No evaluation remains") || !strings.Contains(text, "Still no title.") {
		t.Errorf("last verdict: %q", text)
	}
	if _, ok, _ := outcomeMessage(&pb.Event{Type: "user.message", Body: `{"content":[]}`}); ok {
		t.Error("a user.message is taken for an outcome trigger")
	}
}

// TestLastReply: the agent's last message's text, bounded on a rune.
func TestLastReply(t *testing.T) {
	conv := []model.Message{
		{Role: "user", Content: []model.Block{{Type: "text", Text: "go"}}},
		{Role: "assistant", Content: []model.Block{{Type: "text", Text: "first"}}},
		{Role: "assistant", Content: []model.Block{{Type: "tool_use", Name: "bash"}}},
		{Role: "user", Content: []model.Block{{Type: "tool_result"}}},
	}
	if got := lastReply(conv); got != "first" {
		t.Errorf("lastReply = %q, want the last assistant text", got)
	}
	long := strings.Repeat("é", maxGradedReplyBytes) // 2 bytes each
	got := lastReply([]model.Message{{Role: "assistant", Content: []model.Block{{Type: "text", Text: long}}}})
	body, _, _ := strings.Cut(got, "\n[truncated")
	if len(body) > maxGradedReplyBytes || !strings.Contains(got, "truncated at") || !strings.HasSuffix(body, "é") {
		t.Errorf("truncated reply: %d bytes, suffix %q", len(body), got[len(got)-30:])
	}
}
