// Package mcptest is an MCP server for tests: Streamable HTTP on
// 127.0.0.1, answering with JSON bodies or (SSE set) event streams, with
// sessions (Mcp-Session-Id), paginated tools/list and a few tools:
// echo (returns its "text" argument), fail (a tool error) and big (a
// result of "size" characters).
package mcptest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/mangohq/mango/execution-worker/mcp"
)

// Server is the fake MCP server.
type Server struct {
	// URL is the endpoint to configure as the MCP server's url.
	URL string

	mu       sync.Mutex
	sse      bool
	pageSize int
	sessions map[string]bool
	seq      int
	calls    []Call
	inits    int
	lists    int
}

// Call is one tools/call the server answered.
type Call struct {
	Name      string
	Arguments map[string]any
}

// Tools are the tools the server offers.
var Tools = []mcp.Tool{
	{Name: "echo", Description: "Echo the text back.", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
	{Name: "fail", Description: "Always fails.", InputSchema: json.RawMessage(`{"type":"object"}`)},
	{Name: "big", Description: "Returns size characters.", InputSchema: json.RawMessage(`{"type":"object","properties":{"size":{"type":"integer"}}}`)},
}

// New starts a server; it is closed when tb ends.
func New(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{sessions: map[string]bool{}, pageSize: 2}
	ts := httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(ts.Close)
	s.URL = ts.URL + "/mcp"
	return s
}

// SetSSE makes the server answer requests with event streams.
func (s *Server) SetSSE(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sse = on
}

// ExpireSessions forgets every session: the next request with an old
// Mcp-Session-Id gets 404.
func (s *Server) ExpireSessions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.sessions)
}

// Calls returns the tools/call requests answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Lists counts tools/list requests.
func (s *Server) Lists() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}

// Inits counts initialize requests.
func (s *Server) Inits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inits
}

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/mcp" {
		http.Error(w, "POST /mcp only", http.StatusMethodNotAllowed)
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") || !strings.Contains(r.Header.Get("Accept"), "application/json") {
		http.Error(w, "Accept must list application/json and text/event-stream", http.StatusNotAcceptable)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req request
	if err := json.Unmarshal(body, &req); err != nil || req.JSONRPC != "2.0" {
		http.Error(w, "bad JSON-RPC", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if req.Method == "initialize" {
		s.seq++
		s.inits++
		id := "sess-" + strconv.Itoa(s.seq)
		s.sessions[id] = true
		s.mu.Unlock()
		w.Header().Set("Mcp-Session-Id", id)
		s.answer(w, req.ID, map[string]any{"protocolVersion": mcp.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}},
			"serverInfo": map[string]any{"name": "mcptest", "version": "1"}}, nil)
		return
	}
	sid := r.Header.Get("Mcp-Session-Id")
	known := s.sessions[sid]
	s.mu.Unlock()
	switch {
	case sid == "":
		http.Error(w, "missing Mcp-Session-Id", http.StatusBadRequest)
		return
	case !known:
		http.Error(w, "unknown session", http.StatusNotFound)
		return
	case r.Header.Get("MCP-Protocol-Version") != mcp.ProtocolVersion:
		http.Error(w, "missing or wrong MCP-Protocol-Version", http.StatusBadRequest)
		return
	}
	if len(req.ID) == 0 { // a notification
		w.WriteHeader(http.StatusAccepted)
		return
	}
	switch req.Method {
	case "tools/list":
		var p struct {
			Cursor string `json:"cursor"`
		}
		_ = json.Unmarshal(req.Params, &p)
		start, _ := strconv.Atoi(p.Cursor)
		s.mu.Lock()
		s.lists++
		size := s.pageSize
		s.mu.Unlock()
		end := min(start+size, len(Tools))
		res := map[string]any{"tools": Tools[start:end]}
		if end < len(Tools) {
			res["nextCursor"] = strconv.Itoa(end)
		}
		s.answer(w, req.ID, res, nil)
	case "tools/call":
		var p struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		}
		if err := json.Unmarshal(req.Params, &p); err != nil {
			s.answer(w, req.ID, nil, &mcp.RPCError{Code: -32602, Message: "invalid params"})
			return
		}
		s.mu.Lock()
		s.calls = append(s.calls, Call(p))
		s.mu.Unlock()
		switch p.Name {
		case "echo":
			s.answer(w, req.ID, mcp.CallResult{Content: []mcp.Content{{Type: "text", Text: fmt.Sprint(p.Arguments["text"])}}}, nil)
		case "fail":
			s.answer(w, req.ID, mcp.CallResult{Content: []mcp.Content{{Type: "text", Text: "it failed"}}, IsError: true}, nil)
		case "big":
			n, _ := p.Arguments["size"].(float64)
			s.answer(w, req.ID, mcp.CallResult{Content: []mcp.Content{{Type: "text", Text: strings.Repeat("b", int(n))}}}, nil)
		default:
			s.answer(w, req.ID, nil, &mcp.RPCError{Code: -32602, Message: "unknown tool " + p.Name})
		}
	default:
		s.answer(w, req.ID, nil, &mcp.RPCError{Code: -32601, Message: "method not found"})
	}
}

func (s *Server) answer(w http.ResponseWriter, id json.RawMessage, result any, rpcErr *mcp.RPCError) {
	msg := map[string]any{"jsonrpc": "2.0", "id": id}
	if rpcErr != nil {
		msg["error"] = rpcErr
	} else {
		msg["result"] = result
	}
	data, _ := json.Marshal(msg)
	s.mu.Lock()
	sse := s.sse
	s.mu.Unlock()
	if !sse {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	// A server notification first, as servers may send progress.
	_, _ = fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"working\"}}\n\n")
	_, _ = fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
}
