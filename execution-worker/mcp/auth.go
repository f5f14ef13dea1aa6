package mcp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Credentials supplies the bearer token a session sends to an MCP server.
type Credentials interface {
	// Token returns the token for the server at url in the session ("" sends none). stale, when not empty, is a token
	// the server just refused with 401: return a refreshed one (or the same one if nothing better exists).
	// An error wrapping ErrAuthFailed means no usable token can be had.
	Token(ctx context.Context, sessionID, url, stale string) (string, error)
}

// authTransport sets the session's bearer token on every request to one
// server (both transports, every POST and GET) and, on a 401, asks for a
// fresh token and retries once. An authentication failure is returned as
// an error (an *authError), not as the 401 response: the SDK reduces
// status codes to their text, while errors from the HTTP client survive its
// wrapping.
type authTransport struct {
	base      http.RoundTripper
	creds     Credentials // nil: no tokens
	sessionID string
	url       string
	probe     *probe // records the status of the first POST (initialize)
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := t.token(req.Context(), "")
	if err != nil {
		return nil, err
	}
	resp, err := t.send(req, tok)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return t.forbidden(resp, err)
	}
	discard(resp)
	if t.creds == nil {
		return nil, &authError{url: t.url, reason: "the server requires authentication (HTTP 401) and no credentials are configured"}
	}
	if tok == "" {
		return nil, &authError{url: t.url, reason: "the server requires authentication (HTTP 401) and the session has no token for it"}
	}
	fresh, err := t.token(req.Context(), tok)
	if err != nil {
		return nil, err
	}
	if fresh == "" || fresh == tok {
		return nil, &authError{url: t.url, reason: "the server refused the token (HTTP 401) and no refreshed token is available"}
	}
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, &authError{url: t.url, reason: "the server refused the token (HTTP 401) and the request cannot be replayed"}
		}
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("MCP server %s: replay the request after a token refresh: %w", t.url, err)
		}
		req = req.Clone(req.Context())
		req.Body = body
	}
	resp, err = t.send(req, fresh)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		discard(resp)
		return nil, &authError{url: t.url, reason: "the server refused the refreshed token too (HTTP 401)"}
	}
	return t.forbidden(resp, err)
}

// forbidden turns a 403 into an authentication failure: the server knows
// the caller and refuses it access (MCP authorization: invalid scopes or
// insufficient permissions), which no retry with the same token changes.
func (t *authTransport) forbidden(resp *http.Response, err error) (*http.Response, error) {
	if err != nil || resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	reason := "the server refused access (HTTP 403)"
	if strings.Contains(resp.Header.Get("WWW-Authenticate"), "insufficient_scope") {
		reason = "the server refused access: the token lacks a scope it requires (HTTP 403, insufficient_scope)"
	}
	discard(resp)
	return nil, &authError{url: t.url, reason: reason}
}

// token asks Credentials for the session's token.
func (t *authTransport) token(ctx context.Context, stale string) (string, error) {
	if t.creds == nil {
		return "", nil
	}
	tok, err := t.creds.Token(ctx, t.sessionID, t.url, stale)
	if err != nil {
		reason := "no token could be obtained"
		if stale != "" {
			reason = "the server refused the token (HTTP 401) and refreshing it failed"
		}
		return "", &authError{url: t.url, reason: reason, cause: err}
	}
	return tok, nil
}

// send sends a copy of req with tok as its bearer token.
func (t *authTransport) send(req *http.Request, tok string) (*http.Response, error) {
	if tok != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && req.Method == http.MethodPost && t.probe != nil {
		t.probe.record(resp.StatusCode)
	}
	return resp, err
}

func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}

// probe records the status of the first POST of a connection attempt (the
// initialize request), to decide on the HTTP+SSE fallback.
type probe struct {
	mu     sync.Mutex
	status int
}

func (p *probe) record(status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status == 0 {
		p.status = status
	}
}

// legacy reports whether the initialize POST got 400, 404 or 405: what
// the MCP specification's backwards-compatibility section says marks a
// server of the older HTTP+SSE transport.
func (p *probe) legacy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed:
		return true
	}
	return false
}
