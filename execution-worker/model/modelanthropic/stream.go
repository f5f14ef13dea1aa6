package modelanthropic

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/mangohq/mango/execution-worker/model"
)

// wireResponse is a Messages API response, and the message of
// message_start.
type wireResponse struct {
	Type       string            `json:"type"`
	ID         string            `json:"id"`
	Model      string            `json:"model"`
	Content    []json.RawMessage `json:"content"`
	StopReason string            `json:"stop_reason"`
	Usage      wireUsage         `json:"usage"`
	Error      *wireError        `json:"error"`
}

type wireError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// wireUsage has pointers so that message_delta updates only the counts it
// carries.
type wireUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheCreation            *struct {
		Ephemeral5m *int64 `json:"ephemeral_5m_input_tokens"`
		Ephemeral1h *int64 `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
	ServerToolUse *struct {
		WebSearchRequests *int64 `json:"web_search_requests"`
		WebFetchRequests  *int64 `json:"web_fetch_requests"`
	} `json:"server_tool_use"`
}

func (u wireUsage) apply(dst *model.Usage) {
	set := func(dst *int64, src *int64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&dst.InputTokens, u.InputTokens)
	set(&dst.OutputTokens, u.OutputTokens)
	set(&dst.CacheReadInputTokens, u.CacheReadInputTokens)
	set(&dst.CacheCreationInputTokens, u.CacheCreationInputTokens)
	if c := u.CacheCreation; c != nil {
		set(&dst.CacheCreation5mInputTokens, c.Ephemeral5m)
		set(&dst.CacheCreation1hInputTokens, c.Ephemeral1h)
	}
	if t := u.ServerToolUse; t != nil {
		set(&dst.WebSearchRequests, t.WebSearchRequests)
		set(&dst.WebFetchRequests, t.WebFetchRequests)
	}
}

// invalidResponse reports a response that does not follow the protocol.
func invalidResponse(format string, a ...any) *model.Error {
	return &model.Error{Type: "invalid_response", Message: fmt.Sprintf(format, a...)}
}

// readJSON decodes a non-streamed response.
func readJSON(r io.Reader) (*model.Response, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var w wireResponse
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, invalidResponse("decode response: %v", err)
	}
	if w.Type == "error" && w.Error != nil {
		return nil, eventError(w.Error)
	}
	resp := &model.Response{ID: w.ID, Model: w.Model, StopReason: w.StopReason, Content: []model.Block{}}
	w.Usage.apply(&resp.Usage)
	for i, rb := range w.Content {
		b, err := decodeBlock(rb)
		if err != nil {
			return nil, invalidResponse("content block %d: %v", i, err)
		}
		resp.Content = append(resp.Content, b)
	}
	return resp, nil
}

// replay reports a complete response as stream events, for a server that
// answered a streaming request with plain JSON.
func replay(resp *model.Response, onEvent func(model.StreamEvent)) {
	for i, b := range resp.Content {
		onEvent(model.StreamEvent{Type: "block_start", Index: i, BlockType: b.Type})
		if b.Type == "text" && b.Text != "" {
			onEvent(model.StreamEvent{Type: "text_delta", Index: i, Text: b.Text})
		}
	}
}

// decodeBlock decodes one content block; model.Block keeps its JSON in Raw
// when it cannot represent the block exactly.
func decodeBlock(raw json.RawMessage) (model.Block, error) {
	var b model.Block
	if err := json.Unmarshal(raw, &b); err != nil {
		return model.Block{}, err
	}
	if b.Type == "" {
		return model.Block{}, errors.New("block without a type")
	}
	return b, nil
}

// blockAcc accumulates one streamed content block.
type blockAcc struct {
	start      json.RawMessage
	first      model.Block // start decoded
	text       strings.Builder
	thinking   strings.Builder
	signature  strings.Builder
	partial    strings.Builder
	citations  []json.RawMessage
	changed    bool
	hasText    bool
	hasThink   bool
	hasSig     bool
	hasPartial bool
}

// finish assembles the final block.
func (a *blockAcc) finish() (model.Block, error) {
	if !a.changed {
		return decodeBlock(a.start)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(a.start, &members); err != nil {
		return model.Block{}, err
	}
	put := func(k string, v any) {
		b, _ := json.Marshal(v) // strings and raw JSON always encode
		members[k] = b
	}
	if a.hasText {
		put("text", a.first.Text+a.text.String())
	}
	if a.hasThink {
		put("thinking", a.first.Thinking+a.thinking.String())
	}
	if a.hasSig {
		put("signature", a.first.Signature+a.signature.String())
	}
	if a.hasPartial && strings.TrimSpace(a.partial.String()) != "" {
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(a.partial.String())); err != nil {
			return model.Block{}, fmt.Errorf("input_json_delta fragments do not form JSON: %v", err)
		}
		members["input"] = buf.Bytes()
	}
	if len(a.citations) > 0 {
		var all []json.RawMessage
		if prev := members["citations"]; len(prev) > 0 && string(prev) != "null" {
			if err := json.Unmarshal(prev, &all); err != nil {
				return model.Block{}, fmt.Errorf("citations: %v", err)
			}
		}
		put("citations", append(all, a.citations...))
	}
	raw, err := json.Marshal(members)
	if err != nil {
		return model.Block{}, err
	}
	return decodeBlock(raw)
}

type wireEvent struct {
	Type         string          `json:"type"`
	Message      *wireResponse   `json:"message"`
	Index        int             `json:"index"`
	ContentBlock json.RawMessage `json:"content_block"`
	Delta        json.RawMessage `json:"delta"`
	Usage        *wireUsage      `json:"usage"`
	Error        *wireError      `json:"error"`
}

type wireDelta struct {
	Type        string          `json:"type"`
	Text        string          `json:"text"`
	PartialJSON string          `json:"partial_json"`
	Thinking    string          `json:"thinking"`
	Signature   string          `json:"signature"`
	Citation    json.RawMessage `json:"citation"`
	StopReason  string          `json:"stop_reason"`
}

// readStream assembles a response from server-sent events, reporting
// block starts and text deltas to onEvent (which may be nil). Errors from
// r are returned as they are, for the caller to classify.
func readStream(r io.Reader, onEvent func(model.StreamEvent)) (*model.Response, error) {
	emit := func(e model.StreamEvent) {
		if onEvent != nil {
			onEvent(e)
		}
	}
	sse := &sseReader{br: bufio.NewReader(r)}
	resp := &model.Response{}
	blocks := map[int]*blockAcc{}
	var content = map[int]model.Block{}
	for {
		name, data, err := sse.next()
		if errors.Is(err, io.EOF) {
			return nil, &model.Error{Type: "network", Message: "stream ended before message_stop", Retryable: true}
		}
		if err != nil {
			return nil, err
		}
		var ev wireEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			if name == "" {
				continue // not an Anthropic event, e.g. "data: [DONE]"
			}
			return nil, invalidResponse("event %s: %v", name, err)
		}
		if name == "" {
			name = ev.Type
		}
		switch name {
		case "message_start":
			if ev.Message != nil {
				resp.ID, resp.Model = ev.Message.ID, ev.Message.Model
				ev.Message.Usage.apply(&resp.Usage)
			}
		case "content_block_start":
			if blocks[ev.Index] != nil {
				return nil, invalidResponse("content block %d started twice", ev.Index)
			}
			a := &blockAcc{start: ev.ContentBlock}
			if err := json.Unmarshal(ev.ContentBlock, &a.first); err != nil || a.first.Type == "" {
				return nil, invalidResponse("content block %d: bad content_block %s", ev.Index, ev.ContentBlock)
			}
			blocks[ev.Index] = a
			emit(model.StreamEvent{Type: "block_start", Index: ev.Index, BlockType: a.first.Type})
		case "content_block_delta":
			a := blocks[ev.Index]
			if a == nil {
				return nil, invalidResponse("delta for content block %d that did not start", ev.Index)
			}
			var d wireDelta
			if err := json.Unmarshal(ev.Delta, &d); err != nil {
				return nil, invalidResponse("content block %d delta: %v", ev.Index, err)
			}
			switch d.Type {
			case "text_delta":
				a.text.WriteString(d.Text)
				a.hasText, a.changed = true, true
				emit(model.StreamEvent{Type: "text_delta", Index: ev.Index, Text: d.Text})
			case "input_json_delta":
				a.partial.WriteString(d.PartialJSON)
				a.hasPartial, a.changed = true, true
			case "thinking_delta":
				a.thinking.WriteString(d.Thinking)
				a.hasThink, a.changed = true, true
			case "signature_delta":
				a.signature.WriteString(d.Signature)
				a.hasSig, a.changed = true, true
			case "citations_delta":
				if len(d.Citation) > 0 {
					a.citations = append(a.citations, d.Citation)
					a.changed = true
				}
			}
		case "content_block_stop":
			a := blocks[ev.Index]
			if a == nil {
				return nil, invalidResponse("stop for content block %d that did not start", ev.Index)
			}
			b, err := a.finish()
			if err != nil {
				return nil, invalidResponse("content block %d: %v", ev.Index, err)
			}
			content[ev.Index] = b
		case "message_delta":
			var d wireDelta
			if len(ev.Delta) > 0 {
				if err := json.Unmarshal(ev.Delta, &d); err != nil {
					return nil, invalidResponse("message_delta: %v", err)
				}
			}
			if d.StopReason != "" {
				resp.StopReason = d.StopReason
			}
			if ev.Usage != nil {
				ev.Usage.apply(&resp.Usage)
			}
		case "message_stop":
			resp.Content = make([]model.Block, 0, len(blocks))
			for _, i := range slices.Sorted(maps.Keys(blocks)) {
				b, ok := content[i]
				if !ok {
					// A block that never saw content_block_stop: finish it.
					var err error
					if b, err = blocks[i].finish(); err != nil {
						return nil, invalidResponse("content block %d: %v", i, err)
					}
				}
				resp.Content = append(resp.Content, b)
			}
			return resp, nil
		case "error":
			if ev.Error == nil {
				return nil, invalidResponse("error event without an error: %s", data)
			}
			return nil, eventError(ev.Error)
		}
	}
}

// eventError classifies an error reported inside a 200 response, giving
// it the status the same error has as an HTTP response.
func eventError(e *wireError) *model.Error {
	me := &model.Error{Type: e.Type, Message: e.Message}
	switch e.Type {
	case "rate_limit_error":
		me.Status, me.Retryable = 429, true
	case "overloaded_error":
		me.Status, me.Retryable = 529, true
	case "api_error":
		me.Status, me.Retryable = 500, true
	case "timeout_error":
		me.Status, me.Retryable = 504, true
	case "invalid_request_error":
		me.Status = 400
	case "authentication_error":
		me.Status = 401
	case "permission_error":
		me.Status = 403
	case "not_found_error":
		me.Status = 404
	case "request_too_large":
		me.Status = 413
	default:
		// An unknown failure mid-stream is most likely transient.
		me.Retryable = true
	}
	if me.Type == "" {
		me.Type = "api_error"
	}
	return me
}

// sseReader reads server-sent events (text/event-stream).
type sseReader struct {
	br *bufio.Reader
}

// next returns the next event's name (empty without an event: line) and
// data. An event cut off by the end of the stream is dropped, as the SSE
// specification requires, and io.EOF returned.
func (s *sseReader) next() (string, []byte, error) {
	var name string
	var data []byte
	hasData := false
	for {
		line, err := s.br.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return "", nil, io.EOF
			}
			return "", nil, err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) == 0 {
			if hasData {
				return name, data, nil
			}
			name = ""
			continue
		}
		if line[0] == ':' {
			continue // comment, e.g. ": ping"
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		}
	}
}
