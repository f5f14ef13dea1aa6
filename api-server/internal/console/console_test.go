package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// TestSignInAndOut: a signed-out visitor is sent to the sign-in page and
// sees nothing; a wrong key is refused; the right one opens the console,
// with the security headers; sign-out ends the sign-in server-side, so
// the old cookie no longer works.
func TestSignInAndOut(t *testing.T) {
	srv := testserver.Start(t)
	v := newVisitor(t, srv)
	resp := v.do("GET", "/console/sessions", nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/sign-in") {
		t.Fatalf("signed-out sessions page: %d → %q, want 303 to the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if code, _, _ := v.post("/console/sessions", url.Values{"agent_id": {"agent_x"}}); code != http.StatusUnauthorized {
		t.Errorf("signed-out action: %d, want 401", code)
	}

	status, body := v.get("/console/sign-in")
	m := hiddenSignIn.FindStringSubmatch(body)
	if status != http.StatusOK || m == nil {
		t.Fatalf("sign-in page %d", status)
	}
	if r := v.do("POST", "/console/sign-in", url.Values{"signin_token": {m[1]}, "api_key": {"not-a-key"}}); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("sign in with a wrong key: %d, want 401", r.StatusCode)
	}

	v.signIn(srv.APIKey)
	var session *http.Cookie
	u, _ := url.Parse(srv.BaseURL + "/console/")
	for _, c := range v.http.Jar.Cookies(u) {
		if c.Name == "mango_console" {
			session = c
		}
	}
	if session == nil || strings.Contains(session.Value, srv.APIKey) {
		t.Fatalf("session cookie %v: want one that is not the key", session)
	}
	if code, _ := v.get("/console/sessions"); code != http.StatusOK {
		t.Fatalf("sessions page signed in: %d", code)
	}

	if code, loc, _ := v.post("/console/sign-out", nil); code != http.StatusSeeOther || loc != "/console/sign-in" {
		t.Fatalf("sign out: %d → %q", code, loc)
	}
	replay := newVisitor(t, srv)
	replay.http.Jar.SetCookies(u, []*http.Cookie{{Name: "mango_console", Value: session.Value, Path: "/console"}})
	if r := replay.do("GET", "/console/sessions", nil); r.StatusCode != http.StatusSeeOther {
		t.Errorf("the cookie after sign-out: %d, want 303 to sign in", r.StatusCode)
	}
}

// TestActionsNeedCSRF: a change without the sign-in's CSRF token, or
// from another origin, is refused and changes nothing.
func TestActionsNeedCSRF(t *testing.T) {
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	form := url.Values{"agent_id": {"agent_x"}, "environment_id": {"env_x"}}
	if r := v.do("POST", "/console/sessions", form); r.StatusCode != http.StatusForbidden {
		t.Errorf("create without a CSRF token: %d, want 403", r.StatusCode)
	}
	form.Set("csrf", "wrong")
	if r := v.do("POST", "/console/sessions", form); r.StatusCode != http.StatusForbidden {
		t.Errorf("create with a wrong CSRF token: %d, want 403", r.StatusCode)
	}
	if code, loc, _ := v.post("/console/sign-out", nil); code != http.StatusSeeOther {
		t.Errorf("sign out with the token: %d %s", code, loc)
	}
}

// TestFormBodyCapped: a form without a file larger than the console takes
// is refused as too large (413), not read whole.
func TestFormBodyCapped(t *testing.T) {
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	code, _, body := v.post("/console/sessions", url.Values{"title": {strings.Repeat("x", 5<<20)}})
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "larger than") {
		t.Errorf("a 5 MB form: %d %q, want 413 saying it is too large", code, body)
	}
}
