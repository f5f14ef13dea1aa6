// Package mcptest runs MCP servers for tests, built on the official MCP Go
// SDK and listening on 127.0.0.1: a Streamable HTTP server ([New]), a server
// speaking only the older HTTP+SSE transport ([NewLegacySSE]) and a server
// behind OAuth bearer tokens with a rotating refresh-token endpoint
// ([NewOAuth]). Every server offers the same tools, listed two per page so
// that clients must follow pagination:
//
//   - echo returns its "text" argument;
//   - fail returns a tool error result (isError);
//   - big returns a text of "size" characters;
//   - ask_client sends server-to-client requests during the call (ping,
//     roots/list, sampling/createMessage, elicitation/create) and returns
//     what happened, e.g. "ping=ok roots=error sampling=error elicitation=error".
//
// A server from [NewBlocking] also offers block, a call that waits until
// the test calls [Server.Release] or the client cancels it, for tests of a
// turn waiting on an MCP server.
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// PageSize is how many tools one tools/list page holds.
const PageSize = 2

// Server is a test MCP server.
type Server struct {
	// URL is the endpoint to configure as the MCP server's url; it ends in
	// /mcp.
	URL string

	legacy  bool
	handler atomic.Pointer[http.Handler] // swapped by ExpireSessions

	mu    sync.Mutex
	sse   bool
	calls []Call
	inits int
	lists int

	// block: the server offers the block tool (NewBlocking).
	block     bool
	blocking  chan struct{} // one value per block call that started waiting
	release   chan struct{} // closed by Release
	releaseMu sync.Once
	cancelled atomic.Int64
}

// Call is one tools/call the server answered.
type Call struct {
	Name      string
	Arguments map[string]any
}

// New starts a Streamable HTTP server answering with JSON bodies (see
// SetSSE); it is closed when tb ends.
func New(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{}
	s.start(tb, nil)
	return s
}

// NewBlocking starts a Streamable HTTP server like New that also offers the
// block tool: each call reports on Blocking that it is waiting, then waits
// until Release or until the client cancels the call (counted by
// Cancelled). Calls still waiting when tb ends are released.
func NewBlocking(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{block: true, blocking: make(chan struct{}, 64), release: make(chan struct{})}
	s.start(tb, nil)
	tb.Cleanup(s.Release) // runs before the close start registered
	return s
}

// Blocking receives a value each time a block call starts waiting.
func (s *Server) Blocking() <-chan struct{} { return s.blocking }

// Release ends every waiting block call, and makes later ones return at
// once. It is idempotent.
func (s *Server) Release() {
	s.releaseMu.Do(func() {
		if s.release != nil {
			close(s.release)
		}
	})
}

// Cancelled counts the block calls that ended because the client cancelled
// them (their request's context ended) rather than by Release.
func (s *Server) Cancelled() int { return int(s.cancelled.Load()) }

// NewLegacySSE starts a server speaking only the HTTP+SSE transport of MCP
// 2024-11-05: a GET of URL opens the event stream whose first event names
// the endpoint to POST messages to. A POST to URL itself (a Streamable
// HTTP initialize) gets 400.
func NewLegacySSE(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{legacy: true}
	s.start(tb, nil)
	return s
}

// start serves s (behind wrap, when not nil) on a new httptest server.
func (s *Server) start(tb testing.TB, wrap func(http.Handler) http.Handler) *httptest.Server {
	tb.Helper()
	s.ExpireSessions() // installs the first handler
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/mcp" {
			http.NotFound(w, r)
			return
		}
		(*s.handler.Load()).ServeHTTP(w, r)
	})
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	tb.Cleanup(func() {
		// Clients may hold event streams open: cut them so Close returns.
		ts.CloseClientConnections()
		ts.Close()
	})
	s.URL = ts.URL + "/mcp"
	return ts
}

// SetSSE makes the Streamable HTTP server answer requests with event
// streams (on) or JSON bodies (off, the default). It applies to sessions
// initialized afterwards.
func (s *Server) SetSSE(on bool) {
	s.mu.Lock()
	s.sse = on
	s.mu.Unlock()
	s.ExpireSessions()
}

// ExpireSessions forgets every session: a request with an old
// Mcp-Session-Id (or sessionid, for the legacy transport) gets 404.
func (s *Server) ExpireSessions() {
	s.mu.Lock()
	sse := s.sse
	s.mu.Unlock()
	srv := s.mcpServer()
	get := func(*http.Request) *mcp.Server { return srv }
	var h http.Handler
	if s.legacy {
		h = mcp.NewSSEHandler(get, nil)
	} else {
		h = mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{JSONResponse: !sse})
	}
	s.handler.Store(&h)
}

// Calls returns the tools/call requests answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Lists counts tools/list requests (one per page).
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

// mcpServer builds the SDK server with the tools and the counters.
func (s *Server) mcpServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, &mcp.ServerOptions{PageSize: PageSize})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			s.mu.Lock()
			switch method {
			case "initialize":
				s.inits++
			case "tools/list":
				s.lists++
			case "tools/call":
				if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
					var args map[string]any
					_ = json.Unmarshal(p.Arguments, &args)
					s.calls = append(s.calls, Call{Name: p.Name, Arguments: args})
				}
			}
			s.mu.Unlock()
			return next(ctx, method, req)
		}
	})
	type echoArgs struct {
		Text string `json:"text" jsonschema:"the text to return"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echo the text back."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			res := text("it failed")
			res.IsError = true
			return res, nil, nil
		})
	type bigArgs struct {
		Size int `json:"size" jsonschema:"how many characters to return"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "big", Description: "Returns size characters."},
		func(_ context.Context, _ *mcp.CallToolRequest, in bigArgs) (*mcp.CallToolResult, any, error) {
			return text(strings.Repeat("b", max(in.Size, 0))), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "ask_client", Description: "Sends ping, roots/list, sampling/createMessage and elicitation/create to the client."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return text(askClient(ctx, req.Session)), nil, nil
		})
	if s.block {
		mcp.AddTool(srv, &mcp.Tool{Name: "block", Description: "Waits until the test releases it or the call is cancelled."},
			func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				select {
				case s.blocking <- struct{}{}:
				default:
				}
				select {
				case <-s.release:
					return text("released"), nil, nil
				case <-ctx.Done():
					s.cancelled.Add(1)
					return nil, nil, ctx.Err()
				}
			})
	}
	return srv
}

// askClient sends the server-to-client requests through the call's session
// and summarizes the outcomes. Roots and sampling are deprecated in the
// newest MCP revision, but servers still send them, and the client must
// refuse them.
//
//nolint:staticcheck // SA1019: sending the deprecated requests is the point.
func askClient(ctx context.Context, ss *mcp.ServerSession) string {
	outcome := func(err error) string {
		if err != nil {
			return "error"
		}
		return "ok"
	}
	ping := ss.Ping(ctx, nil)
	_, roots := ss.ListRoots(ctx, nil)
	_, sampling := ss.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
		Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
	_, elicit := ss.Elicit(ctx, &mcp.ElicitParams{Message: "your name?",
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
	return fmt.Sprintf("ping=%s roots=%s sampling=%s elicitation=%s", outcome(ping), outcome(roots), outcome(sampling), outcome(elicit))
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}
