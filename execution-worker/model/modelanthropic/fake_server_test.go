package modelanthropic_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelanthropic"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
)

// fakeServer answers /v1/messages with modelfake, encoded in the Messages
// API wire format (JSON, or SSE with deltas split into fragments).
func fakeServer(fake *modelfake.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body struct {
			model.Request
			Stream bool `json:"stream"`
		}
		raw, err := uncached(raw)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := fake.Create(r.Context(), &body.Request)
		var me *model.Error
		if errors.As(err, &me) {
			status := me.Status
			if status == 0 {
				status = http.StatusRequestTimeout
			}
			if me.RetryAfter > 0 {
				w.Header().Set("retry-after", strconv.Itoa(int(me.RetryAfter.Seconds())))
			}
			w.Header().Set("content-type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": me.Type, "message": me.Message}})
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if !body.Stream {
			w.Header().Set("content-type", "application/json")
			_ = json.NewEncoder(w).Encode(resp)
			return
		}
		w.Header().Set("content-type", "text/event-stream")
		send := func(event string, v any) {
			b, _ := json.Marshal(v)
			_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
			w.(http.Flusher).Flush()
		}
		halves := func(s string) []string { return []string{s[:len(s)/2], s[len(s)/2:]} }
		send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": resp.ID, "type": "message", "role": "assistant", "model": resp.Model, "content": []any{},
			"stop_reason": nil, "usage": map[string]any{"input_tokens": resp.Usage.InputTokens, "output_tokens": 1,
				"cache_read_input_tokens": resp.Usage.CacheReadInputTokens, "cache_creation_input_tokens": resp.Usage.CacheCreationInputTokens}}})
		for i, b := range resp.Content {
			delta := func(d map[string]any) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d})
			}
			var start map[string]any
			switch b.Type {
			case "text":
				start = map[string]any{"type": "text", "text": ""}
			case "thinking":
				start = map[string]any{"type": "thinking", "thinking": ""}
			case "tool_use":
				start = map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}
			}
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start})
			send("ping", map[string]any{"type": "ping"})
			switch b.Type {
			case "text":
				for _, part := range halves(b.Text) {
					delta(map[string]any{"type": "text_delta", "text": part})
				}
			case "thinking":
				for _, part := range halves(b.Thinking) {
					delta(map[string]any{"type": "thinking_delta", "thinking": part})
				}
				delta(map[string]any{"type": "signature_delta", "signature": b.Signature})
			case "tool_use":
				for _, part := range halves(string(b.Input)) {
					delta(map[string]any{"type": "input_json_delta", "partial_json": part})
				}
			}
			send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
		}
		send("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": resp.StopReason, "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": resp.Usage.OutputTokens}})
		send("message_stop", map[string]any{"type": "message_stop"})
	}
}

// uncached turns a Messages API body into the fake's request: the system
// prompt's text blocks joined into a string, and cache_control removed
// from tools and message blocks (the fake answers the same with or without
// caching).
func uncached(raw []byte) ([]byte, error) {
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, err
	}
	if sys, ok := body["system"].([]any); ok {
		text := ""
		for _, b := range sys {
			if m, ok := b.(map[string]any); ok {
				s, _ := m["text"].(string)
				text += s
			}
		}
		body["system"] = text
	}
	strip := func(list any) {
		items, _ := list.([]any)
		for _, it := range items {
			if m, ok := it.(map[string]any); ok {
				delete(m, "cache_control")
			}
		}
	}
	strip(body["tools"])
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		if mm, ok := m.(map[string]any); ok {
			strip(mm["content"])
		}
	}
	return json.Marshal(body)
}

// TestAgainstFake drives the same scripted conversations through the fake
// directly and through the real client talking to the fake over HTTP: both
// must give the same responses, stream events and errors.
func TestAgainstFake(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, fakeServer(modelfake.New()))
	viaHTTP := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	direct := modelfake.New()

	scripts := []string{
		"hello",
		"#think Plan: list files.\n#tool bash {\"command\":\"ls -l\"}\n#tool read {\"path\":\"é.txt\"}\n#reply All done.",
		"#parallel\n#tool glob {\"pattern\":\"*\"}\n#tool my_tool {\"nested\":{\"a\":[1,2,3]}}",
		"#reply cut short\n#stop max_tokens",
		"#error rate_limited",
		"#error overloaded",
		"#error server",
		"#error invalid",
		"#tool bash {oops",
	}
	for _, script := range scripts {
		for _, stream := range []bool{false, true} {
			msgs := []model.Message{{Role: "user", Content: []model.Block{{Type: "text", Text: script}}}}
			for round := 0; round < 5; round++ {
				req := &model.Request{Model: "claude-test", MaxTokens: 100, Messages: msgs}
				call := func(c model.Client) (*model.Response, []model.StreamEvent, error) {
					var events []model.StreamEvent
					if !stream {
						resp, err := c.Create(t.Context(), req)
						return resp, nil, err
					}
					resp, err := c.Stream(t.Context(), req, func(e model.StreamEvent) {
						if e.Type == "block_start" {
							events = append(events, e)
						}
					})
					return resp, events, err
				}
				want, wantEvents, wantErr := call(direct)
				got, gotEvents, gotErr := call(viaHTTP)
				if wantErr != nil {
					var a, b *model.Error
					if !errors.As(wantErr, &a) || !errors.As(gotErr, &b) || a.Status != b.Status || a.Type != b.Type || a.Retryable != b.Retryable || a.RetryAfter != b.RetryAfter {
						t.Errorf("%q stream=%v: error %v via HTTP, want %v", script, stream, gotErr, wantErr)
					}
					break
				}
				if gotErr != nil {
					t.Fatalf("%q stream=%v round %d: %v", script, stream, round, gotErr)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%q stream=%v round %d:\n got %s\nwant %s", script, stream, round, mustJSON(t, got), mustJSON(t, want))
				}
				if !reflect.DeepEqual(gotEvents, wantEvents) {
					t.Errorf("%q round %d: block starts %+v, want %+v", script, round, gotEvents, wantEvents)
				}
				if got.StopReason != "tool_use" {
					break
				}
				msgs = append(msgs, model.Message{Role: "assistant", Content: got.Content})
				var results []model.Block
				for _, b := range got.Content {
					if b.Type == "tool_use" {
						results = append(results, model.Block{Type: "tool_result", ToolUseID: b.ID, Content: json.RawMessage(`"output of ` + b.Name + `"`)})
					}
				}
				msgs = append(msgs, model.Message{Role: "user", Content: results})
			}
		}
	}
}
