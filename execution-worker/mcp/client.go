// Package mcp is a client of remote MCP servers over the Streamable HTTP
// transport (MCP 2025-06-18): JSON-RPC requests POSTed to the server's
// URL, answered either with one JSON body or with a text/event-stream whose
// events carry JSON-RPC messages. It covers what the agent runtime needs:
// initialize, tools/list (with pagination) and tools/call. Authentication
// and the deprecated HTTP+SSE transport are not supported.
package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// ProtocolVersion is the MCP revision the client speaks.
const ProtocolVersion = "2025-06-18"

// maxResponse bounds one response body (or one SSE event).
const maxResponse = 16 << 20

// Tool is a tool a server offers.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Content is one block of a tool result.
type Content struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// MimeType and Data (base64) for images and audio; Resource for
	// embedded resources.
	MimeType string          `json:"mimeType,omitempty"`
	Data     string          `json:"data,omitempty"`
	Resource json.RawMessage `json:"resource,omitempty"`
}

// CallResult is the result of tools/call.
type CallResult struct {
	Content []Content `json:"content"`
	IsError bool      `json:"isError"`
}

// RPCError is a JSON-RPC error answered by the server.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// Session is an initialized connection to one server. It is safe for
// concurrent use; an expired server session is initialized again once.
type Session struct {
	url  string
	http *http.Client
	name string // the client name sent in initialize

	mu       sync.Mutex
	id       string // Mcp-Session-Id, when the server assigned one
	version  string // negotiated protocol version
	inited   bool
	nextID   atomic.Int64
	initOnce sync.Mutex
}

// New returns a session for the server at url; Connect or the first call
// initializes it. client may be nil (http.DefaultClient).
func New(url string, client *http.Client, clientName string) *Session {
	if client == nil {
		client = http.DefaultClient
	}
	return &Session{url: url, http: client, name: clientName}
}

// Connect initializes the session (initialize, then
// notifications/initialized) unless it already is.
func (s *Session) Connect(ctx context.Context) error {
	s.initOnce.Lock()
	defer s.initOnce.Unlock()
	s.mu.Lock()
	done := s.inited
	s.mu.Unlock()
	if done {
		return nil
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	params := map[string]any{
		"protocolVersion": ProtocolVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": s.name, "version": "1"},
	}
	h, err := s.call(ctx, "initialize", params, &res, false)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	s.mu.Lock()
	s.id, s.version, s.inited = h.Get("Mcp-Session-Id"), res.ProtocolVersion, true
	s.mu.Unlock()
	if err := s.notify(ctx, "notifications/initialized"); err != nil {
		return fmt.Errorf("initialized notification: %w", err)
	}
	return nil
}

// ListTools returns every tool the server offers, following pagination.
func (s *Session) ListTools(ctx context.Context) ([]Tool, error) {
	var all []Tool
	cursor := ""
	for page := 0; page < 100; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		var res struct {
			Tools      []Tool `json:"tools"`
			NextCursor string `json:"nextCursor"`
		}
		if err := s.request(ctx, "tools/list", params, &res); err != nil {
			return nil, err
		}
		all = append(all, res.Tools...)
		if res.NextCursor == "" || res.NextCursor == cursor {
			return all, nil
		}
		cursor = res.NextCursor
	}
	return nil, errors.New("tools/list: more than 100 pages")
}

// CallTool calls a tool with arguments (a JSON object).
func (s *Session) CallTool(ctx context.Context, name string, arguments json.RawMessage) (*CallResult, error) {
	if len(arguments) == 0 {
		arguments = json.RawMessage(`{}`)
	}
	var res CallResult
	if err := s.request(ctx, "tools/call", map[string]any{"name": name, "arguments": arguments}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// request initializes if needed and makes one call; a 404 for a session the
// server has forgotten initializes again and retries once.
func (s *Session) request(ctx context.Context, method string, params, out any) error {
	if err := s.Connect(ctx); err != nil {
		return err
	}
	_, err := s.call(ctx, method, params, out, true)
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusNotFound && s.sessionID() != "" {
		s.mu.Lock()
		s.inited, s.id = false, ""
		s.mu.Unlock()
		if err := s.Connect(ctx); err != nil {
			return err
		}
		_, err = s.call(ctx, method, params, out, true)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

func (s *Session) sessionID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.status, e.body)
}

func (s *Session) post(ctx context.Context, msg any, session bool) (*http.Response, error) {
	body, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session {
		s.mu.Lock()
		id, version := s.id, s.version
		s.mu.Unlock()
		if id != "" {
			req.Header.Set("Mcp-Session-Id", id)
		}
		if version != "" {
			req.Header.Set("MCP-Protocol-Version", version)
		}
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		_ = resp.Body.Close()
		return nil, &httpError{status: resp.StatusCode, body: strings.TrimSpace(string(data))}
	}
	return resp, nil
}

func (s *Session) notify(ctx context.Context, method string) error {
	resp, err := s.post(ctx, map[string]any{"jsonrpc": "2.0", "method": method}, true)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse))
	return resp.Body.Close()
}

// message is a JSON-RPC message from the server.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *RPCError       `json:"error"`
}

// call sends one request and decodes its result into out.
func (s *Session) call(ctx context.Context, method string, params, out any, session bool) (http.Header, error) {
	id := s.nextID.Add(1)
	resp, err := s.post(ctx, map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}, session)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	want := fmt.Sprint(id)
	var msg *message
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var m message
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponse)).Decode(&m); err != nil {
			return nil, fmt.Errorf("malformed response: %w", err)
		}
		msg = &m
	case "text/event-stream":
		if msg, err = readStream(resp.Body, want); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unexpected Content-Type %q (want application/json or text/event-stream)", resp.Header.Get("Content-Type"))
	}
	if string(msg.ID) != want {
		return nil, fmt.Errorf("response id %s does not match request id %s", msg.ID, want)
	}
	if msg.Error != nil {
		return nil, msg.Error
	}
	if out != nil {
		if err := json.Unmarshal(msg.Result, out); err != nil {
			return nil, fmt.Errorf("malformed %s result: %w", method, err)
		}
	}
	return resp.Header, nil
}

// readStream reads server-sent events until the JSON-RPC response whose id
// is want; requests and notifications from the server are skipped.
func readStream(r io.Reader, want string) (*message, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxResponse)
	var data strings.Builder
	for {
		more := sc.Scan()
		line := sc.Text()
		if !more || line == "" {
			if data.Len() > 0 {
				var m message
				if err := json.Unmarshal([]byte(data.String()), &m); err != nil {
					return nil, fmt.Errorf("malformed event in the response stream: %w", err)
				}
				if m.Method == "" && string(m.ID) == want {
					return &m, nil
				}
				data.Reset()
			}
			if !more {
				if err := sc.Err(); err != nil {
					return nil, fmt.Errorf("read response stream: %w", err)
				}
				return nil, errors.New("response stream ended without the response")
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "data:"); ok {
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(v, " "))
		}
	}
}
