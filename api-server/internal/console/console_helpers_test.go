package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

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

// createFromForm submits the new-resource form at path (/console/agents
// ...) and returns the id, of prefix (agent_ ...), of the resource whose
// page it leads to.
func createFromForm(t *testing.T, v *visitor, path string, form url.Values, prefix string) string {
	t.Helper()
	code, loc, body := v.post(path, form)
	id, ok := strings.CutPrefix(loc, path+"/")
	if code != http.StatusSeeOther || !ok || !strings.HasPrefix(id, prefix) || strings.Contains(id, "/") {
		t.Fatalf("POST %s %v: %d → %q, want 303 to the new %s page\n%s", path, form, code, loc, prefix, body)
	}
	return id
}

func agentFromForm(t *testing.T, v *visitor, form url.Values) string {
	t.Helper()
	return createFromForm(t, v, "/console/agents", form, "agent_")
}

func environmentFromForm(t *testing.T, v *visitor, form url.Values) string {
	t.Helper()
	return createFromForm(t, v, "/console/environments", form, "env_")
}

func vaultFromForm(t *testing.T, v *visitor, name, metadata string) string {
	t.Helper()
	return createFromForm(t, v, "/console/vaults", url.Values{"display_name": {name}, "metadata": {metadata}}, "vlt_")
}

// sessionWith creates an agent, an environment and a session of both,
// with more set on the session's parameters (a file resource, vaults).
func sessionWith(t *testing.T, client anthropic.Client, name string, more func(*anthropic.BetaSessionNewParams)) string {
	t.Helper()
	ctx := context.Background()
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: name, Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: name + "-" + agent.ID})
	if err != nil {
		t.Fatal(err)
	}
	p := anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID}
	more(&p)
	s, err := client.Beta.Sessions.New(ctx, p)
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	return s.ID
}

// sessionWithFile creates a session that mounts the file fileID.
func sessionWithFile(t *testing.T, client anthropic.Client, fileID string) string {
	t.Helper()
	return sessionWith(t, client, "files", func(p *anthropic.BetaSessionNewParams) {
		p.Resources = []anthropic.BetaSessionNewParamsResourceUnion{{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: fileID}}}
	})
}

// sessionWithVault creates a session that uses vault id.
func sessionWithVault(t *testing.T, client anthropic.Client, id string) string {
	t.Helper()
	return sessionWith(t, client, "vaults", func(p *anthropic.BetaSessionNewParams) { p.VaultIDs = []string{id} })
}
