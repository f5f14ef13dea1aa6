package modelanthropic_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelanthropic"
)

// The SDK reads ANTHROPIC_* variables unless told not to; the worker's
// configuration alone decides where requests go and what they carry.
func TestIgnoresSDKEnvironment(t *testing.T) {
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "env-token")
	t.Setenv("ANTHROPIC_API_KEY", "env-key")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-From-Env: 1")
	srv, rec := newServer(t, replaySSE(testdata(t, "text.sse")))
	c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	if _, err := c.Stream(t.Context(), simpleRequest(), nil); err != nil {
		t.Fatalf("Stream: %v (want the configured base URL, not ANTHROPIC_BASE_URL)", err)
	}
	h, _, _ := rec.get()
	if h.Get("x-api-key") != testKey || h.Get("authorization") != "" || h.Get("x-from-env") != "" {
		t.Errorf("x-api-key %q authorization %q x-from-env %q, want the configured key only", h.Get("x-api-key"), h.Get("authorization"), h.Get("x-from-env"))
	}
}

// The SDK decodes leniently: a 200 body that is not a message object would
// become an empty response. It is an invalid_response instead.
func TestNotAMessage(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`[1]`, `"text"`, `{"content":"x"}`, `{"content":[1]}`, `{"content":[{"text":"no type"}]}`} {
		t.Run(body, func(t *testing.T) {
			t.Parallel()
			srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("content-type", "application/json")
				_, _ = io.WriteString(w, body)
			})
			c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
			for _, stream := range []bool{false, true} {
				var resp *model.Response
				var err error
				if stream {
					resp, err = c.Stream(t.Context(), simpleRequest(), nil)
				} else {
					resp, err = c.Create(t.Context(), simpleRequest())
				}
				var me *model.Error
				if !errors.As(err, &me) || me.Type != "invalid_response" || me.Retryable {
					t.Errorf("stream=%v: response %+v, error %v; want a non-retryable invalid_response", stream, resp, err)
				}
			}
		})
	}
}

// A request whose raw JSON does not encode fails before anything is sent,
// as a non-retryable invalid_request_error (not a network error).
func TestRequestDoesNotEncode(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	broken := json.RawMessage(`{broken`)
	for name, mutate := range map[string]func(*model.Request){
		"raw block": func(r *model.Request) {
			r.Messages[0].Content = append(r.Messages[0].Content, model.Block{Type: "x", Raw: broken})
		},
		"tool_result": func(r *model.Request) {
			r.Messages[0].Content = []model.Block{{Type: "tool_result", ToolUseID: "t", Content: broken}}
		},
		"input schema": func(r *model.Request) { r.Tools = []model.ToolDef{{Name: "a", InputSchema: broken}, {Name: "b"}} },
		"cached server tool": func(r *model.Request) {
			r.Tools = []model.ToolDef{{Name: "s", Type: "web_search_20250305", Raw: broken}}
		},
	} {
		req := simpleRequest()
		mutate(req)
		_, err := c.Stream(t.Context(), req, nil)
		var me *model.Error
		if !errors.As(err, &me) || me.Type != "invalid_request_error" || me.Retryable {
			t.Errorf("%s: error %v, want a non-retryable invalid_request_error", name, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests reached the server, want none", n)
	}
}

// Unstreamed, the SDK refuses a max_tokens it expects to take over ten
// minutes unless the call has a timeout of its own; Config.Timeout is it.
func TestCreateLargeMaxTokens(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write(testdata(t, "message.json"))
	})
	c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	req := simpleRequest()
	req.MaxTokens = 64000
	if _, err := c.Create(t.Context(), req); err != nil {
		t.Fatalf("Create with max_tokens 64000: %v, want the response", err)
	}
	if _, _, body := rec.get(); body["max_tokens"] != 64000.0 {
		t.Errorf("max_tokens %v, want 64000", body["max_tokens"])
	}
}

// A role other than user or assistant is sent as it is, for the API to
// judge, with its blocks encoded like any other message's.
func TestOtherRoleSentAsIs(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, replaySSE(testdata(t, "text.sse")))
	c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	req := simpleRequest()
	req.Messages = append([]model.Message{{Role: "system", Content: []model.Block{{Type: "text", Text: "sys"}}}}, req.Messages...)
	if _, err := c.Stream(t.Context(), req, nil); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	_, _, body := rec.get()
	msgs, _ := body["messages"].([]any)
	want := map[string]any{"role": "system", "content": []any{map[string]any{"type": "text", "text": "sys"}}}
	if len(msgs) != 2 || !reflect.DeepEqual(msgs[0], want) {
		t.Errorf("messages %s: want the system-role message %s first", mustJSON(t, msgs), mustJSON(t, want))
	}
}
