package modelfake_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
)

func user(text string) model.Message {
	return model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: text}}}
}

func results(rs ...model.Block) model.Message {
	return model.Message{Role: "user", Content: rs}
}

func result(id, text string, isErr bool) model.Block {
	c, _ := json.Marshal(text)
	return model.Block{Type: "tool_result", ToolUseID: id, Content: c, IsError: isErr}
}

func req(msgs ...model.Message) *model.Request {
	return &model.Request{Model: "claude-test", MaxTokens: 1024, Messages: msgs}
}

// run drives a conversation like the agent loop does: it calls Create, and
// while the model asks for tools it answers each with output(name, input),
// until the turn ends or rounds run out. It returns every response.
func run(t *testing.T, c model.Client, text string, rounds int, output func(name string, input json.RawMessage) string) []*model.Response {
	t.Helper()
	msgs := []model.Message{user(text)}
	var out []*model.Response
	for range rounds {
		resp, err := c.Create(t.Context(), req(msgs...))
		if err != nil {
			t.Fatalf("Create after %d responses: %v", len(out), err)
		}
		out = append(out, resp)
		if resp.StopReason != "tool_use" {
			return out
		}
		msgs = append(msgs, model.Message{Role: "assistant", Content: resp.Content})
		var rs []model.Block
		for _, b := range resp.Content {
			if b.Type == "tool_use" {
				rs = append(rs, result(b.ID, output(b.Name, b.Input), false))
			}
		}
		msgs = append(msgs, results(rs...))
	}
	return out
}

func texts(resp *model.Response) string {
	var parts []string
	for _, b := range resp.Content {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "|")
}

type call struct{ name, input string }

func calls(resp *model.Response) []call {
	var out []call
	for _, b := range resp.Content {
		if b.Type == "tool_use" {
			out = append(out, call{b.Name, string(b.Input)})
		}
	}
	return out
}

func TestScripts(t *testing.T) {
	t.Parallel()
	echo := func(name string, input json.RawMessage) string { return name + " got " + string(input) }
	type step struct {
		calls []call
		text  string
		stop  string
	}
	tests := []struct {
		name   string
		script string
		want   []step
	}{
		{"plain", "hello there", []step{{text: "You said: hello there", stop: "end_turn"}}},
		{"reply", "#reply Exactly  this.", []step{{text: "Exactly  this.", stop: "end_turn"}}},
		{"multiline reply", "#reply one\n#reply two", []step{{text: "one\ntwo", stop: "end_turn"}}},
		{"text around directives", "please\n#think hm\nnow", []step{{text: "You said: please\nnow", stop: "end_turn"}}},
		{"unknown hash lines are text", "#include <stdio.h>\n# heading", []step{{text: "You said: #include <stdio.h>\n# heading", stop: "end_turn"}}},
		{"one tool", `#tool bash {"command": "ls"}`, []step{
			{calls: []call{{"bash", `{"command":"ls"}`}}, stop: "tool_use"},
			{text: `Tool bash returned: bash got {"command":"ls"}`, stop: "end_turn"},
		}},
		{"tool without input", "#tool my_custom_tool", []step{
			{calls: []call{{"my_custom_tool", `{}`}}, stop: "tool_use"},
			{text: `Tool my_custom_tool returned: my_custom_tool got {}`, stop: "end_turn"},
		}},
		{"rounds then reply", "#tool write {\"path\":\"a\",\"content\":\"x\"}\n#tool read {\"path\":\"a\"}\n#reply done", []step{
			{calls: []call{{"write", `{"path":"a","content":"x"}`}}, stop: "tool_use"},
			{calls: []call{{"read", `{"path":"a"}`}}, stop: "tool_use"},
			{text: "done", stop: "end_turn"},
		}},
		{"parallel", "#parallel\n#tool glob {\"pattern\":\"*\"}\n#tool grep {\"pattern\":\"x\"}", []step{
			{calls: []call{{"glob", `{"pattern":"*"}`}, {"grep", `{"pattern":"x"}`}}, stop: "tool_use"},
			{text: "Tool glob returned: glob got {\"pattern\":\"*\"}\nTool grep returned: grep got {\"pattern\":\"x\"}", stop: "end_turn"},
		}},
		{"stop reason", "#reply cut\n#stop max_tokens", []step{{text: "cut", stop: "max_tokens"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := run(t, modelfake.New(), tt.script, 10, echo)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d responses, want %d: %+v", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				if c := calls(got[i]); !reflect.DeepEqual(c, w.calls) {
					t.Errorf("response %d: tool calls %v, want %v", i, c, w.calls)
				}
				if s := texts(got[i]); s != w.text {
					t.Errorf("response %d: text %q, want %q", i, s, w.text)
				}
				if got[i].StopReason != w.stop {
					t.Errorf("response %d: stop_reason %q, want %q", i, got[i].StopReason, w.stop)
				}
				if got[i].Usage.InputTokens < 1 || got[i].Usage.OutputTokens < 1 {
					t.Errorf("response %d: usage %+v, want both counts >= 1", i, got[i].Usage)
				}
			}
		})
	}
}

func TestLoopNeverEnds(t *testing.T) {
	t.Parallel()
	got := run(t, modelfake.New(), "#loop", 25, func(string, json.RawMessage) string { return "loop" })
	if len(got) != 25 {
		t.Fatalf("got %d responses, want 25 tool rounds", len(got))
	}
	ids := map[string]bool{}
	for i, r := range got {
		c := calls(r)
		if r.StopReason != "tool_use" || len(c) != 1 || c[0] != (call{"bash", modelfake.LoopCommand}) {
			t.Fatalf("round %d: %s %v, want one bash %s call", i, r.StopReason, c, modelfake.LoopCommand)
		}
		id := r.Content[0].ID
		if ids[id] || !strings.HasPrefix(id, "toolu_fake_") {
			t.Fatalf("round %d: tool_use id %q repeated or not toolu_fake_", i, id)
		}
		ids[id] = true
	}
}

func TestToolResultErrorAndTruncation(t *testing.T) {
	t.Parallel()
	c := modelfake.New()
	msgs := []model.Message{user("#tool bash {}")}
	resp, err := c.Create(t.Context(), req(msgs...))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Content[0].ID
	long := strings.Repeat("é", 300)
	blocks, _ := json.Marshal([]model.Block{{Type: "text", Text: long}})
	msgs = append(msgs, model.Message{Role: "assistant", Content: resp.Content},
		results(model.Block{Type: "tool_result", ToolUseID: id, Content: blocks, IsError: true}))
	resp, err = c.Create(t.Context(), req(msgs...))
	if err != nil {
		t.Fatal(err)
	}
	want := "Tool bash returned an error: " + strings.Repeat("é", 200)
	if got := texts(resp); got != want {
		t.Errorf("reply %q, want %q", got, want)
	}
}

func TestThinking(t *testing.T) {
	t.Parallel()
	got := run(t, modelfake.New(), "#think Let me check.\n#tool bash {\"command\":\"pwd\"}\n#reply ok", 5,
		func(string, json.RawMessage) string { return "/" })
	if len(got) != 2 {
		t.Fatalf("got %d responses, want 2", len(got))
	}
	for i, r := range got {
		b := r.Content[0]
		if b.Type != "thinking" || b.Thinking != "Let me check." || !strings.HasPrefix(b.Signature, "fakesig_") {
			t.Errorf("response %d: first block %+v, want thinking with a fakesig_ signature", i, b)
		}
	}
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	r := req(user("#think a\n#tool bash {\"command\":\"x\"}"))
	a, err := modelfake.New().Create(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := modelfake.New().Stream(t.Context(), r, func(model.StreamEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two clients answered the same request differently:\n%+v\n%+v", a, b)
	}
	other, err := modelfake.New().Create(t.Context(), req(user("#think a\n#tool bash {\"command\":\"y\"}")))
	if err != nil {
		t.Fatal(err)
	}
	if other.ID == a.ID || other.Content[1].ID == a.Content[1].ID {
		t.Errorf("different requests got the same ids %q/%q", a.ID, a.Content[1].ID)
	}
}

func TestStreamEvents(t *testing.T) {
	t.Parallel()
	var events []model.StreamEvent
	resp, err := modelfake.New().Stream(t.Context(), req(user("#think hmm\n#reply Hello there,  world")),
		func(e model.StreamEvent) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	want := []model.StreamEvent{
		{Type: "block_start", Index: 0, BlockType: "thinking"},
		{Type: "block_start", Index: 1, BlockType: "text"},
		{Type: "text_delta", Index: 1, Text: "Hello"},
		{Type: "text_delta", Index: 1, Text: " there,"},
		{Type: "text_delta", Index: 1, Text: "  world"},
	}
	if !reflect.DeepEqual(events, want) {
		t.Errorf("events\n%+v\nwant\n%+v", events, want)
	}
	if texts(resp) != "Hello there,  world" {
		t.Errorf("response text %q", texts(resp))
	}
}

func TestSlowStreamAndCancel(t *testing.T) {
	t.Parallel()
	r := req(user("#slow 30ms\n#reply a b c d"))
	start := time.Now()
	n := 0
	if _, err := modelfake.New().Stream(t.Context(), r, func(e model.StreamEvent) {
		if e.Type == "text_delta" {
			n++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); n != 4 || el < 90*time.Millisecond {
		t.Errorf("%d deltas in %v, want 4 deltas over at least 90ms", n, el)
	}

	ctx, cancel := context.WithCancel(t.Context())
	r = req(user("#slow 1m\n#reply a b"))
	done := make(chan error, 1)
	go func() {
		_, err := modelfake.New().Stream(ctx, r, func(e model.StreamEvent) {
			if e.Type == "text_delta" {
				cancel()
			}
		})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled stream returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not stop on cancellation")
	}
	if _, err := modelfake.New().Create(ctx, r); !errors.Is(err, context.Canceled) {
		t.Errorf("Create with a cancelled context returned %v, want context.Canceled", err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind      string
		status    int
		typ       string
		retryable bool
		after     time.Duration
	}{
		{"rate_limited", 429, "rate_limit_error", true, time.Second},
		{"overloaded", 529, "overloaded_error", true, 0},
		{"server", 500, "api_error", true, 0},
		{"invalid", 400, "invalid_request_error", false, 0},
		{"timeout", 0, "timeout", true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			t.Parallel()
			c := modelfake.New()
			r := req(user("#error " + tt.kind))
			for i := range 3 {
				_, err := c.Stream(t.Context(), r, func(model.StreamEvent) { t.Error("event before error") })
				var me *model.Error
				if !errors.As(err, &me) {
					t.Fatalf("call %d: error %v, want *model.Error", i, err)
				}
				if me.Status != tt.status || me.Type != tt.typ || me.Retryable != tt.retryable || me.RetryAfter != tt.after {
					t.Errorf("call %d: %+v, want status %d type %s retryable %v after %v", i, me, tt.status, tt.typ, tt.retryable, tt.after)
				}
			}
		})
	}
}

func TestErrorTimes(t *testing.T) {
	t.Parallel()
	c := modelfake.New()
	text := "#error overloaded 2\n#tool bash {}\n#reply ok"
	for i := range 2 {
		if _, err := c.Create(t.Context(), req(user(text))); err == nil {
			t.Fatalf("call %d succeeded, want the first 2 calls to fail", i)
		}
	}
	// The third call and the later rounds of the same conversation succeed.
	got := run(t, c, text, 5, func(string, json.RawMessage) string { return "" })
	if len(got) != 2 || texts(got[1]) != "ok" {
		t.Errorf("after 2 failures got %d responses ending %q, want the tool round and \"ok\"", len(got), texts(got[len(got)-1]))
	}
	// A different conversation has its own counter; concurrent use is safe.
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for range 8 {
		wg.Go(func() {
			_, err := c.Create(t.Context(), req(user("other\n#error server 3")))
			if ok, _ := model.Retryable(err); ok {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed != 3 {
		t.Errorf("%d of 8 concurrent calls failed, want exactly 3", failed)
	}
}

func TestInvalidScripts(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		"#tool",
		"#tool bash [1]",
		"#tool bash {oops",
		"#slow forever",
		"#slow 2h",
		"#error melted",
		"#error server 0",
		"#stop because",
		"#loop now",
		"#reply",
		"#usage",
		"#usage input",
		"#usage input=-1",
		"#usage input=1 input=2",
		"#usage tokens=5",
	} {
		_, err := modelfake.New().Create(t.Context(), req(user(text)))
		var me *model.Error
		if !errors.As(err, &me) || me.Status != 400 || me.Retryable {
			t.Errorf("script %q: error %v, want a non-retryable 400", text, err)
		}
	}
	if _, err := modelfake.New().Create(t.Context(), req()); err == nil {
		t.Error("empty conversation: no error, want 400")
	}
}

// The script comes from the last user text message; a new user message
// starts a new script.
func TestLatestUserTextWins(t *testing.T) {
	t.Parallel()
	c := modelfake.New()
	first, err := c.Create(t.Context(), req(user("#tool bash {}")))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []model.Message{
		user("#tool bash {}"),
		{Role: "assistant", Content: first.Content},
		results(result(first.Content[0].ID, "x", false)),
		{Role: "assistant", Content: []model.Block{{Type: "text", Text: "Tool bash returned: x"}}},
		user("#reply second turn"),
	}
	resp, err := c.Create(t.Context(), req(msgs...))
	if err != nil {
		t.Fatal(err)
	}
	if texts(resp) != "second turn" {
		t.Errorf("reply %q, want %q", texts(resp), "second turn")
	}
}

// #usage sets the counts each round reports; the k-th line applies to
// round k, the last line to every later round, unnamed counts keep their
// defaults.
func TestUsageDirective(t *testing.T) {
	t.Parallel()
	echo := func(string, json.RawMessage) string { return "ok" }
	script := "#tool bash {}\n#tool bash {}\n#tool bash {}\n#usage input=100 output=7 cache_read=30 cache_write=20\n#usage input=5000"
	c := modelfake.New()
	var seen []modelfake.Call
	var mu sync.Mutex
	c.SetObserver(func(call modelfake.Call) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, call)
	})
	got := run(t, c, script, 10, echo)
	if len(got) != 4 {
		t.Fatalf("got %d responses, want 4", len(got))
	}
	want0 := model.Usage{InputTokens: 100, OutputTokens: 7, CacheReadInputTokens: 30, CacheCreationInputTokens: 20}
	if got[0].Usage != want0 {
		t.Errorf("round 0 usage %+v, want %+v", got[0].Usage, want0)
	}
	for i := 1; i < 4; i++ {
		u := got[i].Usage
		if u.InputTokens != 5000 || u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens != 0 || u.OutputTokens < 1 {
			t.Errorf("round %d usage %+v, want input 5000, default output, no cache", i, u)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("observer saw %d calls, want 4", len(seen))
	}
	for i, call := range seen {
		if call.Response != got[i] {
			t.Errorf("observer call %d: response differs from the one returned", i)
		}
		if want := modelfake.EstimateInputTokens(call.Request); call.EstimatedInputTokens != want || want < 1 || want == call.Response.Usage.InputTokens {
			t.Errorf("observer call %d: estimate %d, want EstimateInputTokens %d, independent of #usage", i, call.EstimatedInputTokens, want)
		}
	}

	// Without #usage the input count is the estimate.
	plain := run(t, modelfake.New(), "hello", 1, echo)
	if r := req(user("hello")); plain[0].Usage.InputTokens != modelfake.EstimateInputTokens(r) {
		t.Errorf("default input tokens %d, want the estimate %d", plain[0].Usage.InputTokens, modelfake.EstimateInputTokens(r))
	}
}
