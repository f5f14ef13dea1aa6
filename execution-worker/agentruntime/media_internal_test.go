package agentruntime

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
)

// TestMediaBlocksAreNotCountedAsText: a 1 MiB image or PDF counts as media,
// not as 350,000 tokens of base64 text, so ordinary files fit the window.
func TestMediaBlocksAreNotCountedAsText(t *testing.T) {
	data := base64.StdEncoding.EncodeToString(make([]byte, 1<<20))
	block := func(typ, media string) model.Block {
		raw, _ := json.Marshal(map[string]any{"type": typ, "source": map[string]any{"type": "base64", "media_type": media, "data": data}})
		var b model.Block
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	text := model.Block{Type: "text", Text: strings.Repeat("word ", 400)} // 2000 bytes: 500 tokens
	for _, tc := range []struct {
		name     string
		media    model.Block
		min, max int
	}{
		{"image", block("image", "image/png"), imageTokens, imageTokens + 700},
		{"pdf", block("document", "application/pdf"), 1024 * pdfTokensPerKiB, 1024*pdfTokensPerKiB + 700},
	} {
		msgs := []model.Message{{Role: "user", Content: []model.Block{text, tc.media}}}
		got := messagesTokens(jsonSize(msgs), msgs)
		if got < tc.min || got > tc.max {
			t.Errorf("%s: estimate = %d tokens, want between %d and %d (text ~500 plus the media's own cost)", tc.name, got, tc.min, tc.max)
		}
	}
	// An image inside a tool result counts the same way.
	inner, _ := json.Marshal([]any{map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": data}}})
	msgs := []model.Message{{Role: "user", Content: []model.Block{{Type: "tool_result", ToolUseID: "t", Content: inner}}}}
	if got := messagesTokens(jsonSize(msgs), msgs); got > imageTokens+100 {
		t.Errorf("tool result image: estimate = %d tokens, want about %d", got, imageTokens)
	}
}
