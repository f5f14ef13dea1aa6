package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// Pool keeps one Session per server URL for a worker. It is safe for
// concurrent use.
type Pool struct {
	http *http.Client
	name string

	mu       sync.Mutex
	sessions map[string]*Session
}

// NewPool returns a pool whose requests time out after timeout (0: 2
// minutes) and identify the client as clientName.
func NewPool(clientName string, timeout time.Duration) *Pool {
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	return &Pool{http: &http.Client{Timeout: timeout}, name: clientName, sessions: map[string]*Session{}}
}

func (p *Pool) session(url string) *Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.sessions[url]
	if !ok {
		s = New(url, p.http, p.name)
		p.sessions[url] = s
	}
	return s
}

// ListTools lists the tools of the server at url.
func (p *Pool) ListTools(ctx context.Context, url string) ([]Tool, error) {
	return p.session(url).ListTools(ctx)
}

// CallTool calls a tool of the server at url.
func (p *Pool) CallTool(ctx context.Context, url, tool string, arguments json.RawMessage) (*CallResult, error) {
	return p.session(url).CallTool(ctx, tool, arguments)
}
