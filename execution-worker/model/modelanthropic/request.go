package modelanthropic

import (
	"cmp"
	"encoding/json"
	"fmt"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/model"
)

// params builds the SDK's request parameters from req. Blocks and tool
// definitions the SDK's types cannot carry exactly (raw blocks kept from
// earlier responses, server tools, a tool_result's content, input
// schemas) are sent as their own JSON through param.Override and
// SetExtraFields. The caller's request is not modified.
func (c *Client) params(req *model.Request) (anthropic.MessageNewParams, error) {
	if req == nil {
		return anthropic.MessageNewParams{}, &model.Error{Type: "invalid_request_error", Message: "request is nil"}
	}
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(cmp.Or(c.model, req.Model)),
		MaxTokens: defaults.Positive(int64(req.MaxTokens), DefaultMaxTokens),
	}
	if p.Model == "" {
		return p, &model.Error{Type: "invalid_request_error", Message: "no model id: set the agent's model or MANGO_MODEL_ID"}
	}
	if req.ThinkingBudget > 0 {
		p.Thinking.OfEnabled = &anthropic.ThinkingConfigEnabledParam{BudgetTokens: int64(req.ThinkingBudget)}
	}
	if req.ToolChoice != nil {
		tc, err := toolChoiceParam(*req.ToolChoice, req.ThinkingBudget)
		if err != nil {
			return p, &model.Error{Type: "invalid_request_error", Message: "tool_choice: " + err.Error()}
		}
		p.ToolChoice = tc
	}
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System, CacheControl: anthropic.NewCacheControlEphemeralParam()}}
	}
	for i, d := range req.Tools {
		t, err := toolParam(d, i == len(req.Tools)-1)
		if err != nil {
			return p, &model.Error{Type: "invalid_request_error", Message: fmt.Sprintf("tool %d: %v", i, err)}
		}
		p.Tools = append(p.Tools, t)
	}
	marks := cachePoints(req.Messages)
	p.Messages = make([]anthropic.MessageParam, 0, len(req.Messages))
	for i, m := range req.Messages {
		content := make([]anthropic.ContentBlockParamUnion, 0, len(m.Content))
		for j, b := range m.Content {
			bp, err := blockParam(b, marks[i] == j+1)
			if err != nil {
				return p, &model.Error{Type: "invalid_request_error", Message: fmt.Sprintf("message %d block %d: %v", i, j, err)}
			}
			content = append(content, bp)
		}
		switch m.Role {
		case "user":
			p.Messages = append(p.Messages, anthropic.MessageParam{OfUser: &anthropic.UserMessageParam{Content: content}})
		case "assistant":
			p.Messages = append(p.Messages, anthropic.MessageParam{OfAssistant: &anthropic.AssistantMessageParam{Content: content}})
		default: // sent as it is, for the API to judge
			p.Messages = append(p.Messages, param.Override[anthropic.MessageParam](struct {
				Role    string                             `json:"role"`
				Content []anthropic.ContentBlockParamUnion `json:"content"`
			}{m.Role, content}))
		}
	}
	return p, nil
}

// blockParam is the SDK parameter of one content block, with a prompt
// caching breakpoint when cache is set. A tool_use block without input is
// sent with {}, as the API requires.
func blockParam(b model.Block, cache bool) (anthropic.ContentBlockParamUnion, error) {
	var cc anthropic.CacheControlEphemeralParam
	if cache {
		cc = anthropic.NewCacheControlEphemeralParam()
	}
	switch {
	case len(b.Raw) > 0 || b.Type != "text" && b.Type != "thinking" && b.Type != "tool_use" && b.Type != "tool_result":
		raw, err := json.Marshal(b) // Raw itself when set
		if err == nil && cache {
			raw, err = withCacheControl(raw)
		}
		return param.Override[anthropic.ContentBlockParamUnion](json.RawMessage(raw)), err
	case b.Type == "text":
		return anthropic.ContentBlockParamUnion{OfText: &anthropic.TextBlockParam{Text: b.Text, CacheControl: cc}}, nil
	case b.Type == "thinking":
		return anthropic.ContentBlockParamUnion{OfThinking: &anthropic.ThinkingBlockParam{Thinking: b.Thinking, Signature: b.Signature}}, nil
	case b.Type == "tool_use":
		input := b.Input
		if len(input) == 0 {
			input = json.RawMessage(`{}`)
		}
		return anthropic.ContentBlockParamUnion{OfToolUse: &anthropic.ToolUseBlockParam{ID: b.ID, Name: b.Name, Input: input, CacheControl: cc}}, nil
	default: // tool_result
		r := &anthropic.ToolResultBlockParam{ToolUseID: b.ToolUseID, CacheControl: cc}
		if b.IsError {
			r.IsError = param.NewOpt(true)
		}
		if len(b.Content) > 0 {
			// A string or a list of blocks, as the caller wrote it; the
			// SDK's type is a list only.
			r.SetExtraFields(map[string]any{"content": b.Content})
		}
		return anthropic.ContentBlockParamUnion{OfToolResult: r}, nil
	}
}

// toolChoiceParam is the SDK parameter of a tool choice. A choice that
// forces a tool ("any", "tool") is refused with extended thinking on
// (thinkingBudget > 0): the Messages API does not allow the two together.
func toolChoiceParam(c model.ToolChoice, thinkingBudget int) (anthropic.ToolChoiceUnionParam, error) {
	var u anthropic.ToolChoiceUnionParam
	switch c.Type {
	case "auto":
		u.OfAuto = &anthropic.ToolChoiceAutoParam{}
	case "none":
		u.OfNone = &anthropic.ToolChoiceNoneParam{Type: "none"}
	case "any":
		u.OfAny = &anthropic.ToolChoiceAnyParam{}
	case "tool":
		if c.Name == "" {
			return u, fmt.Errorf(`type "tool" needs a tool name`)
		}
		u.OfTool = &anthropic.ToolChoiceToolParam{Name: c.Name}
	default:
		return u, fmt.Errorf("unknown type %q, want auto, any, tool or none", c.Type)
	}
	if c.Name != "" && c.Type != "tool" {
		return u, fmt.Errorf("type %q takes no tool name (got %q)", c.Type, c.Name)
	}
	if thinkingBudget > 0 && (u.OfAny != nil || u.OfTool != nil) {
		return u, fmt.Errorf("type %q forces a tool, which extended thinking (thinking budget %d) does not allow", c.Type, thinkingBudget)
	}
	return u, nil
}

// toolParam is the SDK parameter of one tool definition, with a prompt
// caching breakpoint when cache is set. Server tools are sent as their
// JSON; a custom tool without an input schema is declared with
// {"type":"object"}.
func toolParam(d model.ToolDef, cache bool) (anthropic.ToolUnionParam, error) {
	if len(d.Raw) > 0 || d.Type != "" {
		raw, err := json.Marshal(d)
		if err == nil && cache {
			raw, err = withCacheControl(raw)
		}
		return param.Override[anthropic.ToolUnionParam](json.RawMessage(raw)), err
	}
	schema := d.InputSchema
	if len(schema) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	t := &anthropic.ToolParam{Name: d.Name, InputSchema: param.Override[anthropic.ToolInputSchemaParam](schema)}
	if d.Description != "" {
		t.Description = param.NewOpt(d.Description)
	}
	if cache {
		t.CacheControl = anthropic.NewCacheControlEphemeralParam()
	}
	return anthropic.ToolUnionParam{OfTool: t}, nil
}

// cachePoints chooses the prompt caching breakpoints of the messages: the
// last cacheable block of each of the last two user messages, as
// message index -> block index + 1. With the breakpoints on the last tool
// definition and the system prompt that makes at most four, as the
// Messages API allows, in prefix order. In a tool loop each request is the
// previous one plus an assistant message and a user message, so the
// breakpoint on the previous request's last user message is the cached
// prefix the next request reads, and the one on its own last user message
// is written for the round after.
func cachePoints(msgs []model.Message) map[int]int {
	marks := map[int]int{}
	for i := len(msgs) - 1; i >= 0 && len(marks) < 2; i-- {
		if msgs[i].Role != "user" {
			continue
		}
		if j := cacheableBlock(msgs[i].Content); j >= 0 {
			marks[i] = j + 1
		}
	}
	return marks
}

// cacheableBlock is the index of the last block of content that can carry
// a breakpoint (not thinking, not empty text), or -1.
func cacheableBlock(content []model.Block) int {
	for j := len(content) - 1; j >= 0; j-- {
		switch b := content[j]; {
		case b.Type == "thinking" || b.Type == "redacted_thinking":
		case b.Type == "text" && b.Text == "" && len(b.Raw) == 0:
		default:
			return j
		}
	}
	return -1
}

// withCacheControl is the JSON object raw with cache_control set.
func withCacheControl(raw []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	obj["cache_control"] = json.RawMessage(`{"type":"ephemeral"}`)
	return json.Marshal(obj)
}
