package console_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/httpapi"
	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
)

// hookReceiver records the deliveries it answers 200 to.
type hookReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []hookDelivery
}

type hookDelivery struct {
	body   []byte
	header http.Header
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	h := &hookReceiver{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.got = append(h.got, hookDelivery{body: b, header: r.Header.Clone()})
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) deliveries() []hookDelivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookDelivery(nil), h.got...)
}

var (
	secretShown = regexp.MustCompile(`id="signing_secret"[^>]* value="(whsec_[^"]+)"`)
	eventBoxes  = regexp.MustCompile(`<input type="checkbox" name="enabled_events" value="([^"]+)">`)
)

// webhookEnv is a server that accepts private webhook URLs, a signed-in
// visitor, the SDK and a receiver.
type webhookEnv struct {
	v      *visitor
	client anthropic.Client
	rcv    *hookReceiver
}

func newWebhookEnv(t *testing.T) *webhookEnv {
	t.Helper()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_WEBHOOK_ALLOW_PRIVATE", "true"))
	return &webhookEnv{v: signedIn(t, srv), client: resourceSDK(srv), rcv: newHookReceiver(t)}
}

// shownSecret is the signing secret body shows (as the page has it, and
// unescaped); it fails t when there is none.
func shownSecret(t *testing.T, body string) (escaped, plain string) {
	t.Helper()
	m := secretShown.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the page shows no signing secret")
	}
	// The page escapes characters of the secret such as + as character
	// references.
	plain = html.UnescapeString(m[1])
	if !strings.HasPrefix(plain, "whsec_") || strings.ContainsAny(plain, "&;") {
		t.Fatalf("secret shown %q, want a whsec_ secret", plain)
	}
	return m[1], plain
}

// create posts the create form (receiver URL, agent.created and
// session.created) and returns the endpoint's id and the secret shown.
func (e *webhookEnv) create(t *testing.T) (id, secretHTML, secret string) {
	t.Helper()
	form := url.Values{"url": {e.rcv.srv.URL + "/hook"}, "name": {"<script>x</script>"}, "description": {"for <b>tests</b>"},
		"enabled_events": {"agent.created", "session.created"}}
	code, _, body := e.v.post("/console/webhooks", form)
	if code != http.StatusOK {
		t.Fatalf("create: %d, want 200 with the endpoint's page", code)
	}
	secretHTML, secret = shownSecret(t, body)
	pageHas(t, "page after create", body, "will not be shown again", "&lt;script&gt;x&lt;/script&gt;", "for &lt;b&gt;tests&lt;/b&gt;")
	pageLacks(t, "page after create", body, "<script>x</script>")
	eps, err := e.client.Beta.Organization.Webhooks.List(context.Background(), anthropic.BetaOrganizationWebhookListParams{})
	if err != nil || len(eps.Data) != 1 || eps.Data[0].Name != "<script>x</script>" || eps.Data[0].URL != e.rcv.srv.URL+"/hook" ||
		strings.Join(eps.Data[0].EnabledEvents, ",") != "agent.created,session.created" {
		t.Fatalf("the API's endpoints: %v %+v", err, eps)
	}
	return eps.Data[0].ID, secretHTML, secret
}

// deliveredWith makes an agent (an agent.created event), waits for its
// delivery (the n-th) and checks it verifies with secret.
func (e *webhookEnv) deliveredWith(t *testing.T, n int, secret string) {
	t.Helper()
	if _, err := e.client.Beta.Agents.New(context.Background(), anthropic.BetaAgentNewParams{Name: fmt.Sprintf("hooked %d", n),
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, fmt.Sprintf("delivery %d of agent.created", n), func() (bool, string) {
		got := len(e.rcv.deliveries())
		return got >= n, fmt.Sprintf("%d deliveries", got)
	})
	d := e.rcv.deliveries()[n-1]
	verifier := anthropic.NewClient(option.WithWebhookKey(secret))
	if _, err := verifier.Beta.Webhooks.Unwrap(d.body, d.header); err != nil {
		t.Errorf("delivery %d does not verify with the secret the page showed: %v", n, err)
	}
}

// TestWebhookCreate: the form offers the API's event types and refuses
// an endpoint without events; one created through it shows its signing
// secret once, the secret deliveries are signed with; the list and the
// endpoint's page show it, its name escaped, and the page its delivery
// log, but never the secret again.
func TestWebhookCreate(t *testing.T) {
	e := newWebhookEnv(t)
	code, body := e.v.get("/console/webhooks/new")
	if code != http.StatusOK {
		t.Fatalf("new endpoint form: %d", code)
	}
	var boxes []string
	for _, m := range eventBoxes.FindAllStringSubmatch(body, -1) {
		boxes = append(boxes, m[1])
	}
	if strings.Join(boxes, ",") != strings.Join(httpapi.WebhookEventTypes, ",") {
		t.Errorf("the form's event checkboxes %v, want the API's event types %v", boxes, httpapi.WebhookEventTypes)
	}
	form := url.Values{"url": {e.rcv.srv.URL + "/hook"}, "name": {"no events"}}
	if code, _, body := e.v.post("/console/webhooks", form); code != http.StatusBadRequest || !strings.Contains(body, "at least one event") {
		t.Errorf("create without events: %d, want 400 asking for at least one event", code)
	}

	id, secretHTML, secret := e.create(t)
	page := "/console/webhooks/" + id
	_, body = e.v.get("/console/webhooks")
	pageHas(t, "endpoint list", body, `href="`+page+`"`, "&lt;script&gt;x&lt;/script&gt;", e.rcv.srv.URL+"/hook", "status-enabled", "agent.created")
	pageLacks(t, "endpoint list", body, "<script>x</script>", secret, secretHTML)

	e.deliveredWith(t, 1, secret)
	poll.Until(t, 30*time.Second, "the page's log to show the delivery delivered", func() (bool, string) {
		_, body = e.v.get(page)
		return strings.Contains(body, "status-delivered"), "not delivered"
	})
	pageHas(t, "endpoint page", body, "<code>agent.created</code>", "HTTP 200", " ms", "&lt;script&gt;x&lt;/script&gt;",
		`action="`+page+`/delete" data-confirm=`, `action="`+page+`/regenerate-secret" data-confirm=`)
	pageLacks(t, "endpoint page", body, secret, secretHTML, "will not be shown again", "whsec_")
}

// TestWebhookChanges: an endpoint's page disables and enables it
// (refusing another state), regenerates its secret (shown once, a new
// one, which later deliveries are signed with) and deletes it.
func TestWebhookChanges(t *testing.T) {
	e := newWebhookEnv(t)
	ctx := context.Background()
	id, _, secret := e.create(t)
	page := "/console/webhooks/" + id
	state := func() string {
		t.Helper()
		ep, err := e.client.Beta.Organization.Webhooks.Get(ctx, id, anthropic.BetaOrganizationWebhookGetParams{})
		if err != nil {
			t.Fatal(err)
		}
		return string(ep.State)
	}

	if code, loc, _ := e.v.post(page+"/state", url.Values{"state": {"disabled"}}); code != http.StatusSeeOther || loc != page {
		t.Fatalf("disable: %d → %q, want 303 back to %s", code, loc, page)
	}
	_, body := e.v.get(page)
	pageHas(t, "disabled endpoint page", body, "status-disabled", `name="state" value="enabled"`, ">Enable<")
	if s := state(); s != "disabled" {
		t.Errorf("state after disable: %s, want disabled", s)
	}
	if code, _, body := e.v.post(page+"/state", url.Values{"state": {"off"}}); code != http.StatusBadRequest || !strings.Contains(body, "neither enabled nor disabled") {
		t.Errorf("state off: %d, want 400 naming the states", code)
	}
	if code, _, _ := e.v.post(page+"/state", url.Values{"state": {"enabled"}}); code != http.StatusSeeOther {
		t.Fatalf("enable: %d", code)
	}
	if s := state(); s != "enabled" {
		t.Errorf("state after enable: %s, want enabled", s)
	}

	code, _, body := e.v.post(page+"/regenerate-secret", nil)
	if code != http.StatusOK {
		t.Fatalf("regenerate: %d, want 200 with the new secret", code)
	}
	_, fresh := shownSecret(t, body)
	if fresh == secret {
		t.Errorf("regenerate shows the old secret")
	}
	pageHas(t, "page after regenerate", body, "will not be shown again")
	e.deliveredWith(t, 1, fresh)

	if code, loc, _ := e.v.post(page+"/delete", nil); code != http.StatusSeeOther || loc != "/console/webhooks" {
		t.Fatalf("delete: %d → %q, want 303 to the list", code, loc)
	}
	if _, body := e.v.get("/console/webhooks"); !strings.Contains(body, "No webhook endpoints.") {
		t.Errorf("list after delete still lists an endpoint")
	}
	if _, err := e.client.Beta.Organization.Webhooks.Get(ctx, id, anthropic.BetaOrganizationWebhookGetParams{}); err == nil {
		t.Errorf("the endpoint is still there after delete")
	}
	if code, body := e.v.get(page); code != http.StatusNotFound || !strings.Contains(body, "not found") {
		t.Errorf("deleted endpoint's page: %d, want 404 saying not found", code)
	}
}
