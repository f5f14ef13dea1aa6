package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/mangohq/mango/proto/netguard"
)

// Pool keeps one Session per server URL for a worker. It is safe for
// concurrent use.
type Pool struct {
	http         *http.Client
	name         string
	allowPrivate bool

	mu       sync.Mutex
	sessions map[string]*Session
}

// NewPool returns a pool whose requests time out after timeout (0: 2
// minutes) and identify the client as clientName. Unless allowPrivate,
// servers whose URL or dialled address is loopback, link-local or private
// are refused (package netguard), at call time and after DNS resolution.
func NewPool(clientName string, timeout time.Duration, allowPrivate bool) *Pool {
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	return &Pool{http: &http.Client{Timeout: timeout, Transport: netguard.Transport(allowPrivate)}, name: clientName,
		allowPrivate: allowPrivate, sessions: map[string]*Session{}}
}

// check refuses a guarded URL before any connection.
func (p *Pool) check(url string) error {
	if p.allowPrivate {
		return nil
	}
	if err := netguard.CheckURL(url); err != nil {
		return fmt.Errorf("MCP server %s: %w", url, err)
	}
	return nil
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
	if err := p.check(url); err != nil {
		return nil, err
	}
	return p.session(url).ListTools(ctx)
}

// CallTool calls a tool of the server at url.
func (p *Pool) CallTool(ctx context.Context, url, tool string, arguments json.RawMessage) (*CallResult, error) {
	if err := p.check(url); err != nil {
		return nil, err
	}
	return p.session(url).CallTool(ctx, tool, arguments)
}
