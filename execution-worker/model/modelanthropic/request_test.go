package modelanthropic_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelanthropic"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
)

// gradeTool is the grader's one tool, as the worker declares it.
var gradeTool = model.ToolDef{
	Name: "submit_evaluation",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"result":{"type":"string",` +
		`"enum":["satisfied","needs_revision","failed"]},"explanation":{"type":"string"}},"required":["result","explanation"]}`),
}

// TestToolChoice: a request's tool choice is sent as tool_choice, one of
// the four types; without one no tool_choice member is sent.
func TestToolChoice(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write(testdata(t, "message.json"))
	})
	c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	tests := []struct {
		choice *model.ToolChoice
		want   string // the request body's tool_choice member, "" for none
	}{
		// The grader's request.
		{&model.ToolChoice{Type: "tool", Name: "submit_evaluation"}, `"tool_choice":{"type":"tool","name":"submit_evaluation"}`},
		{&model.ToolChoice{Type: "any"}, `"tool_choice":{"type":"any"}`},
		{&model.ToolChoice{Type: "auto"}, `"tool_choice":{"type":"auto"}`},
		{&model.ToolChoice{Type: "none"}, `"tool_choice":{"type":"none"}`},
		{nil, ""},
	}
	for _, tt := range tests {
		req := simpleRequest()
		req.Tools = []model.ToolDef{gradeTool}
		req.ToolChoice = tt.choice
		if _, err := c.Create(t.Context(), req); err != nil {
			t.Fatalf("Create with tool choice %+v: %v", tt.choice, err)
		}
		_, _, body := rec.get()
		got, has := body["tool_choice"]
		if tt.want == "" {
			if has {
				t.Errorf("no tool choice: sent tool_choice %s", mustJSON(t, got))
			}
			continue
		}
		var want map[string]any
		if err := json.Unmarshal([]byte("{"+tt.want+"}"), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want["tool_choice"]) { // members in any order
			t.Errorf("tool choice %+v: sent tool_choice %s, want %s", tt.choice, mustJSON(t, got), tt.want)
		}
	}
}

// TestToolChoiceRefused: a malformed tool choice, or one forcing a tool
// with extended thinking on, fails before anything is sent.
func TestToolChoiceRefused(t *testing.T) {
	t.Parallel()
	var sent atomic.Bool
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		sent.Store(true)
		http.Error(w, "unexpected", http.StatusInternalServerError)
	})
	c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	tests := []struct {
		choice   model.ToolChoice
		thinking int
		inError  string
	}{
		{model.ToolChoice{Type: "tool", Name: "submit_evaluation"}, 1024, "thinking"},
		{model.ToolChoice{Type: "any"}, 1024, "thinking"},
		{model.ToolChoice{Type: "tool"}, 0, "name"},
		{model.ToolChoice{Type: "auto", Name: "submit_evaluation"}, 0, "no tool name"},
		{model.ToolChoice{Type: "required"}, 0, "unknown type"},
	}
	for _, tt := range tests {
		req := simpleRequest()
		req.Tools = []model.ToolDef{gradeTool}
		req.ToolChoice = &tt.choice
		req.ThinkingBudget = tt.thinking
		_, err := c.Create(t.Context(), req)
		var me *model.Error
		if !errors.As(err, &me) || me.Type != "invalid_request_error" || me.Retryable || !strings.Contains(me.Message, tt.inError) {
			t.Errorf("tool choice %+v, thinking %d: error %v, want a non-retryable invalid_request_error naming %q", tt.choice, tt.thinking, err, tt.inError)
		}
	}
	// Thinking with a choice that forces nothing is fine.
	srv, _ = newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write(testdata(t, "message.json"))
	})
	c = newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	for _, typ := range []string{"auto", "none"} {
		req := simpleRequest()
		req.ToolChoice = &model.ToolChoice{Type: typ}
		req.ThinkingBudget = 1024
		if _, err := c.Create(t.Context(), req); err != nil {
			t.Errorf("tool choice %q with thinking: %v", typ, err)
		}
	}
	if sent.Load() {
		t.Error("a refused request reached the server")
	}
}

// TestGradeAgainstFake: a grader's request reaches the fake over HTTP with
// its tool choice, and the fake's #grade verdict comes back as it answers
// directly (ids aside), created or streamed.
func TestGradeAgainstFake(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, fakeServer(modelfake.New()))
	viaHTTP := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	direct := modelfake.New()
	for _, stream := range []bool{false, true} {
		req := &model.Request{
			Model: "claude-test", MaxTokens: 100,
			Messages: []model.Message{{Role: "user", Content: []model.Block{{Type: "text",
				Text: "The agent wrote report.md.\n#grade report.md A report must be written."}}}},
			Tools:      []model.ToolDef{gradeTool, {Name: "bash", InputSchema: json.RawMessage(`{"type":"object"}`)}},
			ToolChoice: &model.ToolChoice{Type: "tool", Name: "submit_evaluation"},
		}
		call := func(c model.Client) (*model.Response, error) {
			if stream {
				return c.Stream(t.Context(), req, func(model.StreamEvent) {})
			}
			return c.Create(t.Context(), req)
		}
		want, err := call(direct)
		if err != nil {
			t.Fatal(err)
		}
		got, err := call(viaHTTP)
		if err != nil {
			t.Fatalf("stream=%v: %v", stream, err)
		}
		// The ids differ: the test server re-encodes the tools' schemas
		// (keys sorted), so the fake hashes another request.
		for _, r := range []*model.Response{got, want} {
			r.ID = strings.TrimRight(r.ID, "0123456789abcdef")
			for i := range r.Content {
				r.Content[i].ID = strings.TrimRight(r.Content[i].ID, "0123456789abcdef")
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("stream=%v:\n got %s\nwant %s", stream, mustJSON(t, got), mustJSON(t, want))
		}
		if len(got.Content) != 1 || got.Content[0].Name != "submit_evaluation" ||
			string(got.Content[0].Input) != `{"result":"satisfied","explanation":"The work contains \"report.md\"."}` {
			t.Errorf("stream=%v: content %s, want the satisfied verdict", stream, mustJSON(t, got.Content))
		}
	}
}
