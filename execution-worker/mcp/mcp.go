// Package mcp is Mango's client of remote MCP servers, built on the official
// MCP Go SDK (github.com/modelcontextprotocol/go-sdk). A [Pool] keeps one
// SDK client session per (Mango session, server URL), because each Mango
// session may present its own credentials. It speaks Streamable HTTP and
// falls back to the older HTTP+SSE transport for servers that refuse it,
// sends bearer tokens from [Credentials] and refreshes them on 401, and
// refuses servers on private networks unless allowed (package netguard).
//
// The client advertises no capabilities: servers' roots/list,
// sampling/createMessage and elicitation/create requests are refused with a
// JSON-RPC error; ping is answered.
package mcp

import (
	"encoding/json"
	"errors"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool is a tool a server offers. Pinned tool lists are stored as this
// JSON: its shape must not change.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Content is one block of a tool result.
type Content struct {
	// Type is the block type: text, image, audio, resource or
	// resource_link.
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// MimeType and Data (base64) for images and audio; Resource for
	// embedded resources (the resource object) and resource links (the
	// whole block).
	MimeType string          `json:"mimeType,omitempty"`
	Data     string          `json:"data,omitempty"`
	Resource json.RawMessage `json:"resource,omitempty"`
}

// CallResult is the result of tools/call.
type CallResult struct {
	Content []Content `json:"content"`
	IsError bool      `json:"isError"`
}

// ErrAuthFailed is the errors.Is target of every authentication failure: no
// token could be had, the server refused the token and no better one
// exists, or the server demands authentication and no credentials are
// configured.
var ErrAuthFailed = errors.New("MCP authentication failed")

// authError is an authentication failure of one server. Its message names
// the server and the reason, never a token.
type authError struct {
	url    string
	reason string
	cause  error // from Credentials, if any
}

func (e *authError) Error() string {
	msg := fmt.Sprintf("MCP server %s: authentication failed: %s", e.url, e.reason)
	if e.cause != nil {
		msg += ": " + e.cause.Error()
	}
	return msg
}

func (e *authError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrAuthFailed, e.cause}
	}
	return []error{ErrAuthFailed}
}

// tool converts an SDK tool.
func tool(t *sdk.Tool) (Tool, error) {
	out := Tool{Name: t.Name, Description: t.Description}
	if t.InputSchema != nil {
		schema, err := json.Marshal(t.InputSchema)
		if err != nil {
			return Tool{}, fmt.Errorf("input schema of tool %q: %w", t.Name, err)
		}
		out.InputSchema = schema
	}
	return out, nil
}

// callResult converts an SDK tool result: each block through its wire
// form, so every content kind keeps its fields.
func callResult(res *sdk.CallToolResult) (*CallResult, error) {
	out := &CallResult{IsError: res.IsError, Content: make([]Content, 0, len(res.Content))}
	for i, c := range res.Content {
		raw, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("content block %d of the result: %w", i, err)
		}
		var blk Content
		if err := json.Unmarshal(raw, &blk); err != nil {
			return nil, fmt.Errorf("content block %d of the result: %w", i, err)
		}
		if blk.Type == "resource_link" {
			blk.Resource = raw
		}
		out.Content = append(out.Content, blk)
	}
	return out, nil
}
