package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/mcp"
	"github.com/mangohq/mango/internal/mcptest"
)

// newPool returns a pool for test servers on 127.0.0.1, closed with t.
func newPool(t *testing.T, o mcp.Options) *mcp.Pool {
	t.Helper()
	o.AllowPrivate = true
	if o.ClientName == "" {
		o.ClientName = "mango-test"
	}
	p := mcp.NewPool(o)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func names(tools []mcp.Tool) []string {
	var out []string
	for _, tl := range tools {
		out = append(out, tl.Name)
	}
	return out
}

var allTools = []string{"ask_client", "big", "echo", "fail"}

func echo(t *testing.T, p *mcp.Pool, sessionID, url, text string) {
	t.Helper()
	res, err := p.CallTool(t.Context(), sessionID, url, "echo", json.RawMessage(`{"text":"`+text+`"}`))
	if err != nil {
		t.Fatalf("echo %q: %v", text, err)
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].Type != "text" || res.Content[0].Text != text {
		t.Fatalf("echo %q = %+v, want one text block %q", text, res, text)
	}
}

// TestStreamableHTTP: JSON and event-stream answers, paging, tool
// errors, unknown tools, and a session the server forgot initialized again
// once.
func TestStreamableHTTP(t *testing.T) {
	t.Parallel()
	for _, sse := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "sse"}[sse]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := mcptest.New(t)
			srv.SetSSE(sse)
			p := newPool(t, mcp.Options{})
			ctx := t.Context()
			tools, err := p.ListTools(ctx, "s1", srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(tools); !slices.Equal(got, allTools) {
				t.Fatalf("tools = %v, want %v across pages", got, allTools)
			}
			if n := srv.Lists(); n != 2 {
				t.Errorf("tools/list requests = %d, want 2 (pages of %d)", n, mcptest.PageSize)
			}
			echoTool := tools[slices.IndexFunc(tools, func(tl mcp.Tool) bool { return tl.Name == "echo" })]
			var schema struct {
				Properties map[string]any `json:"properties"`
			}
			if err := json.Unmarshal(echoTool.InputSchema, &schema); err != nil || schema.Properties["text"] == nil {
				t.Errorf("echo input schema = %s (%v), want an object schema with text", echoTool.InputSchema, err)
			}
			echo(t, p, "s1", srv.URL, "hello")
			if calls := srv.Calls(); len(calls) != 1 || calls[0].Name != "echo" || calls[0].Arguments["text"] != "hello" {
				t.Errorf("server calls = %+v, want echo with text hello", calls)
			}
			res, err := p.CallTool(ctx, "s1", srv.URL, "fail", nil)
			if err != nil || !res.IsError || res.Content[0].Text != "it failed" {
				t.Errorf("fail = %+v, %v; want a tool error result", res, err)
			}
			_, err = p.CallTool(ctx, "s1", srv.URL, "nope", nil)
			if err == nil || !strings.Contains(err.Error(), "nope") || !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("unknown tool = %v, want an error naming the tool and the server", err)
			}
			if errors.Is(err, mcp.ErrAuthFailed) {
				t.Errorf("unknown tool error %v is an authentication failure", err)
			}
			if n := srv.Inits(); n != 1 {
				t.Fatalf("initialize sent %d times before expiry, want 1", n)
			}
			srv.ExpireSessions()
			echo(t, p, "s1", srv.URL, "again")
			if n := srv.Inits(); n != 2 {
				t.Errorf("initialize sent %d times, want 2 (once more after the expiry)", n)
			}
			if n := len(srv.Calls()); n != 4 {
				t.Errorf("server answered %d calls, want 4 (the expired call not run twice)", n)
			}
		})
	}
}

// TestLegacySSEFallback: a server of the HTTP+SSE transport refuses the
// initialize POST; the pool falls back, and remembers the choice for the
// URL (no second Streamable HTTP attempt for another session).
func TestLegacySSEFallback(t *testing.T) {
	t.Parallel()
	srv := mcptest.NewLegacySSE(t)
	f := newFront(t, srv.URL, nil)
	p := newPool(t, mcp.Options{})
	tools, err := p.ListTools(t.Context(), "s1", f.url)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(tools); !slices.Equal(got, allTools) {
		t.Fatalf("tools over HTTP+SSE = %v, want %v", got, allTools)
	}
	echo(t, p, "s1", f.url, "legacy")
	echo(t, p, "s2", f.url, "remembered")
	if n := srv.Inits(); n != 2 {
		t.Errorf("initialize reached the legacy server %d times, want 2 (one per session)", n)
	}
	if n := f.barePOSTs(); n != 1 {
		t.Errorf("Streamable HTTP initialize POSTs = %d, want 1 (the fallback is remembered)", n)
	}
}

// TestTimeout: Options.Timeout bounds a call, and the session's event
// streams outlive it (the next call needs no new initialize).
func TestTimeout(t *testing.T) {
	t.Parallel()
	for name, start := range map[string]func(testing.TB) *mcptest.Server{"streamable": mcptest.New, "legacy": mcptest.NewLegacySSE} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := start(t)
			// The front holds calls of the tool "slow" until the client gives up.
			f := newFront(t, srv.URL, func(body []byte) bool { return strings.Contains(string(body), `"name":"slow"`) })
			p := newPool(t, mcp.Options{Timeout: 300 * time.Millisecond})
			echo(t, p, "s1", f.url, "before")
			_, err := p.CallTool(t.Context(), "s1", f.url, "slow", nil)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), f.url) {
				t.Fatalf("slow call = %v, want the deadline exceeded, naming the server", err)
			}
			echo(t, p, "s1", f.url, "after")
			if n := srv.Inits(); n != 1 {
				t.Errorf("initialize sent %d times, want 1 (the session outlives the timed-out call)", n)
			}
		})
	}
}

// front is a proxy before a test server: it counts POSTs to the bare URL
// and holds the POSTs hang selects until their client goes away.
type front struct {
	url  string
	mu   sync.Mutex
	bare int
}

func newFront(t *testing.T, target string, hang func(body []byte) bool) *front {
	t.Helper()
	f := &front{}
	base := strings.TrimSuffix(target, "/mcp")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.Method == http.MethodPost && r.URL.RawQuery == "" {
			f.mu.Lock()
			f.bare++
			f.mu.Unlock()
		}
		if hang != nil && hang(body) {
			<-r.Context().Done()
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				w.(http.Flusher).Flush()
			}
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(func() { ts.CloseClientConnections(); ts.Close() })
	f.url = ts.URL + "/mcp"
	return f
}

func (f *front) barePOSTs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bare
}

// TestServerToClientRequests: during a call, the server's ping is
// answered, and roots/list, sampling/createMessage and elicitation/create
// (capabilities the client does not advertise) are refused; both
// transports and both answer modes.
func TestServerToClientRequests(t *testing.T) {
	t.Parallel()
	cases := map[string]func(tb testing.TB) *mcptest.Server{
		"json": mcptest.New,
		"sse": func(tb testing.TB) *mcptest.Server {
			s := mcptest.New(tb)
			s.SetSSE(true)
			return s
		},
		"legacy": mcptest.NewLegacySSE,
	}
	for name, start := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := start(t)
			p := newPool(t, mcp.Options{})
			res, err := p.CallTool(t.Context(), "s1", srv.URL, "ask_client", nil)
			if err != nil {
				t.Fatal(err)
			}
			const want = "ping=ok roots=error sampling=error elicitation=error"
			if len(res.Content) != 1 || res.Content[0].Text != want {
				t.Fatalf("ask_client = %+v, want %q", res, want)
			}
		})
	}
}

// tokens is a Credentials that refreshes through the test server's token
// endpoint, per session.
type tokens struct {
	srv *mcptest.OAuth

	mu       sync.Mutex
	access   map[string]string // session id → access token
	refresh  map[string]string // session id → refresh token
	asked    []string          // "session:stale?" per call
	failWith error             // returned by Token when set
}

func newTokens(srv *mcptest.OAuth) *tokens {
	return &tokens{srv: srv, access: map[string]string{}, refresh: map[string]string{}}
}

func (c *tokens) set(sessionID string, ttl time.Duration) string {
	a, r := c.srv.Issue(ttl)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.access[sessionID], c.refresh[sessionID] = a, r
	return a
}

func (c *tokens) Token(ctx context.Context, sessionID, url, stale string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, sessionID+map[bool]string{true: ":stale", false: ""}[stale != ""])
	if c.failWith != nil {
		return "", c.failWith
	}
	if stale == "" || stale != c.access[sessionID] {
		return c.access[sessionID], nil
	}
	a, r, err := refreshToken(ctx, c.srv, c.refresh[sessionID])
	if err != nil {
		return "", err
	}
	c.access[sessionID], c.refresh[sessionID] = a, r
	return a, nil
}

// refreshToken runs the refresh_token grant.
func refreshToken(ctx context.Context, srv *mcptest.OAuth, refresh string) (access, next string, err error) {
	form := strings.NewReader("grant_type=refresh_token&refresh_token=" + refresh)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.TokenURL, form)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(srv.ClientID, srv.ClientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		Error        string `json:"error"`
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", errors.Join(mcp.ErrAuthFailed, errors.New("token endpoint: "+out.Error))
	}
	return out.AccessToken, out.RefreshToken, nil
}

// TestOAuth: the session's token is sent; a 401 gets a refreshed token and
// the request is retried once; when refreshing fails the error is
// ErrAuthFailed, names the server and carries no token.
func TestOAuth(t *testing.T) {
	t.Parallel()
	srv := mcptest.NewOAuth(t)
	creds := newTokens(srv)
	first := creds.set("s1", time.Hour)
	p := newPool(t, mcp.Options{Credentials: creds})
	if _, err := p.ListTools(t.Context(), "s1", srv.URL); err != nil {
		t.Fatal(err)
	}
	seen := srv.TokensSeen()
	if len(seen) == 0 || slices.ContainsFunc(seen, func(s string) bool { return s != first }) {
		t.Fatalf("tokens seen = %v, want only the issued token", seen)
	}
	if n := srv.Unauthorized(); n != 0 {
		t.Fatalf("%d requests refused with a valid token", n)
	}

	// The access token expires: 401, refresh, one retry.
	srv.ExpireAccessTokens()
	before := len(srv.TokensSeen())
	echo(t, p, "s1", srv.URL, "refreshed")
	if n := srv.Refreshes(); n != 1 {
		t.Errorf("refreshes = %d, want 1", n)
	}
	if n := srv.Unauthorized(); n != 1 {
		t.Errorf("refused requests = %d, want 1 (the call with the expired token)", n)
	}
	after := srv.TokensSeen()[before:]
	if len(after) == 0 || slices.Contains(after, first) {
		t.Errorf("tokens after refresh = %v, want only the refreshed one", after)
	}
	if n := len(srv.Calls()); n != 1 {
		t.Errorf("server ran %d calls, want 1", n)
	}

	// Refreshing fails: the refresh token was revoked.
	creds.set("s2", time.Hour) // a fresh session, used below
	srv.ExpireAccessTokens()
	srv.RevokeRefreshTokens()
	creds.mu.Lock()
	secret := []string{creds.access["s1"], creds.refresh["s1"]}
	creds.mu.Unlock()
	_, err := p.CallTool(t.Context(), "s1", srv.URL, "echo", json.RawMessage(`{"text":"x"}`))
	if !errors.Is(err, mcp.ErrAuthFailed) {
		t.Fatalf("call after a failed refresh = %v, want ErrAuthFailed", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, srv.URL) || !strings.Contains(msg, "refreshing it failed") {
		t.Errorf("error %q does not name the server and the reason", msg)
	}
	for _, s := range append(secret, first, "at-", "rt-") {
		if strings.Contains(msg, s) {
			t.Errorf("error %q contains token text %q", msg, s)
		}
	}
	// Discovery too (a fresh session connects with the refused token).
	if _, err := p.ListTools(t.Context(), "s2", srv.URL); !errors.Is(err, mcp.ErrAuthFailed) || !strings.Contains(err.Error(), srv.URL) {
		t.Errorf("discovery after a failed refresh = %v, want ErrAuthFailed naming the server", err)
	}
}

// TestOAuthForbidden: a server that refuses a valid token access (403
// insufficient_scope) fails discovery and calls as an authentication
// failure naming the server and the reason, without a refresh (a new token
// would have the same scopes) and without token text; once it serves the
// token again, calls work.
func TestOAuthForbidden(t *testing.T) {
	t.Parallel()
	srv := mcptest.NewOAuth(t)
	creds := newTokens(srv)
	tok := creds.set("s1", time.Hour)
	p := newPool(t, mcp.Options{Credentials: creds})
	srv.Forbid(true)
	_, err := p.ListTools(t.Context(), "s1", srv.URL)
	if !errors.Is(err, mcp.ErrAuthFailed) || !strings.Contains(err.Error(), srv.URL) || !strings.Contains(err.Error(), "insufficient_scope") {
		t.Fatalf("ListTools refused with 403 = %v, want ErrAuthFailed naming the server and insufficient_scope", err)
	}
	if strings.Contains(err.Error(), tok) {
		t.Errorf("error %q contains the token", err)
	}
	if n := srv.Refreshes(); n != 0 {
		t.Errorf("refreshes after a 403 = %d, want 0", n)
	}
	srv.Forbid(false)
	echo(t, p, "s1", srv.URL, "allowed again")
	srv.Forbid(true)
	if _, err := p.CallTool(t.Context(), "s1", srv.URL, "echo", json.RawMessage(`{"text":"x"}`)); !errors.Is(err, mcp.ErrAuthFailed) {
		t.Errorf("CallTool refused with 403 = %v, want ErrAuthFailed", err)
	}
	if srv.Forbidden() < 2 {
		t.Errorf("the server refused %d requests, want at least the discovery and the call", srv.Forbidden())
	}
}

// TestOAuthWithoutCredentials: a server demanding a token from a pool
// without credentials is an authentication failure.
func TestOAuthWithoutCredentials(t *testing.T) {
	t.Parallel()
	srv := mcptest.NewOAuth(t)
	p := newPool(t, mcp.Options{})
	_, err := p.ListTools(t.Context(), "s1", srv.URL)
	if !errors.Is(err, mcp.ErrAuthFailed) || !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("ListTools = %v, want ErrAuthFailed saying no credentials are configured", err)
	}
}

// TestOAuthCredentialsError: Credentials failing is ErrAuthFailed with the
// cause kept.
func TestOAuthCredentialsError(t *testing.T) {
	t.Parallel()
	srv := mcptest.NewOAuth(t)
	creds := newTokens(srv)
	cause := errors.New("vault unavailable")
	creds.failWith = cause
	p := newPool(t, mcp.Options{Credentials: creds})
	_, err := p.CallTool(t.Context(), "s1", srv.URL, "echo", json.RawMessage(`{"text":"x"}`))
	if !errors.Is(err, mcp.ErrAuthFailed) || !errors.Is(err, cause) || !strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("CallTool = %v, want ErrAuthFailed wrapping %v and naming the server", err, cause)
	}
	if n := srv.Inits() + srv.Unauthorized(); n != 0 {
		t.Errorf("the server got %d requests, want none", n)
	}
}

// TestSessionIsolation: two Mango sessions reach the same server each
// with its own token, over sessions of their own.
func TestSessionIsolation(t *testing.T) {
	t.Parallel()
	srv := mcptest.NewOAuth(t)
	creds := newTokens(srv)
	a := creds.set("a", time.Hour)
	b := creds.set("b", time.Hour)
	p := newPool(t, mcp.Options{Credentials: creds})
	echo(t, p, "a", srv.URL, "from a")
	n := len(srv.TokensSeen())
	echo(t, p, "b", srv.URL, "from b")
	seen := srv.TokensSeen()
	if slices.Contains(seen[:n], b) || !slices.Contains(seen[:n], a) {
		t.Errorf("session a's requests carried %v, want only a's token", seen[:n])
	}
	if slices.Contains(seen[n:], a) || !slices.Contains(seen[n:], b) {
		t.Errorf("session b's requests carried %v, want only b's token", seen[n:])
	}
	if got := srv.Inits(); got != 2 {
		t.Errorf("initialize sent %d times, want 2 (one client session per Mango session)", got)
	}
	if got := p.Sessions(); got != 2 {
		t.Errorf("pooled sessions = %d, want 2", got)
	}
}

// TestIdleClose: a session unused for longer than IdleTimeout is closed;
// the next call initializes again.
func TestIdleClose(t *testing.T) {
	t.Parallel()
	srv := mcptest.New(t)
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	p := newPool(t, mcp.Options{IdleTimeout: time.Hour})
	p.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	echo(t, p, "s1", srv.URL, "one")
	echo(t, p, "s2", srv.URL, "two")
	advance(59 * time.Minute)
	echo(t, p, "s2", srv.URL, "two again")
	advance(2 * time.Minute)
	if n := p.CloseIdle(); n != 1 {
		t.Fatalf("closed %d idle sessions, want 1 (s1; s2 was used a minute ago)", n)
	}
	if n := p.Sessions(); n != 1 {
		t.Fatalf("pooled sessions = %d, want 1", n)
	}
	echo(t, p, "s1", srv.URL, "back")
	if n := srv.Inits(); n != 3 {
		t.Errorf("initialize sent %d times, want 3 (s1 twice, s2 once)", n)
	}
}

// TestPrivateNetworkRefused: without AllowPrivate a loopback server is
// refused before any request.
func TestPrivateNetworkRefused(t *testing.T) {
	t.Parallel()
	srv := mcptest.New(t)
	p := mcp.NewPool(mcp.Options{ClientName: "t"})
	defer func() { _ = p.Close() }()
	_, err := p.ListTools(t.Context(), "s1", srv.URL)
	if err == nil || !strings.Contains(err.Error(), "private") || !strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("ListTools = %v, want a refusal naming the server and the private address", err)
	}
	if _, err := p.CallTool(t.Context(), "s1", srv.URL, "echo", nil); err == nil {
		t.Error("CallTool of a private server succeeded")
	}
	if n := srv.Inits() + srv.Lists() + len(srv.Calls()); n != 0 {
		t.Errorf("the private server got %d requests, want none", n)
	}
}

// TestUnreachable: a server that does not listen, or answers 503, is an
// error naming the server, not an authentication failure.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + l.Addr().String() + "/mcp"
	_ = l.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	p := newPool(t, mcp.Options{Timeout: 10 * time.Second})
	for _, url := range []string{gone, down.URL + "/mcp"} {
		_, err := p.ListTools(t.Context(), "s1", url)
		if err == nil || !strings.Contains(err.Error(), url) || errors.Is(err, mcp.ErrAuthFailed) {
			t.Errorf("ListTools(%s) = %v, want an error naming the server", url, err)
		}
	}
}

// TestClose: after Close calls fail.
func TestClose(t *testing.T) {
	t.Parallel()
	srv := mcptest.New(t)
	p := mcp.NewPool(mcp.Options{AllowPrivate: true})
	echo(t, p, "s1", srv.URL, "x")
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := p.ListTools(t.Context(), "s1", srv.URL); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("ListTools after Close = %v, want an error saying the pool is closed", err)
	}
}

// TestConcurrentCallsShareOneSession: calls of one Mango session racing
// to connect initialize once.
func TestConcurrentCallsShareOneSession(t *testing.T) {
	t.Parallel()
	srv := mcptest.New(t)
	p := newPool(t, mcp.Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			res, err := p.CallTool(t.Context(), "s1", srv.URL, "echo", json.RawMessage(fmt.Sprintf(`{"text":"%d"}`, i)))
			if err == nil && (len(res.Content) != 1 || res.Content[0].Text != fmt.Sprint(i)) {
				err = fmt.Errorf("call %d = %+v, want its own text back", i, res)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := srv.Inits(); n != 1 {
		t.Errorf("initialize sent %d times, want 1", n)
	}
}
