// Package model is the model boundary of the agent runtime: a small,
// stateless interface with regular and streaming message creation over
// Anthropic-shaped messages. Conversation state stays with the caller.
//
// Implementations: modelfake (offline, deterministic, the default) and
// modelanthropic (a real POST {base}/v1/messages endpoint).
package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Block is one content block in the provider's native shape. Exactly the
// members of its Type are set; unknown members of server blocks are kept in
// Raw so transcripts stay lossless.
type Block struct {
	Type string `json:"type"`
	// text
	Text string `json:"text,omitempty"`
	// thinking
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	// Raw is the block as received, for types this package does not model
	// (server tool blocks, redacted thinking). When set it is sent as is.
	Raw json.RawMessage `json:"-"`
}

// MarshalJSON sends Raw unchanged when present.
func (b Block) MarshalJSON() ([]byte, error) {
	if len(b.Raw) > 0 {
		return b.Raw, nil
	}
	type plain Block
	return json.Marshal(plain(b))
}

// modelled lists, per block type, the members Block represents.
var modelled = map[string]map[string]bool{
	"text":        {"type": true, "text": true},
	"thinking":    {"type": true, "thinking": true, "signature": true},
	"tool_use":    {"type": true, "id": true, "name": true, "input": true},
	"tool_result": {"type": true, "tool_use_id": true, "content": true, "is_error": true},
}

// UnmarshalJSON decodes the block's members and, when Block cannot
// represent it exactly, keeps the JSON in Raw: a type other than text,
// thinking, tool_use and tool_result, or a non-null member Block does not
// model (citations, cache_control, ...). So blocks survive a round trip
// through JSON, e.g. a stored transcript.
func (b *Block) UnmarshalJSON(data []byte) error {
	type plain Block
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*b = Block(p)
	known := modelled[b.Type]
	keep := known == nil
	if !keep {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(data, &members); err != nil {
			return err
		}
		for k, v := range members {
			if !known[k] && string(v) != "null" {
				keep = true
				break
			}
		}
	}
	if keep {
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil {
			return err
		}
		b.Raw = buf.Bytes()
	}
	return nil
}

// Message is one turn of the conversation: role "user" or "assistant".
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
}

// ToolDef declares a tool to the model.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// Type is set for server tools (e.g. "web_search_20250305"); such
	// definitions are sent as Raw.
	Type string          `json:"type,omitempty"`
	Raw  json.RawMessage `json:"-"`
}

// MarshalJSON sends Raw unchanged when present.
func (d ToolDef) MarshalJSON() ([]byte, error) {
	if len(d.Raw) > 0 {
		return d.Raw, nil
	}
	type plain ToolDef
	return json.Marshal(plain(d))
}

// Request is one model call.
type Request struct {
	Model     string    `json:"model"`
	System    string    `json:"system,omitempty"`
	Messages  []Message `json:"messages"`
	Tools     []ToolDef `json:"tools,omitempty"`
	MaxTokens int       `json:"max_tokens"`
	// ToolChoice constrains how the model uses Tools; nil leaves it to the
	// model (the provider's default, "auto").
	ToolChoice *ToolChoice `json:"tool_choice,omitempty"`
	// ThinkingBudget enables extended thinking when > 0. It cannot be
	// combined with a ToolChoice that forces a tool ("any" or "tool").
	ThinkingBudget int `json:"-"`
}

// ToolChoice is a request's tool_choice: Type "auto" (the model decides),
// "any" (some tool must be used), "tool" (the tool Name must be used) or
// "none" (no tool may be used).
type ToolChoice struct {
	Type string `json:"type"`
	// Name is the tool to use, with Type "tool" only.
	Name string `json:"name,omitempty"`
}

// Usage counts tokens of one call.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	// CacheCreation5mInputTokens and CacheCreation1hInputTokens break
	// CacheCreationInputTokens down by cache lifetime when the provider
	// reports it (both 0 otherwise).
	CacheCreation5mInputTokens int64 `json:"cache_creation_5m_input_tokens,omitempty"`
	CacheCreation1hInputTokens int64 `json:"cache_creation_1h_input_tokens,omitempty"`
	// WebSearchRequests and WebFetchRequests count the server-executed
	// tool calls of the request.
	WebSearchRequests int64 `json:"web_search_requests,omitempty"`
	WebFetchRequests  int64 `json:"web_fetch_requests,omitempty"`
}

// Response is the model's complete answer.
type Response struct {
	ID         string  `json:"id"`
	Model      string  `json:"model"`
	Content    []Block `json:"content"`
	StopReason string  `json:"stop_reason"` // end_turn, tool_use, max_tokens, stop_sequence, pause_turn, refusal
	Usage      Usage   `json:"usage"`
}

// StreamEvent is a preview while a response streams.
type StreamEvent struct {
	// Type is "block_start" (with Block.Type) or "text_delta".
	Type string
	// Index is the content block index.
	Index int
	// BlockType is the type of the block starting.
	BlockType string
	// Text is the text fragment of a text_delta.
	Text string
}

// Client creates messages. Implementations are stateless and safe for
// concurrent use.
type Client interface {
	// Create returns the complete response.
	Create(ctx context.Context, req *Request) (*Response, error)
	// Stream returns the complete response like Create, calling onEvent
	// (from the calling goroutine) as blocks start and text arrives.
	Stream(ctx context.Context, req *Request, onEvent func(StreamEvent)) (*Response, error)
}

// Error is a failed model call, classified for retries.
type Error struct {
	// Status is the HTTP status (0 for transport failures).
	Status int
	// Type is the provider's error type (rate_limit_error,
	// overloaded_error, api_error, ...) or "timeout"/"network".
	Type string
	// Message is the provider's message.
	Message string
	// Retryable reports a transient failure (429, 529, 5xx, timeouts).
	Retryable bool
	// RetryAfter is the server's Retry-After, if any.
	RetryAfter time.Duration
}

// SessionErrorType is the Managed Agents session.error type for e, one the
// official SDKs decode: overloads and rate limits by name, every other
// model failure model_request_failed_error.
func (e *Error) SessionErrorType() string {
	switch {
	case e.Type == "overloaded_error" || e.Status == 529:
		return "model_overloaded_error"
	case e.Type == "rate_limit_error" || e.Status == 429:
		return "model_rate_limited_error"
	}
	return "model_request_failed_error"
}

func (e *Error) Error() string {
	if e.Status > 0 {
		return fmt.Sprintf("model %s (%d): %s", e.Type, e.Status, e.Message)
	}
	return fmt.Sprintf("model %s: %s", e.Type, e.Message)
}

// Retryable reports whether err is a transient model failure, and the
// delay the server asked for.
func Retryable(err error) (bool, time.Duration) {
	var me *Error
	if errors.As(err, &me) {
		return me.Retryable, me.RetryAfter
	}
	return false, 0
}

// ResultText is the text of a tool_result's content: the string itself, or
// the text blocks of a block list joined by newlines (anything else as is).
func ResultText(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	var blocks []Block
	if err := json.Unmarshal(raw, &blocks); err == nil {
		var parts []string
		for _, b := range blocks {
			if b.Type == "text" {
				parts = append(parts, b.Text)
			}
		}
		return strings.Join(parts, "\n")
	}
	return string(raw)
}
