package agentruntime

import (
	"encoding/json"
	"testing"

	"github.com/mangohq/mango/execution-worker/tools"
)

func TestAnswerCustomToolResultWithImage(t *testing.T) {
	t.Parallel()
	image := `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}`
	body := `{"custom_tool_use_id":"sevt_1","content":[{"type":"text","text":"the chart"},` + image + `],"is_error":false}`
	r, journal, approved, err := Answer("user.custom_tool_result", json.RawMessage(body))
	if err != nil || !journal || approved {
		t.Fatalf("Answer = (%+v, journal %v, approved %v, %v), want a result to journal", r, journal, approved, err)
	}
	if r.Content != "the chart" {
		t.Errorf("Content = %q, want the text blocks %q", r.Content, "the chart")
	}
	wantBlocks := `[{"type":"text","text":"the chart"},` + image + `]`
	if string(r.Blocks) != wantBlocks {
		t.Errorf("Blocks = %s, want %s", r.Blocks, wantBlocks)
	}
	// The journal stores the result as JSON and the model gets the blocks.
	stored, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back tools.Result
	if err := json.Unmarshal(stored, &back); err != nil {
		t.Fatal(err)
	}
	b := toolResultBlock("toolu_1", back)
	if string(b.Content) != wantBlocks || b.ToolUseID != "toolu_1" || b.Type != "tool_result" {
		t.Errorf("toolResultBlock = %+v (content %s), want a tool_result for toolu_1 with content %s", b, b.Content, wantBlocks)
	}
}

func TestAnswerTextOnlyResultKeepsTextContent(t *testing.T) {
	t.Parallel()
	r, _, _, err := Answer("user.custom_tool_result", json.RawMessage(`{"content":[{"type":"text","text":"42"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Blocks != nil {
		t.Errorf("Blocks = %s, want none for a text-only result", r.Blocks)
	}
	if got := string(toolResultBlock("t", r).Content); got != `[{"type":"text","text":"42"}]` {
		t.Errorf("tool_result content = %s, want the single text block", got)
	}
	// A journal entry written before Blocks existed decodes unchanged.
	var old tools.Result
	if err := json.Unmarshal([]byte(`{"Content":"x","IsError":true}`), &old); err != nil || old.Blocks != nil || old.Content != "x" {
		t.Errorf("old journal entry decoded as %+v (%v), want Content x and no Blocks", old, err)
	}
}
