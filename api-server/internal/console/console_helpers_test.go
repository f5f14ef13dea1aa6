package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// visitor is a browser without scripts: a cookie jar and forms.
type visitor struct {
	t    *testing.T
	srv  *testserver.Server
	http *http.Client
	csrf string
}

// newVisitor returns a signed-out visitor of srv's console.
func newVisitor(t *testing.T, srv *testserver.Server) *visitor {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &visitor{t: t, srv: srv, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// signedIn returns a visitor signed in with srv's API key.
func signedIn(t *testing.T, srv *testserver.Server) *visitor {
	t.Helper()
	v := newVisitor(t, srv)
	v.signIn(srv.APIKey)
	return v
}

var (
	hiddenSignIn = regexp.MustCompile(`name="signin_token" value="([^"]+)"`)
	metaCSRF     = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)
)

// signIn posts the sign-in form with key and expects to land on the
// sessions page.
func (v *visitor) signIn(key string) {
	v.t.Helper()
	status, body := v.get("/console/sign-in")
	m := hiddenSignIn.FindStringSubmatch(body)
	if status != http.StatusOK || m == nil {
		v.t.Fatalf("sign-in page: %d, token found %v", status, m != nil)
	}
	resp := v.do("POST", "/console/sign-in", url.Values{"signin_token": {m[1]}, "api_key": {key}})
	if resp.StatusCode != http.StatusSeeOther {
		v.t.Fatalf("sign in: %d, want 303", resp.StatusCode)
	}
	status, body = v.get("/console/sessions")
	mc := metaCSRF.FindStringSubmatch(body)
	if status != http.StatusOK || mc == nil {
		v.t.Fatalf("sessions page after sign-in: %d, csrf found %v", status, mc != nil)
	}
	v.csrf = mc[1]
}

// do sends a request (a form when form is not nil) and returns the
// response with its body read.
func (v *visitor) do(method, path string, form url.Values) *http.Response {
	v.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, v.srv.BaseURL+path, body)
	if err != nil {
		v.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := v.http.Do(req)
	if err != nil {
		v.t.Fatalf("%s %s: %v", method, path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

// get returns a page's status and body.
func (v *visitor) get(path string) (int, string) {
	v.t.Helper()
	resp := v.do("GET", path, nil)
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post submits a form of the console with the sign-in's CSRF token and
// returns the status, the Location and the body.
func (v *visitor) post(path string, form url.Values) (int, string, string) {
	v.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", v.csrf)
	resp := v.do("POST", path, form)
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

// regexpNext finds a list page's next-page link.
var regexpNext = regexp.MustCompile(`<a class="button" href="([^"]+)">Next page</a>`)
