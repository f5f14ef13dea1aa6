package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/mcp"
	"github.com/mangohq/mango/execution-worker/mcp/mcptest"
)

func TestClient(t *testing.T) {
	for _, sse := range []bool{false, true} {
		name := "json"
		if sse {
			name = "sse"
		}
		t.Run(name, func(t *testing.T) {
			srv := mcptest.New(t)
			srv.SetSSE(sse)
			ctx := context.Background()
			s := mcp.New(srv.URL, nil, "mango-test")
			tools, err := s.ListTools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(tools) != 3 || tools[0].Name != "echo" || tools[2].Name != "big" {
				t.Fatalf("tools = %+v, want all three across pages", tools)
			}
			res, err := s.CallTool(ctx, "echo", json.RawMessage(`{"text":"hello"}`))
			if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].Text != "hello" {
				t.Fatalf("echo = %+v, %v", res, err)
			}
			res, err = s.CallTool(ctx, "fail", nil)
			if err != nil || !res.IsError {
				t.Errorf("fail = %+v, %v; want a tool error result", res, err)
			}
			_, err = s.CallTool(ctx, "nope", nil)
			var rpc *mcp.RPCError
			if !errors.As(err, &rpc) || rpc.Code != -32602 || !strings.Contains(err.Error(), "unknown tool nope") {
				t.Errorf("unknown tool = %v, want the JSON-RPC error", err)
			}
			// An expired server session is initialized again, once.
			srv.ExpireSessions()
			if res, err := s.CallTool(ctx, "echo", json.RawMessage(`{"text":"again"}`)); err != nil || res.Content[0].Text != "again" {
				t.Errorf("after expiry = %+v, %v", res, err)
			}
			if n := srv.Inits(); n != 2 {
				t.Errorf("initialize sent %d times, want 2", n)
			}
		})
	}
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	if _, err := mcp.New(down.URL, nil, "t").ListTools(ctx); err == nil || !strings.Contains(err.Error(), "HTTP 503: maintenance") {
		t.Errorf("503 = %v, want the status and body named", err)
	}
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {not json\n\n"))
	}))
	defer garbage.Close()
	if _, err := mcp.New(garbage.URL, nil, "t").ListTools(ctx); err == nil || !strings.Contains(err.Error(), "malformed event") {
		t.Errorf("malformed stream = %v, want a clear error", err)
	}
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>"))
	}))
	defer html.Close()
	if _, err := mcp.New(html.URL, nil, "t").ListTools(ctx); err == nil || !strings.Contains(err.Error(), `unexpected Content-Type "text/html"`) {
		t.Errorf("html = %v", err)
	}
}
