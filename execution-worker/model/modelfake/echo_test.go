package modelfake_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
)

// rawBlock decodes a block as the worker projects it from an event.
func rawBlock(t *testing.T, s string) model.Block {
	t.Helper()
	var b model.Block
	if err := json.Unmarshal([]byte(s), &b); err != nil {
		t.Fatalf("decode block %s: %v", s, err)
	}
	return b
}

func TestEchoBlocks(t *testing.T) {
	t.Parallel()
	image := rawBlock(t, `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}`)
	pdf := rawBlock(t, `{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="},"title":"T"}`)
	file := rawBlock(t, `{"type":"document","source":{"type":"file","file_id":"file_01"}}`)
	url := rawBlock(t, `{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}`)
	msg := model.Message{Role: "user", Content: []model.Block{pdf, {Type: "text", Text: "#echo-blocks"}, image, file, url}}
	resp, err := modelfake.New().Create(context.Background(), req(msg))
	if err != nil {
		t.Fatalf("Create = %v, want an answer", err)
	}
	want := "blocks: document base64 application/pdf; text; image base64 image/png; document file file_01; image url https://example.com/a.png"
	if got := texts(resp); got != want {
		t.Fatalf("reply %q, want %q", got, want)
	}
}

func TestEchoBlocksOfToolResults(t *testing.T) {
	t.Parallel()
	c := modelfake.New()
	script := user("#tool chart {}\n#echo-blocks")
	first, err := c.Create(context.Background(), req(script))
	if err != nil {
		t.Fatal(err)
	}
	use := first.Content[0]
	if use.Type != "tool_use" {
		t.Fatalf("first response %+v, want a tool_use", first.Content)
	}
	content := json.RawMessage(`[{"type":"text","text":"see"},{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lGODlh"}}]`)
	second, err := c.Create(context.Background(), req(script, model.Message{Role: "assistant", Content: first.Content},
		results(model.Block{Type: "tool_result", ToolUseID: use.ID, Content: content})))
	if err != nil {
		t.Fatal(err)
	}
	want := "blocks: text\ntool_result chart: text; image base64 image/gif"
	if got := texts(second); got != want {
		t.Fatalf("reply %q, want %q", got, want)
	}
}

func TestNonTextBlocksAreNotScript(t *testing.T) {
	t.Parallel()
	// Directive-like text inside a document is not read as a directive.
	doc := rawBlock(t, `{"type":"document","source":{"type":"text","media_type":"text/plain","data":"#error invalid"}}`)
	resp, err := modelfake.New().Create(context.Background(), req(model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: "hi"}, doc}}))
	if err != nil {
		t.Fatalf("Create = %v, want the document ignored by the script", err)
	}
	if got := texts(resp); got != "You said: hi" {
		t.Fatalf("reply %q, want %q", got, "You said: hi")
	}
}
