package mcptest

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// OAuth is a test MCP server whose MCP endpoint requires a bearer access
// token, with an OAuth 2.0 token endpoint (RFC 6749 §6, the refresh_token
// grant) that rotates refresh tokens: each works once.
type OAuth struct {
	*Server

	// TokenURL is the token endpoint, <base>/token.
	TokenURL string
	// ClientID and ClientSecret are the client credentials the token
	// endpoint accepts (client_secret_basic or client_secret_post).
	ClientID, ClientSecret string

	amu          sync.Mutex
	access       map[string]time.Time     // access token → expiry
	refresh      map[string]time.Duration // unused refresh token → ttl of the access tokens it mints
	refreshes    int
	unauthorized int
	forbid       bool
	forbidden    int
	seen         []string
}

// NewOAuth starts a Streamable HTTP server (the tools of [New]) behind a
// bearer check; it is closed when tb ends. Mint a first token pair with
// Issue.
func NewOAuth(tb testing.TB) *OAuth {
	tb.Helper()
	o := &OAuth{Server: &Server{}, ClientID: "mango-test-client", ClientSecret: "mango-test-secret",
		access: map[string]time.Time{}, refresh: map[string]time.Duration{}}
	ts := o.start(tb, o.wrap)
	o.TokenURL = ts.URL + "/token"
	return o
}

// Issue mints an access token valid for ttl and a refresh token; the
// access tokens minted by refreshing it are valid for ttl too.
func (o *OAuth) Issue(ttl time.Duration) (access, refresh string) {
	o.amu.Lock()
	defer o.amu.Unlock()
	return o.mint(ttl)
}

func (o *OAuth) mint(ttl time.Duration) (access, refresh string) {
	access, refresh = "at-"+rand.Text(), "rt-"+rand.Text()
	o.access[access] = time.Now().Add(ttl)
	o.refresh[refresh] = ttl
	return access, refresh
}

// RevokeRefreshTokens makes every refresh token minted so far invalid.
func (o *OAuth) RevokeRefreshTokens() {
	o.amu.Lock()
	defer o.amu.Unlock()
	clear(o.refresh)
}

// ExpireAccessTokens makes every access token minted so far invalid: MCP
// requests carrying one get 401.
func (o *OAuth) ExpireAccessTokens() {
	o.amu.Lock()
	defer o.amu.Unlock()
	clear(o.access)
}

// Forbid makes the server answer requests with a valid token 403
// insufficient_scope (a token without the scope the server requires), as
// MCP authorization describes, or serve them again.
func (o *OAuth) Forbid(on bool) {
	o.amu.Lock()
	defer o.amu.Unlock()
	o.forbid = on
}

// Forbidden counts MCP requests refused with 403.
func (o *OAuth) Forbidden() int {
	o.amu.Lock()
	defer o.amu.Unlock()
	return o.forbidden
}

// Refreshes counts successful refresh_token grants.
func (o *OAuth) Refreshes() int {
	o.amu.Lock()
	defer o.amu.Unlock()
	return o.refreshes
}

// Unauthorized counts MCP requests refused with 401.
func (o *OAuth) Unauthorized() int {
	o.amu.Lock()
	defer o.amu.Unlock()
	return o.unauthorized
}

// TokensSeen returns the access token of every MCP request accepted, in
// order.
func (o *OAuth) TokensSeen() []string {
	o.amu.Lock()
	defer o.amu.Unlock()
	return append([]string(nil), o.seen...)
}

// wrap serves /token and puts the bearer check in front of next.
func (o *OAuth) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			o.token(w, r)
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		o.amu.Lock()
		exp, known := o.access[tok]
		valid := ok && known && time.Now().Before(exp)
		forbid := valid && o.forbid
		switch {
		case forbid:
			o.forbidden++
		case valid:
			o.seen = append(o.seen, tok)
		default:
			o.unauthorized++
		}
		o.amu.Unlock()
		switch {
		case !valid:
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", error_description="missing, unknown or expired access token"`)
			http.Error(w, "invalid bearer token", http.StatusUnauthorized)
			return
		case forbid:
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="mcp:tools"`)
			http.Error(w, "insufficient scope", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// token is the token endpoint: the refresh_token grant only.
func (o *OAuth) token(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, kind string) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": kind})
	}
	if r.Method != http.MethodPost {
		fail(http.StatusMethodNotAllowed, "invalid_request")
		return
	}
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, "invalid_request")
		return
	}
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != o.ClientID || secret != o.ClientSecret {
		fail(http.StatusUnauthorized, "invalid_client")
		return
	}
	if r.PostForm.Get("grant_type") != "refresh_token" {
		fail(http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	o.amu.Lock()
	old := r.PostForm.Get("refresh_token")
	ttl, ok := o.refresh[old]
	var access, refresh string
	if ok {
		delete(o.refresh, old) // rotation: each refresh token works once
		access, refresh = o.mint(ttl)
		o.refreshes++
	}
	o.amu.Unlock()
	if !ok {
		fail(http.StatusBadRequest, "invalid_grant")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": access, "refresh_token": refresh,
		"token_type": "Bearer", "expires_in": int(ttl / time.Second)})
}
