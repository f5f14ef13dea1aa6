// Package eventspec validates the events clients send to a session:
// user.message, user.interrupt, user.custom_tool_result,
// user.tool_confirmation and user.tool_result (the answer of a
// self-hosted worker to a built-in tool call). Each is checked strictly and normalised into the
// body stored in the event log.
package eventspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mangohq/mango/api-server/internal/jsonx"
)

// Event types a client may send.
const (
	UserMessage          = "user.message"
	UserInterrupt        = "user.interrupt"
	UserCustomToolResult = "user.custom_tool_result"
	UserToolConfirmation = "user.tool_confirmation"
	UserToolResult       = "user.tool_result"
	// SystemMessage is privileged context for the turn it accompanies and
	// every later one: appended to the session's system context.
	SystemMessage = "system.message"
	// UserDefineOutcome defines what "done" means for the session: the
	// agent works on its description, a grader checks the work against
	// its rubric (outcome.go).
	UserDefineOutcome = "user.define_outcome"
)

// Limits.
const (
	MaxEventsPerRequest = 50
	MaxContentBlocks    = 100
	MaxTextLen          = 1 << 20
)

// Event is a validated client event.
type Event struct {
	// Type is the event type.
	Type string
	// Body is the stored body: the event's members other than id, type and
	// processed_at.
	Body json.RawMessage
	// ToolUseID is the answered tool use of a tool result or confirmation.
	ToolUseID string
	// ThreadID is the session thread the event is for (session_thread_id
	// of an interrupt, a custom tool result or a confirmation); empty:
	// the session's (an interrupt stops every thread; an answer goes to
	// the thread of the tool use it answers).
	ThreadID string
	// RubricFileID is the file a user.define_outcome's rubric names.
	RubricFileID string
}

// ParseSend decodes the body of POST /v1/sessions/{id}/events.
func ParseSend(body []byte) ([]Event, error) {
	var in struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := jsonx.DecodeObject(body, &in, ""); err != nil {
		return nil, err
	}
	if len(in.Events) == 0 {
		return nil, jsonx.Errorf("events", "must contain at least one event")
	}
	return ParseList(in.Events, "events", nil)
}

// ParseList validates a list of client events at path. When only is not
// nil, it lists the event types allowed.
func ParseList(raws []json.RawMessage, path string, only []string) ([]Event, error) {
	if len(raws) > MaxEventsPerRequest {
		return nil, jsonx.Errorf(path, "at most %d events are allowed, got %d", MaxEventsPerRequest, len(raws))
	}
	out := make([]Event, 0, len(raws))
	for i, raw := range raws {
		p := fmt.Sprintf("%s[%d]", path, i)
		ev, err := parse(raw, p)
		if err != nil {
			return nil, err
		}
		if only != nil && !slices.Contains(only, ev.Type) {
			return nil, jsonx.Errorf(p+".type", "%q is not accepted here (expected %v)", ev.Type, only)
		}
		out = append(out, *ev)
	}
	if err := checkSystemMessage(out, path); err != nil {
		return nil, err
	}
	if err := checkDefineOutcome(out, path); err != nil {
		return nil, err
	}
	return out, nil
}

// checkSystemMessage enforces the SDK's rule for system.message: at most
// one per request, the final event, right after the user.message,
// user.tool_result or user.custom_tool_result it accompanies.
func checkSystemMessage(events []Event, path string) error {
	for i, ev := range events {
		if ev.Type != SystemMessage {
			continue
		}
		p := fmt.Sprintf("%s[%d]", path, i)
		if i != len(events)-1 {
			return jsonx.Errorf(p, "a system.message must be the request's final event (at most one per request)")
		}
		if i == 0 || !slices.Contains([]string{UserMessage, UserToolResult, UserCustomToolResult}, events[i-1].Type) {
			return jsonx.Errorf(p, "a system.message must follow the %s, %s or %s it accompanies", UserMessage, UserToolResult, UserCustomToolResult)
		}
	}
	return nil
}

func parse(raw json.RawMessage, path string) (*Event, error) {
	typ, err := jsonx.ObjectType(raw, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case UserMessage:
		var in struct {
			Type    string            `json:"type"`
			Content []json.RawMessage `json:"content"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, err
		}
		content, err := contentBlocks(in.Content, path+".content", true, messageBlocks)
		if err != nil {
			return nil, err
		}
		return event(Event{Type: typ}, map[string]any{"content": content})
	case UserInterrupt:
		var in struct {
			Type     string `json:"type"`
			ThreadID string `json:"session_thread_id"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, err
		}
		return &Event{Type: typ, Body: json.RawMessage(`{}`), ThreadID: in.ThreadID}, nil
	case UserCustomToolResult:
		var in struct {
			Type            string            `json:"type"`
			CustomToolUseID string            `json:"custom_tool_use_id"`
			Content         []json.RawMessage `json:"content"`
			IsError         *bool             `json:"is_error"`
			ThreadID        string            `json:"session_thread_id"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, err
		}
		if in.CustomToolUseID == "" {
			return nil, jsonx.Errorf(path+".custom_tool_use_id", "is required")
		}
		content, err := contentBlocks(in.Content, path+".content", false, resultBlocks)
		if err != nil {
			return nil, err
		}
		isErr := in.IsError != nil && *in.IsError
		return event(Event{Type: typ, ToolUseID: in.CustomToolUseID, ThreadID: in.ThreadID},
			map[string]any{"custom_tool_use_id": in.CustomToolUseID, "content": content, "is_error": isErr})
	case UserToolResult:
		return toolResult(raw, path)
	case SystemMessage:
		return systemMessage(raw, path)
	case UserDefineOutcome:
		return defineOutcome(raw, path)
	case UserToolConfirmation:
		var in struct {
			Type        string  `json:"type"`
			ToolUseID   string  `json:"tool_use_id"`
			Result      string  `json:"result"`
			DenyMessage *string `json:"deny_message"`
			ThreadID    string  `json:"session_thread_id"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, err
		}
		if in.ToolUseID == "" {
			return nil, jsonx.Errorf(path+".tool_use_id", "is required")
		}
		switch in.Result {
		case "allow", "deny":
		case "":
			return nil, jsonx.Errorf(path+".result", "is required (allow or deny)")
		default:
			return nil, jsonx.Errorf(path+".result", "must be \"allow\" or \"deny\", got %q", in.Result)
		}
		body := map[string]any{"tool_use_id": in.ToolUseID, "result": in.Result}
		if in.DenyMessage != nil {
			if in.Result != "deny" {
				return nil, jsonx.Errorf(path+".deny_message", "is allowed only with result \"deny\"")
			}
			if len(*in.DenyMessage) > 10_000 {
				return nil, jsonx.Errorf(path+".deny_message", "must be at most 10000 characters")
			}
			body["deny_message"] = *in.DenyMessage
		}
		return event(Event{Type: typ, ToolUseID: in.ToolUseID, ThreadID: in.ThreadID}, body)
	case "":
		return nil, jsonx.Errorf(path+".type", "is required")
	}
	return nil, jsonx.Errorf(path+".type", "unknown event type %q (expected %s, %s, %s, %s, %s, %s or %s)", typ,
		UserMessage, UserInterrupt, UserCustomToolResult, UserToolConfirmation, UserToolResult, SystemMessage, UserDefineOutcome)
}

// systemMessage validates a system.message: text blocks only, at least
// one, none empty.
func systemMessage(raw json.RawMessage, path string) (*Event, error) {
	var in struct {
		Type    string `json:"type"`
		Content []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		} `json:"content"`
	}
	if err := jsonx.Decode(raw, &in, path); err != nil {
		return nil, err
	}
	if len(in.Content) == 0 {
		return nil, jsonx.Errorf(path+".content", "must hold at least one text block")
	}
	if len(in.Content) > MaxContentBlocks {
		return nil, jsonx.Errorf(path+".content", "at most %d blocks are allowed, got %d", MaxContentBlocks, len(in.Content))
	}
	blocks := make([]map[string]string, 0, len(in.Content))
	for i, b := range in.Content {
		bp := fmt.Sprintf("%s.content[%d]", path, i)
		if b.Type != "text" {
			return nil, jsonx.Errorf(bp+".type", "a system.message holds text blocks only, got %q", b.Type)
		}
		if b.Text == nil || *b.Text == "" {
			return nil, jsonx.Errorf(bp+".text", "must not be empty")
		}
		if len(*b.Text) > MaxTextLen {
			return nil, jsonx.Errorf(bp+".text", "must be at most %d bytes", MaxTextLen)
		}
		blocks = append(blocks, map[string]string{"type": "text", "text": *b.Text})
	}
	return event(Event{Type: SystemMessage}, map[string]any{"content": blocks})
}

// toolResult validates a user.tool_result: the result of a built-in tool
// call that a self-hosted worker ran, as the SDK's tool runner sends it.
func toolResult(raw json.RawMessage, path string) (*Event, error) {
	var in struct {
		Type      string            `json:"type"`
		ToolUseID string            `json:"tool_use_id"`
		Content   []json.RawMessage `json:"content"`
		IsError   *bool             `json:"is_error"`
	}
	if err := jsonx.Decode(raw, &in, path); err != nil {
		return nil, err
	}
	if in.ToolUseID == "" {
		return nil, jsonx.Errorf(path+".tool_use_id", "is required (the id of the agent.tool_use event this answers)")
	}
	content, err := contentBlocks(in.Content, path+".content", false, toolResultBlocks)
	if err != nil {
		return nil, err
	}
	isErr := in.IsError != nil && *in.IsError
	return event(Event{Type: UserToolResult, ToolUseID: in.ToolUseID},
		map[string]any{"tool_use_id": in.ToolUseID, "content": content, "is_error": isErr})
}

// event returns ev with body, encoded, as its Body. An encoding failure is
// an internal error (the body was built from validated input), which the
// handler answers as a 500.
func event(ev Event, body any) (*Event, error) {
	b, err := encodeBody(body)
	if err != nil {
		return nil, err
	}
	ev.Body = b
	return &ev, nil
}

// encodeBody encodes v as JSON without HTML escaping.
func encodeBody(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("eventspec: encode event body: %w", err)
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
