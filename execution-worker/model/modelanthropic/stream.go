package modelanthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/mangohq/mango/execution-worker/model"
)

// invalidResponse reports a response that does not follow the protocol.
func invalidResponse(format string, a ...any) *model.Error {
	return &model.Error{Type: "invalid_response", Message: fmt.Sprintf(format, a...)}
}

// readStream assembles a response from the server-sent events of r, as
// Stream does with a response body. It is accumulate over an SDK stream
// decoder, for the fuzz test.
func readStream(r io.Reader, onEvent func(model.StreamEvent)) (*model.Response, error) {
	src := &body{rc: io.NopCloser(r), n: math.MaxInt64}
	res := &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"text/event-stream"}},
		Body:       src,
		// With a request the decoder reports error events as *anthropic.Error.
		Request: &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/v1/messages"}},
	}
	stream := ssestream.NewStream[anthropic.MessageStreamEventUnion](ssestream.NewDecoder(res), nil)
	defer func() { _ = stream.Close() }()
	return accumulate(stream, src, onEvent)
}

// accumulate assembles a response from a stream of Messages API events
// with the SDK's Message.Accumulate, reporting block starts and text
// deltas to onEvent (which may be nil). A failure to read src is returned
// as it is, for the caller to classify; every other failure is a
// *model.Error.
func accumulate(stream *ssestream.Stream[anthropic.MessageStreamEventUnion], src *body, onEvent func(model.StreamEvent)) (*model.Response, error) {
	emit := func(e model.StreamEvent) {
		if onEvent != nil {
			onEvent(e)
		}
	}
	var msg anthropic.Message
	changed := map[int]bool{} // blocks that received deltas
	// Text, thinking and signature deltas are gathered here and handed to
	// the SDK's block at its stop: Accumulate appends them with string +=,
	// quadratic in a long answer's deltas (20,000 cost ~1 s of CPU).
	texts := map[int]*textDeltas{}
	for stream.Next() {
		ev := stream.Current()
		i := int(ev.Index)
		switch ev.Type {
		case "content_block_start":
			if ev.ContentBlock.Type == "" {
				return nil, invalidResponse("content block %d: content_block without a type", i)
			}
		case "content_block_delta":
			changed[i] = true
			if d := ev.Delta; d.Type == "text_delta" || d.Type == "thinking_delta" || d.Type == "signature_delta" {
				if i < 0 || i >= len(msg.Content) {
					return nil, invalidResponse("content_block_delta: content block %d has not started (%d started)", i, len(msg.Content))
				}
				t := texts[i]
				if t == nil {
					t = &textDeltas{}
					texts[i] = t
				}
				t.add(d.Type, d.Text+d.Thinking+d.Signature)
				if d.Type == "text_delta" {
					emit(model.StreamEvent{Type: "text_delta", Index: i, Text: d.Text})
				}
				continue
			}
		case "content_block_stop":
			if t := texts[i]; t != nil && i >= 0 && i < len(msg.Content) {
				t.into(&msg.Content[i])
				delete(texts, i)
			}
			if err := checkInput(msg.Content, i); err != nil {
				return nil, err
			}
		case "message_stop":
			for j, t := range texts {
				t.into(&msg.Content[j])
			}
			clear(texts)
			for j := range msg.Content {
				if err := checkInput(msg.Content, j); err != nil {
					return nil, err
				}
			}
		}
		// The SDK refreshes a block's JSON at its stop event, and every
		// block's at message_stop.
		if err := msg.Accumulate(ev); err != nil {
			return nil, invalidResponse("%s: %v", ev.Type, err)
		}
		switch ev.Type {
		case "content_block_start":
			emit(model.StreamEvent{Type: "block_start", Index: i, BlockType: ev.ContentBlock.Type})
		case "message_stop":
			return toResponse(&msg, changed)
		}
	}
	err := stream.Err()
	var ae *anthropic.Error
	switch {
	case err == nil:
		return nil, &model.Error{Type: "network", Message: "stream ended before message_stop", Retryable: true}
	case errors.As(err, &ae):
		return nil, eventError(ae.RawJSON())
	case src.err != nil:
		return nil, err
	default:
		return nil, invalidResponse("decode event: %v", err)
	}
}

// textDeltas gathers a block's text, thinking and signature deltas.
type textDeltas struct{ text, thinking, signature strings.Builder }

func (t *textDeltas) add(kind, s string) {
	switch kind {
	case "text_delta":
		t.text.WriteString(s)
	case "thinking_delta":
		t.thinking.WriteString(s)
	default:
		t.signature.WriteString(s)
	}
}

// into appends what was gathered to the block, as Accumulate would have.
func (t *textDeltas) into(cb *anthropic.ContentBlockUnion) {
	cb.Text += t.text.String()
	cb.Thinking += t.thinking.String()
	cb.Signature += t.signature.String()
}

// checkInput reports a tool block i whose input_json_delta fragments do
// not form JSON (the SDK would replace the input with {}).
func checkInput(content []anthropic.ContentBlockUnion, i int) error {
	if i < 0 || i >= len(content) {
		return nil // Accumulate reports the index
	}
	if in := content[i].Input; len(bytes.TrimSpace(in)) > 0 && !json.Valid(in) {
		return invalidResponse("content block %d: input_json_delta fragments do not form JSON", i)
	}
	return nil
}

// readMessage decodes a response that is not streamed.
func readMessage(r io.Reader) (*model.Response, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var m anthropic.Message
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, invalidResponse("decode response: %v", err)
	}
	if err := checkMessage(&m); err != nil {
		return nil, err
	}
	return toResponse(&m, nil)
}

// checkMessage rejects a decoded response body that is not a message
// object: the SDK's decoding is lenient and turns such a body into an
// empty Message.
func checkMessage(m *anthropic.Message) error {
	raw := strings.TrimSpace(m.RawJSON())
	content := m.JSON.Content.Raw()
	if !strings.HasPrefix(raw, "{") || content != "" && content != "null" && !m.JSON.Content.Valid() {
		return invalidResponse("response is not a message: %.200s", raw)
	}
	return nil
}

// toResponse converts a Message: text, tool_use and thinking blocks are
// decoded into model.Block fields, and every other block (and any block
// with members Block does not model) also keeps its JSON in Block.Raw, so
// it is sent back unchanged. A block in changed was assembled from deltas;
// its JSON is normalized (compact, members in order) as Mango has always
// stored it.
func toResponse(m *anthropic.Message, changed map[int]bool) (*model.Response, error) {
	if string(m.Type) == "error" {
		return nil, eventError(m.RawJSON())
	}
	u := m.Usage
	resp := &model.Response{
		ID: m.ID, Model: string(m.Model), StopReason: string(m.StopReason),
		Content: make([]model.Block, 0, len(m.Content)),
		Usage: model.Usage{
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheReadInputTokens: u.CacheReadInputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens,
			CacheCreation5mInputTokens: u.CacheCreation.Ephemeral5mInputTokens, CacheCreation1hInputTokens: u.CacheCreation.Ephemeral1hInputTokens,
			WebSearchRequests: u.ServerToolUse.WebSearchRequests, WebFetchRequests: u.ServerToolUse.WebFetchRequests,
		},
	}
	for i, cb := range m.Content {
		raw := []byte(cb.RawJSON())
		if changed[i] {
			// Re-encode through a map: members sorted, values compact.
			var members map[string]json.RawMessage
			if json.Unmarshal(raw, &members) == nil {
				raw, _ = json.Marshal(members) // decoded JSON always encodes
			}
		}
		var b model.Block
		err := json.Unmarshal(raw, &b)
		if err == nil && b.Type == "" {
			err = errors.New("block without a type")
		}
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
	if onEvent == nil {
		return
	}
	for i, b := range resp.Content {
		onEvent(model.StreamEvent{Type: "block_start", Index: i, BlockType: b.Type})
		if b.Type == "text" && b.Text != "" {
			onEvent(model.StreamEvent{Type: "text_delta", Index: i, Text: b.Text})
		}
	}
}

// eventError classifies an error reported inside a 200 response (an
// error event, or an error object as the body), giving it the status the
// same error has as an HTTP response.
func eventError(raw string) *model.Error {
	var env struct {
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &env) != nil || env.Error == nil {
		return invalidResponse("error event without an error: %s", raw)
	}
	me := &model.Error{Type: env.Error.Type, Message: env.Error.Message}
	switch me.Type {
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

func isEventStream(contentType string) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "text/event-stream")
}
