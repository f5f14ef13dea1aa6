package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/mangohq/mango/internal/netguard"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// protocolVersion is the MCP revision the client offers in initialize. It
// is pinned below the SDK's latest (2026-07-28), whose stateless
// server/discover handshake has no sessions and no server-to-client
// requests during a call; servers negotiate down from it as usual.
const protocolVersion = "2025-11-25"

// maxPages bounds the tools/list pages one discovery follows.
const maxPages = 100

// Options configure a [Pool].
type Options struct {
	// ClientName is the clientInfo name sent in initialize.
	ClientName string
	// Timeout bounds each ListTools and CallTool, connecting included
	// (0: 2 minutes). Long-lived event streams are not cut by it.
	Timeout time.Duration
	// AllowPrivate permits servers on loopback, link-local and private
	// addresses; otherwise they are refused before any connection and
	// after DNS resolution (package netguard).
	AllowPrivate bool
	// Credentials supplies bearer tokens; nil sends none.
	Credentials Credentials
	// IdleTimeout closes a session unused for this long (0: 5 minutes).
	IdleTimeout time.Duration
}

// Pool keeps one MCP client session per (Mango session id, server URL). It
// is safe for concurrent use.
type Pool struct {
	o      Options
	client *sdk.Client
	base   http.RoundTripper
	now    func() time.Time
	stop   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	closed   bool
	sessions map[key]*entry
	legacy   map[string]bool // URLs that speak only HTTP+SSE
}

type key struct{ sessionID, url string }

// entry is one pooled client session. Its mutex serializes connecting;
// the pool's guards the rest.
type entry struct {
	key key
	mu  sync.Mutex

	cs       *sdk.ClientSession
	cancel   context.CancelFunc // ends the connection's lifetime (the HTTP+SSE stream)
	lastUsed time.Time
	inUse    int
}

// NewPool returns a pool; Close releases its sessions.
func NewPool(o Options) *Pool {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.ClientName == "" {
		o.ClientName = "mango"
	}
	client := sdk.NewClient(&sdk.Implementation{Name: o.ClientName, Version: "1"},
		&sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}})
	client.AddReceivingMiddleware(refuseUnadvertised)
	p := &Pool{o: o, client: client, base: netguard.Transport(o.AllowPrivate), now: time.Now,
		stop: make(chan struct{}), done: make(chan struct{}), sessions: map[key]*entry{}, legacy: map[string]bool{}}
	go p.reap()
	return p
}

// refuseUnadvertised answers the server-to-client requests of
// capabilities the client does not advertise with "method not found"
// (the SDK would otherwise answer roots/list with an empty list).
func refuseUnadvertised(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		switch method {
		case "roots/list", "sampling/createMessage", "elicitation/create":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
				Message: fmt.Sprintf("%s is not supported: the client advertises no such capability", method)}
		}
		return next(ctx, method, req)
	}
}

// ListTools returns every tool of the server at url, following pagination.
func (p *Pool) ListTools(ctx context.Context, sessionID, url string) ([]Tool, error) {
	var tools []Tool
	err := p.do(ctx, sessionID, url, true, func(ctx context.Context, cs *sdk.ClientSession) error {
		tools = tools[:0]
		params := &sdk.ListToolsParams{}
		for range maxPages {
			res, err := cs.ListTools(ctx, params)
			if err != nil {
				return fmt.Errorf("tools/list: %w", err)
			}
			for _, t := range res.Tools {
				tl, err := tool(t)
				if err != nil {
					return fmt.Errorf("tools/list: %w", err)
				}
				tools = append(tools, tl)
			}
			if res.NextCursor == "" || res.NextCursor == params.Cursor {
				return nil
			}
			params.Cursor = res.NextCursor
		}
		return fmt.Errorf("tools/list: more than %d pages", maxPages)
	})
	if err != nil {
		return nil, err
	}
	return tools, nil
}

// CallTool calls a tool of the server at url with arguments (a JSON
// object; empty means {}). A tool that ran and failed is a result with
// IsError, not an error.
func (p *Pool) CallTool(ctx context.Context, sessionID, url, tool string, arguments json.RawMessage) (*CallResult, error) {
	if len(arguments) == 0 {
		arguments = json.RawMessage(`{}`)
	}
	var out *CallResult
	// A call is repeated only when the server forgot the session (it did
	// not run the call); after a connection died mid-call it may have run.
	err := p.do(ctx, sessionID, url, false, func(ctx context.Context, cs *sdk.ClientSession) error {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: arguments})
		if err != nil {
			return fmt.Errorf("tools/call %s: %w", tool, err)
		}
		if out, err = callResult(res); err != nil {
			return fmt.Errorf("tools/call %s: %w", tool, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Close closes every session; later calls fail. It always returns nil:
// servers are told of the closing on a best-effort basis.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	all := make([]*entry, 0, len(p.sessions))
	for k, e := range p.sessions {
		all = append(all, e)
		delete(p.sessions, k)
	}
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	for _, e := range all {
		p.shut(e)
	}
	return nil
}

// do runs op on the session's connection to url, connecting first if
// needed, within the pool's timeout. When the server forgot the session
// (or, if retryClosed, the connection died) it connects again and runs op
// once more.
func (p *Pool) do(ctx context.Context, sessionID, url string, retryClosed bool, op func(context.Context, *sdk.ClientSession) error) error {
	if !p.o.AllowPrivate {
		if err := netguard.CheckURL(url); err != nil {
			return fmt.Errorf("MCP server %s: %w", url, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	tries := 0
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		tries++
		e, cs, err := p.acquire(ctx, key{sessionID, url})
		if err != nil {
			return struct{}{}, backoff.Permanent(err)
		}
		err = op(ctx, cs)
		p.release(e)
		again := errors.Is(err, sdk.ErrSessionMissing) || retryClosed && errors.Is(err, sdk.ErrConnectionClosed)
		if err == nil || !again || tries > 1 || ctx.Err() != nil {
			return struct{}{}, backoff.Permanent(err) // nil on success
		}
		p.drop(e, cs)
		return struct{}{}, err
	}, backoff.WithBackOff(&backoff.ZeroBackOff{}), backoff.WithMaxElapsedTime(0))
	if err != nil {
		return p.failure(url, err)
	}
	return nil
}

// failure names the server in err; an authentication failure is already
// named (and its SDK wrapping, which repeats the request line, is
// dropped).
func (p *Pool) failure(url string, err error) error {
	if ae, ok := errors.AsType[*authError](err); ok {
		return ae
	}
	return fmt.Errorf("MCP server %s: %w", url, err)
}

// acquire returns the connected session of k, connecting it if needed, and
// marks it in use.
func (p *Pool) acquire(ctx context.Context, k key) (*entry, *sdk.ClientSession, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, errors.New("the MCP client pool is closed")
	}
	e, ok := p.sessions[k]
	if !ok {
		e = &entry{key: k}
		p.sessions[k] = e
	}
	e.inUse++
	e.lastUsed = p.now()
	p.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	p.mu.Lock()
	cs := e.cs
	p.mu.Unlock()
	if cs != nil {
		return e, cs, nil
	}
	cs, cancel, err := p.connect(ctx, k)
	if err != nil {
		p.release(e)
		return nil, nil, err
	}
	p.mu.Lock()
	if p.closed { // Close ran meanwhile and will not see this session
		p.mu.Unlock()
		_ = cs.Close()
		if cancel != nil {
			cancel()
		}
		p.release(e)
		return nil, nil, errors.New("the MCP client pool is closed")
	}
	e.cs, e.cancel = cs, cancel
	p.mu.Unlock()
	// A connection that ends (the server went away, a stream broke) is
	// dropped so the next call connects afresh.
	go func() {
		_ = cs.Wait()
		p.drop(e, cs)
	}()
	return e, cs, nil
}

// release marks one use of e done.
func (p *Pool) release(e *entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.inUse--
	e.lastUsed = p.now()
}

// drop closes cs if it is still e's session.
func (p *Pool) drop(e *entry, cs *sdk.ClientSession) {
	p.mu.Lock()
	if e.cs != cs {
		p.mu.Unlock()
		return
	}
	cancel := e.cancel
	e.cs, e.cancel = nil, nil
	p.mu.Unlock()
	_ = cs.Close()
	if cancel != nil {
		cancel()
	}
}

// shut closes e's session, if any, once no call is connecting it. e is
// no longer in the pool. Telling the server (DELETE) is best effort: the
// session is closed on this side whatever it answers.
func (p *Pool) shut(e *entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p.mu.Lock()
	cs, cancel := e.cs, e.cancel
	e.cs, e.cancel = nil, nil
	p.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
	if cancel != nil {
		cancel()
	}
}

// connect opens a session to the server at k.url: Streamable HTTP, or
// HTTP+SSE when the URL is known to need it or the initialize POST gets
// 400, 404 or 405 (the MCP specification's backwards compatibility).
func (p *Pool) connect(ctx context.Context, k key) (*sdk.ClientSession, context.CancelFunc, error) {
	p.mu.Lock()
	legacy := p.legacy[k.url]
	p.mu.Unlock()
	if legacy {
		return p.connectSSE(ctx, k)
	}
	pr := &probe{}
	// The standalone GET stream stays enabled: with JSON responses it is
	// the only path for server-to-client requests made during a call (the
	// SDK server sends them there), and it is detached from the call's
	// context, so the per-call timeout does not cut it.
	t := &sdk.StreamableClientTransport{Endpoint: k.url, HTTPClient: p.httpClient(k, pr)}
	cs, err := p.client.Connect(ctx, t, &sdk.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err == nil {
		return cs, nil, nil
	}
	if !pr.legacy() || ctx.Err() != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	cs, cancel, serr := p.connectSSE(ctx, k)
	if serr != nil {
		return nil, nil, fmt.Errorf("connect: Streamable HTTP: %w; HTTP+SSE: %w", err, serr)
	}
	p.mu.Lock()
	p.legacy[k.url] = true
	p.mu.Unlock()
	return cs, cancel, nil
}

// connectSSE opens a session over the HTTP+SSE transport. The SDK ties the
// event stream to the context it connects with, so it connects with one
// that outlives the call (cancelled by the returned func, or if ctx ends
// before the session is up).
func (p *Pool) connectSSE(ctx context.Context, k key) (*sdk.ClientSession, context.CancelFunc, error) {
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	t := &lifeTransport{inner: &sdk.SSEClientTransport{Endpoint: k.url, HTTPClient: p.httpClient(k, nil)}, life: life}
	cs, err := p.client.Connect(ctx, t, &sdk.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if !stop() {
		if err == nil {
			_ = cs.Close()
			err = ctx.Err()
		}
	}
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("connect (HTTP+SSE): %w", err)
	}
	return cs, cancel, nil
}

// lifeTransport connects its inner transport with a context of its own.
type lifeTransport struct {
	inner sdk.Transport
	life  context.Context
}

func (t *lifeTransport) Connect(context.Context) (sdk.Connection, error) {
	return t.inner.Connect(t.life)
}

// httpClient is the HTTP client of one session: the guarded transport
// under the session's credentials, without a client timeout (it would cut
// event streams; calls are bounded by their contexts instead).
func (p *Pool) httpClient(k key, pr *probe) *http.Client {
	return &http.Client{Transport: &authTransport{base: p.base, creds: p.o.Credentials, sessionID: k.sessionID, url: k.url, probe: pr}}
}

// reap closes idle sessions until Close.
func (p *Pool) reap() {
	defer close(p.done)
	tick := time.NewTicker(max(p.o.IdleTimeout/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
			p.closeIdle()
		}
	}
}

// closeIdle closes the sessions not in use and unused for longer than
// IdleTimeout, and reports how many it closed.
func (p *Pool) closeIdle() int {
	p.mu.Lock()
	cutoff := p.now().Add(-p.o.IdleTimeout)
	var idle []*entry
	for k, e := range p.sessions {
		if e.inUse == 0 && e.lastUsed.Before(cutoff) {
			idle = append(idle, e)
			delete(p.sessions, k)
		}
	}
	p.mu.Unlock()
	for _, e := range idle {
		p.shut(e)
	}
	return len(idle)
}
