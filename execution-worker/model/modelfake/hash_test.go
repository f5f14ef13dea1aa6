package modelfake

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
)

func hashTestRequest() *model.Request {
	return &model.Request{
		Model: "m", System: "sys",
		Messages: []model.Message{
			{Role: "user", Content: []model.Block{{Type: "text", Text: "hello"}}},
			{Role: "assistant", Content: []model.Block{{Type: "tool_use", ID: "toolu_1", Name: "bash", Input: json.RawMessage(`{"command":"ls"}`)}}},
			{Role: "user", Content: []model.Block{{Type: "tool_result", ToolUseID: "toolu_1", Content: json.RawMessage(`"a\nb"`)}}},
		},
		Tools: []model.ToolDef{{Name: "bash", Description: "runs", InputSchema: json.RawMessage(`{"type":"object"}`)}},
	}
}

// TestHashRequest: equal requests hash alike; a change to any field, a
// field's bytes moved to its neighbour, or a field larger than the
// buffer, hash apart.
func TestHashRequest(t *testing.T) {
	base := hashRequest(hashTestRequest())
	if again := hashRequest(hashTestRequest()); again != base {
		t.Fatalf("the same request hashed %s then %s", base, again)
	}
	large := strings.Repeat("x", 10000)
	changes := map[string]func(r *model.Request){
		"model":               func(r *model.Request) { r.Model = "n" },
		"system moved":        func(r *model.Request) { r.Model, r.System = "ms", "ys" },
		"text":                func(r *model.Request) { r.Messages[0].Content[0].Text = "hellO" },
		"input":               func(r *model.Request) { r.Messages[1].Content[0].Input = json.RawMessage(`{"command":"pwd"}`) },
		"is_error":            func(r *model.Request) { r.Messages[2].Content[0].IsError = true },
		"tool description":    func(r *model.Request) { r.Tools[0].Description = "runs!" },
		"tool schema":         func(r *model.Request) { r.Tools[0].InputSchema = json.RawMessage(`{"type":"string"}`) },
		"no tools":            func(r *model.Request) { r.Tools = nil },
		"large text":          func(r *model.Request) { r.Messages[0].Content[0].Text = large },
		"large text, changed": func(r *model.Request) { r.Messages[0].Content[0].Text = large + "y" },
		"message dropped":     func(r *model.Request) { r.Messages = r.Messages[:2] },
		"tool choice":         func(r *model.Request) { r.ToolChoice = &model.ToolChoice{Type: "any"} },
		"tool choice name":    func(r *model.Request) { r.ToolChoice = &model.ToolChoice{Type: "tool", Name: "bash"} },
	}
	seen := map[string]string{base: "base"}
	for name, change := range changes {
		r := hashTestRequest()
		change(r)
		h := hashRequest(r)
		if other, ok := seen[h]; ok {
			t.Errorf("%s hashed as %s: %s", name, other, h)
		}
		seen[h] = name
	}
}

func BenchmarkHashRequest(b *testing.B) {
	r := hashTestRequest()
	for i := range 200 { // a long session's transcript
		r.Messages = append(r.Messages, hashTestRequest().Messages[i%3])
	}
	for range 8 {
		r.Tools = append(r.Tools, model.ToolDef{Name: "tool", Description: strings.Repeat("describes ", 40),
			InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"` + strings.Repeat("p", 200) + `"}}}`)})
	}
	b.ReportAllocs()
	for b.Loop() {
		hashRequest(r)
	}
}
