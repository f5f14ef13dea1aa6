package modelanthropic_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelanthropic"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
)

// ephemeral is the cache_control of a breakpoint, as decoded JSON.
var ephemeral = map[string]any{"type": "ephemeral"}

// breakpoints lists where a request body carries cache_control: "tools/i",
// "system/i" and "messages/i/j".
func breakpoints(t *testing.T, raw []byte) []string {
	t.Helper()
	var body struct {
		Tools    []map[string]any `json:"tools"`
		System   []map[string]any `json:"system"`
		Messages []struct {
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("request body: %v: %s", err, raw)
	}
	var out []string
	mark := func(m map[string]any, where string) {
		if cc, ok := m["cache_control"]; ok {
			if b, _ := json.Marshal(cc); string(b) != `{"type":"ephemeral"}` {
				t.Errorf("%s: cache_control %s, want {\"type\":\"ephemeral\"}", where, b)
			}
			out = append(out, where)
		}
	}
	for i, d := range body.Tools {
		mark(d, "tools/"+strconv.Itoa(i))
	}
	for i, b := range body.System {
		mark(b, "system/"+strconv.Itoa(i))
	}
	for i, m := range body.Messages {
		for j, b := range m.Content {
			mark(b, "messages/"+strconv.Itoa(i)+"/"+strconv.Itoa(j))
		}
	}
	return out
}

// A tool loop through the real client marks at most four breakpoints: the
// last tool, the system prompt and the last two user messages, so each
// round's request repeats the previous round's last breakpoint (the cached
// prefix it reads). The cache counts the server reports reach model.Usage.
func TestPromptCachingBreakpoints(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies [][]byte
	fake := fakeServer(modelfake.New())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, raw)
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(raw))
		fake(w, r)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})

	script := "#tool bash {\"command\":\"ls\"}\n#tool bash {\"command\":\"pwd\"}\n#tool read {\"path\":\"a\"}\n" +
		"#usage input=900 cache_write=2000\n#usage input=50 cache_read=2000 cache_write=300"
	msgs := []model.Message{{Role: "user", Content: []model.Block{{Type: "text", Text: script}}}}
	tools := []model.ToolDef{
		{Name: "bash", InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: "read", InputSchema: json.RawMessage(`{"type":"object"}`)},
	}
	var usages []model.Usage
	for round := 0; round < 4; round++ {
		req := &model.Request{Model: "claude-test", System: "You are terse.", MaxTokens: 100, Messages: msgs, Tools: tools}
		var resp *model.Response
		var err error
		if round%2 == 0 {
			resp, err = c.Stream(t.Context(), req, nil)
		} else {
			resp, err = c.Create(t.Context(), req)
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		usages = append(usages, resp.Usage)
		if resp.StopReason != "tool_use" {
			break
		}
		msgs = append(msgs, model.Message{Role: "assistant", Content: resp.Content},
			model.Message{Role: "user", Content: []model.Block{{Type: "tool_result", ToolUseID: resp.Content[0].ID, Content: json.RawMessage(`"out"`)}}})
	}
	if len(bodies) != 4 {
		t.Fatalf("%d requests, want 4", len(bodies))
	}
	want := [][]string{
		{"tools/1", "system/0", "messages/0/0"},
		{"tools/1", "system/0", "messages/0/0", "messages/2/0"},
		{"tools/1", "system/0", "messages/2/0", "messages/4/0"},
		{"tools/1", "system/0", "messages/4/0", "messages/6/0"},
	}
	for i, raw := range bodies {
		got := breakpoints(t, raw)
		if len(got) > 4 {
			t.Errorf("request %d: %d breakpoints, the Messages API allows 4", i, len(got))
		}
		if !equal(got, want[i]) {
			t.Errorf("request %d: breakpoints %v, want %v", i, got, want[i])
		}
	}
	if u := usages[0]; u.InputTokens != 900 || u.CacheCreationInputTokens != 2000 || u.CacheReadInputTokens != 0 {
		t.Errorf("round 0 (streamed) usage %+v, want 900 input, 2000 cache write", u)
	}
	for i, u := range usages[1:] {
		if u.InputTokens != 50 || u.CacheReadInputTokens != 2000 || u.CacheCreationInputTokens != 300 {
			t.Errorf("round %d usage %+v, want 50 input, 2000 cache read, 300 cache write", i+1, u)
		}
	}
	// The caller's messages carry no cache_control.
	for _, m := range msgs {
		for _, b := range m.Content {
			if b.Raw != nil {
				t.Errorf("the caller's block %s was changed in place", b.Raw)
			}
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
