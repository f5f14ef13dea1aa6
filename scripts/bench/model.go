package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// benchCommand is the bash command of every scripted turn: cheap, and its
// output differs per call, as a real command's would.
const benchCommand = "echo $RANDOM"

// scriptedModel is a Messages API (POST /v1/messages) scripted for the
// sandbox level: a request whose last message carries a tool_result ends
// the turn with text; any other request answers with one tool_use of bash
// running benchCommand. It is stateless, so it serves any number of
// sessions at once, and answers streamed requests with server-sent events
// as the Messages API does, others with a JSON message.
type scriptedModel struct {
	calls, toolUses, toolErrors, bad atomic.Int64
	ids                              atomic.Int64
}

// modelCounts is a snapshot of what a scriptedModel answered.
type modelCounts struct {
	calls, toolUses, toolErrors, bad int64
}

func (m *scriptedModel) counts() modelCounts {
	return modelCounts{calls: m.calls.Load(), toolUses: m.toolUses.Load(), toolErrors: m.toolErrors.Load(), bad: m.bad.Load()}
}

// sub is the difference of two snapshots.
func (c modelCounts) sub(o modelCounts) modelCounts {
	return modelCounts{calls: c.calls - o.calls, toolUses: c.toolUses - o.toolUses, toolErrors: c.toolErrors - o.toolErrors, bad: c.bad - o.bad}
}

// messagesRequest is the part of a Messages API request the script reads.
type messagesRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// contentBlock is the part of a request's content block the script reads.
type contentBlock struct {
	Type    string `json:"type"`
	IsError bool   `json:"is_error"`
}

// serveScriptedModel serves m on addr and returns its base URL (for
// MANGO_MODEL_BASE_URL) and a stop function.
func serveScriptedModel(addr string, m *scriptedModel) (baseURL string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("-model-listen: %w (the scripted Messages API needs this address; the workers' MANGO_MODEL_BASE_URL points to it)", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", m.handle)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = hs.Close() }, nil
}

// errorBody writes a Messages API error envelope.
func errorBody(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}

func (m *scriptedModel) handle(w http.ResponseWriter, r *http.Request) {
	m.calls.Add(1)
	if r.Header.Get("x-api-key") == "" && r.Header.Get("authorization") == "" {
		m.bad.Add(1)
		errorBody(w, http.StatusUnauthorized, "authentication_error", "no x-api-key or Authorization header")
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	var req messagesRequest
	if err == nil {
		err = json.Unmarshal(raw, &req)
	}
	if err != nil || len(req.Messages) == 0 {
		m.bad.Add(1)
		errorBody(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("want a JSON body with messages: %v", err))
		return
	}
	last := req.Messages[len(req.Messages)-1]
	var blocks []contentBlock
	_ = json.Unmarshal(last.Content, &blocks) // a string content is a plain user message
	result := false
	for _, b := range blocks {
		if b.Type == "tool_result" {
			result = true
			if b.IsError {
				m.toolErrors.Add(1)
			}
		}
	}
	id := m.ids.Add(1)
	var block map[string]any
	var input, stop string
	if last.Role == "user" && result {
		block, stop = map[string]any{"type": "text", "text": ""}, "end_turn"
	} else {
		m.toolUses.Add(1)
		in, _ := json.Marshal(map[string]string{"command": benchCommand})
		input, stop = string(in), "tool_use"
		block = map[string]any{"type": "tool_use", "id": "toolu_bench" + strconv.FormatInt(id, 10), "name": "bash", "input": map[string]any{}}
	}
	msgID := "msg_bench" + strconv.FormatInt(id, 10)
	usage := map[string]any{"input_tokens": 50, "output_tokens": 10}
	if !req.Stream {
		if stop == "end_turn" {
			block["text"] = "Done."
		} else {
			block["input"] = json.RawMessage(input)
		}
		w.Header().Set("content-type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": msgID, "type": "message", "role": "assistant", "model": req.Model,
			"content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("cache-control", "no-cache")
	send := func(event string, v map[string]any) {
		v["type"] = event
		b, _ := json.Marshal(v)
		_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	send("message_start", map[string]any{"message": map[string]any{"id": msgID, "type": "message", "role": "assistant",
		"model": req.Model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 50, "output_tokens": 1}}})
	send("content_block_start", map[string]any{"index": 0, "content_block": block})
	send("ping", map[string]any{})
	if stop == "end_turn" {
		send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": "Done."}})
	} else {
		send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": input}})
	}
	send("content_block_stop", map[string]any{"index": 0})
	send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 10}})
	send("message_stop", map[string]any{})
}
