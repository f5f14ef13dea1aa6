package modelanthropic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelanthropic"
)

const testKey = "sk-ant-test-0123456789"

// recorded is what a test server saw of the last request.
type recorded struct {
	mu     sync.Mutex
	header http.Header
	path   string
	body   map[string]any
	raw    []byte
}

func (r *recorded) get() (http.Header, string, map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.header, r.path, r.body
}

// newServer serves handler on 127.0.0.1, recording each request.
func newServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *recorded) {
	t.Helper()
	rec := &recorded{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		rec.mu.Lock()
		rec.header, rec.path, rec.body, rec.raw = r.Header.Clone(), r.URL.Path, body, raw
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(raw))
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

func testdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replaySSE writes a recorded stream in small flushed pieces, so the client
// sees events split across reads.
func replaySSE(data []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		for len(data) > 0 {
			n := min(len(data), 37)
			_, _ = w.Write(data[:n])
			w.(http.Flusher).Flush()
			data = data[n:]
		}
	}
}

func newClient(t *testing.T, cfg modelanthropic.Config) *modelanthropic.Client {
	t.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	c, err := modelanthropic.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func simpleRequest() *model.Request {
	return &model.Request{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 1024,
		Messages:  []model.Message{{Role: "user", Content: []model.Block{{Type: "text", Text: "Hello"}}}},
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// recordedStream is a recorded SSE stream and what Stream must make of it.
type recordedStream struct {
	file       string
	wantResp   *model.Response
	wantEvents []model.StreamEvent
	// wantJSON is the content as it would be sent back, when Raw matters.
	wantJSON string
	// wantUsage, when set, is the response's usage.
	wantUsage *model.Usage
}

func TestStreamRecorded(t *testing.T) {
	t.Parallel()
	for _, tt := range recordedStreams() {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			srv, _ := newServer(t, replaySSE(testdata(t, tt.file)))
			c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
			var events []model.StreamEvent
			resp, err := c.Stream(t.Context(), simpleRequest(), func(e model.StreamEvent) { events = append(events, e) })
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if tt.wantResp != nil && !reflect.DeepEqual(resp, tt.wantResp) {
				t.Errorf("response\n%s\nwant\n%s", mustJSON(t, resp), mustJSON(t, tt.wantResp))
			}
			if tt.wantResp != nil {
				for i := range resp.Content {
					if string(resp.Content[i].Raw) != string(tt.wantResp.Content[i].Raw) {
						t.Errorf("block %d Raw %s, want %s", i, resp.Content[i].Raw, tt.wantResp.Content[i].Raw)
					}
				}
			}
			if tt.wantJSON != "" {
				if got := mustJSON(t, resp.Content); got != tt.wantJSON {
					t.Errorf("content sent back as\n%s\nwant\n%s", got, tt.wantJSON)
				}
			}
			if !reflect.DeepEqual(events, tt.wantEvents) {
				t.Errorf("events\n%+v\nwant\n%+v", events, tt.wantEvents)
			}
			if tt.wantUsage != nil && resp.Usage != *tt.wantUsage {
				t.Errorf("usage %+v, want %+v", resp.Usage, *tt.wantUsage)
			}
		})
	}
}

// recordedStreams are the recorded streams in testdata TestStreamRecorded
// replays: text, tool use, thinking and server tools.
func recordedStreams() []recordedStream {
	return []recordedStream{
		{
			file: "text.sse",
			wantResp: &model.Response{
				ID: "msg_01XFDUDYJgAACzvnptvVoYEL", Model: "claude-sonnet-4-5-20250929", StopReason: "end_turn",
				Content: []model.Block{{Type: "text", Text: "Hello! How can I help you today? ✨"}},
				Usage:   model.Usage{InputTokens: 25, OutputTokens: 15, CacheReadInputTokens: 12},
			},
			wantEvents: []model.StreamEvent{
				{Type: "block_start", Index: 0, BlockType: "text"},
				{Type: "text_delta", Index: 0, Text: "Hello"},
				{Type: "text_delta", Index: 0, Text: "! How can I"},
				{Type: "text_delta", Index: 0, Text: " help you today? ✨"},
			},
		},
		{
			file: "tool_use.sse",
			wantResp: &model.Response{
				ID: "msg_014p7gG3wDgGV9EUtLvnow3U", Model: "claude-sonnet-4-5-20250929", StopReason: "tool_use",
				Content: []model.Block{
					{Type: "text", Text: "I'll list the files."},
					{Type: "tool_use", ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "bash", Input: json.RawMessage(`{"command":"ls -la /tmp","timeout":30}`)},
				},
				Usage: model.Usage{InputTokens: 472, OutputTokens: 89},
			},
			wantEvents: []model.StreamEvent{
				{Type: "block_start", Index: 0, BlockType: "text"},
				{Type: "text_delta", Index: 0, Text: "I'll list the files."},
				{Type: "block_start", Index: 1, BlockType: "tool_use"},
			},
		},
		{
			file: "thinking.sse",
			wantResp: &model.Response{
				ID: "msg_01Aq9w938a90dw8q", Model: "claude-sonnet-4-5-20250929", StopReason: "end_turn",
				Content: []model.Block{
					{Type: "thinking", Thinking: "I need to find the GCD of 1071 and 462.\n\n1071 = 2 * 462 + 147\n462 = 3 * 147 + 21\n147 = 7 * 21", Signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
					{Type: "redacted_thinking", Raw: json.RawMessage(`{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}`)},
					{Type: "text", Text: "The GCD is 21."},
				},
				Usage: model.Usage{InputTokens: 58, OutputTokens: 112},
			},
			wantEvents: []model.StreamEvent{
				{Type: "block_start", Index: 0, BlockType: "thinking"},
				{Type: "block_start", Index: 1, BlockType: "redacted_thinking"},
				{Type: "block_start", Index: 2, BlockType: "text"},
				{Type: "text_delta", Index: 2, Text: "The GCD is "},
				{Type: "text_delta", Index: 2, Text: "21."},
			},
		},
		{
			file: "server_tools.sse",
			wantEvents: []model.StreamEvent{
				{Type: "block_start", Index: 0, BlockType: "server_tool_use"},
				{Type: "block_start", Index: 1, BlockType: "web_search_tool_result"},
				{Type: "block_start", Index: 2, BlockType: "text"},
				{Type: "text_delta", Index: 2, Text: "It is sunny and 75°F."},
			},
			wantJSON: `[` +
				`{"id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","input":{"query":"weather NYC today"},"name":"web_search","type":"server_tool_use"},` +
				`{"type":"web_search_tool_result","tool_use_id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","content":[{"type":"web_search_result","title":"Weather in New York City","url":"https://weather.example/nyc","encrypted_content":"Ev0DCioIAxgCIiQ3NmU4ZmI4OC1k","page_age":null}]},` +
				`{"citations":[{"type":"web_search_result_location","cited_text":"Sunny, 75°F","url":"https://weather.example/nyc","title":"Weather in New York City","encrypted_index":"EpMBCioIAxgC"}],"text":"It is sunny and 75°F.","type":"text"}]`,
			// message_delta's server_tool_use counts the searches.
			wantUsage: &model.Usage{InputTokens: 2679, OutputTokens: 510, WebSearchRequests: 1},
		},
	}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write(testdata(t, "message.json"))
	})
	c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	resp, err := c.Create(t.Context(), simpleRequest())
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := &model.Response{
		ID: "msg_01Rn6cPBkmzcdSpy3gvPrzNU", Model: "claude-sonnet-4-5-20250929", StopReason: "tool_use",
		Content: []model.Block{
			{Type: "text", Text: "Let me check."},
			{Type: "tool_use", ID: "toolu_01A09q90qw90lq917835lq9", Name: "read", Input: json.RawMessage(`{"path": "README.md"}`)},
		},
		Usage: model.Usage{InputTokens: 2095, OutputTokens: 503, CacheCreationInputTokens: 100, CacheReadInputTokens: 7,
			CacheCreation5mInputTokens: 60, CacheCreation1hInputTokens: 40},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Errorf("response\n%s\nwant\n%s", mustJSON(t, resp), mustJSON(t, want))
	}
	if _, _, body := rec.get(); body["stream"] != nil {
		t.Errorf("Create sent stream=%v, want no stream member", body["stream"])
	}

	// A server answering a streaming request with JSON still works.
	var events []model.StreamEvent
	sresp, err := c.Stream(t.Context(), simpleRequest(), func(e model.StreamEvent) { events = append(events, e) })
	if err != nil {
		t.Fatalf("Stream with a JSON answer: %v", err)
	}
	if !reflect.DeepEqual(sresp, want) || len(events) != 3 || events[1].Text != "Let me check." {
		t.Errorf("Stream with a JSON answer: %+v, events %+v", sresp, events)
	}
}

func TestAuthAndHeaders(t *testing.T) {
	t.Parallel()
	for _, auth := range []string{"", "x-api-key", "bearer", "Bearer"} {
		t.Run(auth, func(t *testing.T) {
			t.Parallel()
			srv, rec := newServer(t, replaySSE(testdata(t, "text.sse")))
			c := newClient(t, modelanthropic.Config{BaseURL: srv.URL + "/proxy/", Auth: auth})
			if _, err := c.Stream(t.Context(), simpleRequest(), nil); err != nil {
				t.Fatalf("Stream: %v", err)
			}
			h, path, _ := rec.get()
			if path != "/proxy/v1/messages" {
				t.Errorf("path %q, want /proxy/v1/messages", path)
			}
			if got := h.Get("anthropic-version"); got != "2023-06-01" {
				t.Errorf("anthropic-version %q", got)
			}
			if got := h.Get("content-type"); got != "application/json" {
				t.Errorf("content-type %q", got)
			}
			wantKey, wantAuthz := testKey, ""
			if strings.EqualFold(auth, "bearer") {
				wantKey, wantAuthz = "", "Bearer "+testKey
			}
			if h.Get("x-api-key") != wantKey || h.Get("authorization") != wantAuthz {
				t.Errorf("x-api-key %q authorization %q, want %q and %q", h.Get("x-api-key"), h.Get("authorization"), wantKey, wantAuthz)
			}
		})
	}
}

func TestRequestBody(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, replaySSE(testdata(t, "text.sse")))
	c := newClient(t, modelanthropic.Config{BaseURL: srv.URL, Model: "claude-override"})
	req := &model.Request{
		Model:          "claude-from-agent",
		System:         "Be brief.",
		ThinkingBudget: 2048,
		Messages: []model.Message{
			{Role: "user", Content: []model.Block{{Type: "text", Text: "list"}}},
			{Role: "assistant", Content: []model.Block{
				{Type: "thinking", Thinking: "t", Signature: "s"},
				{Type: "tool_use", ID: "toolu_1", Name: "noargs"},
			}},
			{Role: "user", Content: []model.Block{{Type: "tool_result", ToolUseID: "toolu_1", Content: json.RawMessage(`"ok"`)}}},
		},
		Tools: []model.ToolDef{
			{Name: "bash", Description: "Run a command", InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`)},
			{Name: "noargs"},
			{Type: "web_search_20250305", Name: "web_search", Raw: json.RawMessage(`{"type":"web_search_20250305","name":"web_search","max_uses":5}`)},
		},
	}
	if _, err := c.Stream(t.Context(), req, nil); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	_, _, body := rec.get()
	want := map[string]any{
		"model":      "claude-override",
		"max_tokens": float64(modelanthropic.DefaultMaxTokens),
		"system":     []any{map[string]any{"type": "text", "text": "Be brief.", "cache_control": ephemeral}},
		"stream":     true,
		"thinking":   map[string]any{"type": "enabled", "budget_tokens": 2048.0},
		"messages": []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "list", "cache_control": ephemeral}}},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "thinking", "thinking": "t", "signature": "s"},
				map[string]any{"type": "tool_use", "id": "toolu_1", "name": "noargs", "input": map[string]any{}},
			}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "cache_control": ephemeral}}},
		},
		"tools": []any{
			map[string]any{"name": "bash", "description": "Run a command", "input_schema": map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}},
			map[string]any{"name": "noargs", "input_schema": map[string]any{"type": "object"}},
			map[string]any{"type": "web_search_20250305", "name": "web_search", "max_uses": 5.0, "cache_control": ephemeral},
		},
	}
	if !reflect.DeepEqual(body, want) {
		t.Errorf("body\n%s\nwant\n%s", mustJSON(t, body), mustJSON(t, want))
	}
	// The caller's request is not modified.
	if req.Messages[1].Content[1].Input != nil || req.Tools[1].InputSchema != nil || req.Messages[2].Content[0].Raw != nil || req.Tools[2].Raw[len(req.Tools[2].Raw)-2] != '5' {
		t.Error("the request's tool_use input or tool schema was filled in place")
	}

	// Without an override the request's model is sent; no thinking member
	// without a budget.
	srv, rec = newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write(testdata(t, "message.json"))
	})
	c = newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	if _, err := c.Create(t.Context(), simpleRequest()); err != nil {
		t.Fatalf("Create: %v", err)
	}
	_, _, body = rec.get()
	if body["model"] != "claude-sonnet-4-5" || body["thinking"] != nil || body["max_tokens"] != 1024.0 || body["system"] != nil || body["tools"] != nil {
		t.Errorf("body %s: want the request's model and max_tokens, no thinking, system or tools", mustJSON(t, body))
	}

	// Without any model id nothing is sent.
	r := simpleRequest()
	r.Model = ""
	if _, err := c.Create(t.Context(), r); err == nil || !strings.Contains(err.Error(), "model") {
		t.Errorf("request without a model: %v, want an error about the model id", err)
	}
}

// errorCase is a failing response from the API and the *model.Error the
// client must turn it into.
type errorCase struct {
	name      string
	handler   http.HandlerFunc
	create    bool
	status    int
	typ       string
	retryable bool
	after     time.Duration // minimum RetryAfter; exact unless afterMax set
	afterMax  time.Duration
	inMessage string
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	tests := append(errorStatusCases(), errorStreamCases(t)...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := newServer(t, tt.handler)
			c := newClient(t, modelanthropic.Config{BaseURL: srv.URL, Timeout: 300 * time.Millisecond, MaxResponseBytes: 4096})
			var err error
			if tt.create {
				_, err = c.Create(t.Context(), simpleRequest())
			} else {
				_, err = c.Stream(t.Context(), simpleRequest(), nil)
			}
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v (%T), want *model.Error", err, err)
			}
			if me.Status != tt.status || me.Type != tt.typ || me.Retryable != tt.retryable {
				t.Errorf("got status %d type %q retryable %v (%v), want %d %q %v", me.Status, me.Type, me.Retryable, me, tt.status, tt.typ, tt.retryable)
			}
			if tt.afterMax == 0 && me.RetryAfter != tt.after || tt.afterMax > 0 && (me.RetryAfter < tt.after || me.RetryAfter > tt.afterMax) {
				t.Errorf("RetryAfter %v, want %v (up to %v)", me.RetryAfter, tt.after, tt.afterMax)
			}
			if !strings.Contains(me.Error(), tt.inMessage) {
				t.Errorf("message %q does not mention %q", me.Error(), tt.inMessage)
			}
			if strings.Contains(me.Error(), testKey) {
				t.Errorf("error %q contains the API key", me.Error())
			}
		})
	}
}

// errorEnvelope is the API's JSON error body.
func errorEnvelope(typ, msg string) string {
	return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%q},"request_id":"req_011"}`, typ, msg)
}

// respondWith answers with status, the headers and body, as JSON.
func respondWith(status int, header map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// errorStatusCases are the HTTP error statuses, their headers and bodies.
func errorStatusCases() []errorCase {
	date := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	return []errorCase{
		{name: "429 retry-after seconds", handler: respondWith(429, map[string]string{"retry-after": "7"}, errorEnvelope("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")),
			status: 429, typ: "rate_limit_error", retryable: true, after: 7 * time.Second, inMessage: "per-minute"},
		{name: "429 retry-after date", handler: respondWith(429, map[string]string{"retry-after": date}, errorEnvelope("rate_limit_error", "slow down")),
			status: 429, typ: "rate_limit_error", retryable: true, after: 25 * time.Second, afterMax: 31 * time.Second},
		{name: "429 retry-after-ms", handler: respondWith(429, map[string]string{"retry-after-ms": "1500", "retry-after": "2"}, errorEnvelope("rate_limit_error", "slow down")),
			status: 429, typ: "rate_limit_error", retryable: true, after: 1500 * time.Millisecond},
		{name: "529", handler: respondWith(529, nil, errorEnvelope("overloaded_error", "Overloaded")),
			status: 529, typ: "overloaded_error", retryable: true, inMessage: "Overloaded"},
		{name: "500", handler: respondWith(500, map[string]string{"request-id": "req_abc"}, errorEnvelope("api_error", "Internal server error")),
			status: 500, typ: "api_error", retryable: true, inMessage: "request-id req_abc"},
		{name: "502 html", handler: respondWith(502, nil, "<html>Bad Gateway</html>"),
			status: 502, typ: "api_error", retryable: true, inMessage: "Bad Gateway"},
		{name: "500 x-should-retry false", handler: respondWith(500, map[string]string{"x-should-retry": "false"}, errorEnvelope("api_error", "no")),
			status: 500, typ: "api_error", retryable: false},
		{name: "400", handler: respondWith(400, nil, errorEnvelope("invalid_request_error", "messages: roles must alternate")),
			status: 400, typ: "invalid_request_error", retryable: false, inMessage: "alternate"},
		{name: "401 key redacted", handler: respondWith(401, nil, errorEnvelope("authentication_error", "invalid x-api-key "+testKey)),
			status: 401, typ: "authentication_error", retryable: false, inMessage: "[redacted]"},
		{name: "403 no body", handler: respondWith(403, nil, ""),
			status: 403, typ: "permission_error", retryable: false, inMessage: "Forbidden"},
		{name: "408", handler: respondWith(408, nil, errorEnvelope("timeout_error", "timed out")),
			status: 408, typ: "timeout", retryable: true},
		{name: "redirect not followed", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
		}, status: 307, typ: "invalid_response", retryable: false, inMessage: "redirect"},
	}
}

// errorStreamCases are the failures of the stream and the connection: error
// events, truncation, resets, hangs, oversized and malformed responses.
func errorStreamCases(t *testing.T) []errorCase {
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	hangMidStream := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		_, _ = w.Write(testdata(t, "truncated.sse"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	reset := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		w.Header().Set("content-length", "100000")
		_, _ = w.Write(testdata(t, "truncated.sse"))
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}
	big := strings.Repeat(" ", 5000)
	return []errorCase{
		{name: "error event mid-stream", handler: replaySSE(testdata(t, "error_midstream.sse")),
			status: 529, typ: "overloaded_error", retryable: true, inMessage: "Overloaded"},
		{name: "truncated stream", handler: replaySSE(testdata(t, "truncated.sse")),
			typ: "network", retryable: true, inMessage: "message_stop"},
		{name: "connection reset mid-stream", handler: reset,
			typ: "network", retryable: true},
		{name: "hang before headers", handler: hang,
			typ: "timeout", retryable: true},
		{name: "hang mid-stream", handler: hangMidStream,
			typ: "timeout", retryable: true},
		{name: "hang create", handler: hang, create: true,
			typ: "timeout", retryable: true},
		{name: "oversized stream", handler: replaySSE([]byte(strings.Replace(testdataString(t, "text.sse"), `"Hello"`, `"`+big+`"`, 1))),
			typ: "response_too_large", retryable: false, inMessage: "4096 byte cap"},
		{name: "oversized create", handler: respondWith(200, nil, `{"id":"msg","content":[{"type":"text","text":"`+big+`"}]}`), create: true,
			typ: "response_too_large", retryable: false, inMessage: "4096 byte cap"},
		{name: "malformed event", handler: replaySSE([]byte("event: message_start\ndata: {nope\n\n")),
			typ: "invalid_response", retryable: false},
		{name: "broken tool input", handler: replaySSE([]byte(strings.ReplaceAll(testdataString(t, "tool_use.sse"), `30}`, `30`))),
			typ: "invalid_response", retryable: false, inMessage: "input_json_delta"},
	}
}

func testdataString(t *testing.T, name string) string { return string(testdata(t, name)) }

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c := newClient(t, modelanthropic.Config{BaseURL: "http://" + addr})
	_, err = c.Create(t.Context(), simpleRequest())
	var me *model.Error
	if !errors.As(err, &me) || me.Type != "network" || !me.Retryable {
		t.Errorf("error %v, want a retryable network *model.Error", err)
	}
}

func TestCallerCancel(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		_, _ = w.Write(testdata(t, "truncated.sse"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	c := newClient(t, modelanthropic.Config{BaseURL: srv.URL})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Stream(ctx, simpleRequest(), func(e model.StreamEvent) {
			if e.Type == "text_delta" {
				cancel()
			}
		})
		done <- err
	}()
	select {
	case err := <-done:
		var me *model.Error
		if !errors.Is(err, context.Canceled) || errors.As(err, &me) {
			t.Errorf("error %v, want context.Canceled and no *model.Error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not return after cancellation")
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, cfg := range []modelanthropic.Config{
		{APIKey: ""},
		{APIKey: "k", BaseURL: "ftp://x"},
		{APIKey: "k", BaseURL: "not a url"},
		{APIKey: "k", BaseURL: "https://user:pw@host"},
		{APIKey: "k", Auth: "basic"},
	} {
		if _, err := modelanthropic.New(cfg); err == nil {
			t.Errorf("New(%v) succeeded, want an error", cfg)
		}
	}
	cfg := modelanthropic.Config{APIKey: testKey}
	c, err := modelanthropic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg), fmt.Sprintf("%v %+v %#v", c, c, c)} {
		if strings.Contains(s, testKey) {
			t.Errorf("printed form %q contains the API key", s)
		}
	}
}
