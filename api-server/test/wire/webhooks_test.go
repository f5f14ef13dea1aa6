package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
)

// delivery is one webhook request a receiver verified.
type delivery struct {
	id, typ, resource string
	body              []byte
	header            http.Header
}

// receiver is a webhook endpoint that verifies every delivery with the
// SDK's Webhooks.Unwrap; while down it answers 503 without reading.
type receiver struct {
	t       *testing.T
	srv     *httptest.Server
	down    atomic.Bool
	secret  atomic.Value // string
	mu      sync.Mutex
	got     []delivery
	refused int
	failed  []string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if r.down.Load() {
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	body, _ := io.ReadAll(req.Body)
	secret, _ := r.secret.Load().(string)
	client := anthropic.NewClient(option.WithAPIKey("unused"))
	ev, err := client.Beta.Webhooks.Unwrap(body, req.Header, option.WithWebhookKey(secret))
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed = append(r.failed, fmt.Sprintf("%v: %s", err, body))
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}
	if ev.Data.AsAny() == nil {
		r.failed = append(r.failed, fmt.Sprintf("data of type %q decodes to no SDK variant: %s", ev.Data.Type, body))
	}
	r.got = append(r.got, delivery{id: req.Header.Get("webhook-id"), typ: ev.Data.Type, resource: ev.Data.ID, body: body, header: req.Header.Clone()})
	w.WriteHeader(http.StatusNoContent)
}

// of are the deliveries of the resource, in arrival order.
func (r *receiver) of(resource string) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []delivery
	for _, d := range r.got {
		if d.resource == resource {
			out = append(out, d)
		}
	}
	return out
}

// waitTypes waits until the resource's deliveries include every type.
func (r *receiver) waitTypes(resource string, timeout time.Duration, types ...string) []delivery {
	r.t.Helper()
	var got []delivery
	poll.Until(r.t, timeout, fmt.Sprintf("webhooks %v of %s", types, resource), func() (bool, string) {
		got = r.of(resource)
		seen := map[string]bool{}
		for _, d := range got {
			seen[d.typ] = true
		}
		for _, typ := range types {
			if !seen[typ] {
				return false, fmt.Sprintf("got %v", deliveryTypes(got))
			}
		}
		return true, ""
	})
	return got
}

func deliveryTypes(ds []delivery) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.typ)
	}
	return out
}

// TestWebhooksThroughSDK registers an endpoint with the SDK and checks
// what reaches it: every delivery verifies with Webhooks.Unwrap; a session
// with a scripted turn and an always_ask tool call sends created, running,
// requires_action and idled; an endpoint down for 30 s then receives every
// event, each webhook-id once; a tampered body fails verification; the
// endpoint's API (get, list, update, regenerate, delete) works as the SDK
// types it, and the operator's delivery log shows the retries.
func TestWebhooksThroughSDK(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_WEBHOOK_ALLOW_PRIVATE", "1"), testserver.WithEnv("MANGO_WEBHOOK_RETRY_MAX", "2s"))
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	e.worker = startWorker(t, srv, "wire-webhooks", e.root)
	ctx := context.Background()
	rcv := newReceiver(t)
	types := []string{"session.created", "session.status_run_started", "session.running", "session.status_idled", "session.idled",
		"session.requires_action", "session.updated", "session.archived", "agent.created", "environment.created"}
	ep, err := e.client.Beta.Organization.Webhooks.New(ctx, anthropic.BetaOrganizationWebhookNewParams{URL: rcv.srv.URL + "/hook",
		EnabledEvents: types, Name: anthropic.String("ci")})
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.SigningSecret) < 10 || ep.SigningSecret[:6] != "whsec_" || ep.State != "enabled" || len(ep.EnabledEvents) != len(types) {
		t.Fatalf("created endpoint %s: want a whsec_ secret, enabled, the events", ep.RawJSON())
	}
	rcv.secret.Store(ep.SigningSecret)

	// A turn, then an always_ask call.
	ask := anthropic.BetaAgentNewParamsToolUnion{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{
		DefaultConfig: anthropic.BetaManagedAgentsAgentToolsetDefaultConfigParams{PermissionPolicy: anthropic.BetaManagedAgentsAgentToolsetDefaultConfigParamsPermissionPolicyUnion{
			OfAlwaysAsk: &anthropic.BetaManagedAgentsAlwaysAskPolicyParam{}}}}}
	id := e.session(t, []anthropic.BetaAgentNewParamsToolUnion{ask})
	events := e.watch(t, id)
	sess, err := e.client.Beta.Sessions.Get(ctx, id, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	rcv.waitTypes(sess.Agent.ID, time.Minute, "agent.created")
	rcv.waitTypes(sess.EnvironmentID, time.Minute, "environment.created")
	e.say(t, id, "#reply hello")
	until(t, events, "session.status_idle", time.Minute)
	e.say(t, id, `#tool bash {"command":"echo hi"}`)
	until(t, events, "session.status_idle", time.Minute)
	// Deliveries are not ordered (an endpoint takes several at once): the
	// payload names the resource, which the client reads with a GET.
	if _, err := e.client.Beta.Sessions.Update(ctx, id, anthropic.BetaSessionUpdateParams{Title: anthropic.String("renamed")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Beta.Sessions.Archive(ctx, id, anthropic.BetaSessionArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	rcv.waitTypes(id, time.Minute, "session.created", "session.status_run_started", "session.running", "session.status_idled",
		"session.idled", "session.requires_action", "session.updated", "session.archived")

	// Down for 30 s: a session runs meanwhile; every event arrives after.
	rcv.down.Store(true)
	id2 := e.session(t, nil)
	events2 := e.watch(t, id2)
	e.say(t, id2, "#reply while down")
	until(t, events2, "session.status_idle", time.Minute)
	time.Sleep(30 * time.Second) // the outage the test is about
	rcv.down.Store(false)
	rcv.waitTypes(id2, time.Minute, "session.created", "session.status_run_started", "session.status_idled")
	seen := map[string]int{}
	rcv.mu.Lock()
	for _, d := range rcv.got {
		seen[d.id]++
	}
	refused, failed := rcv.refused, rcv.failed
	rcv.mu.Unlock()
	for wid, n := range seen {
		if n != 1 {
			t.Errorf("webhook-id %s delivered %d times, want once", wid, n)
		}
	}
	if refused == 0 || len(failed) > 0 {
		t.Errorf("refused %d deliveries while down (want some), %d failed verification: %v", refused, len(failed), failed)
	}

	// A tampered body fails verification.
	d := rcv.of(id)[0]
	tampered := bytes.Replace(d.body, []byte(id), []byte(id2), 1)
	client := anthropic.NewClient(option.WithAPIKey("unused"))
	if _, err := client.Beta.Webhooks.Unwrap(tampered, d.header, option.WithWebhookKey(ep.SigningSecret)); err == nil {
		t.Error("a tampered body verified")
	}
	webhookEndpointAPI(t, e, rcv, ep.ID, id2)
}

// webhookEndpointAPI: get, list, update (events, state), the operator's
// delivery log, regenerate (new deliveries verify with the new secret
// only) and delete, through the SDK.
func webhookEndpointAPI(t *testing.T, e *turnEnv, rcv *receiver, epID, retried string) {
	ctx := context.Background()
	got, err := e.client.Beta.Organization.Webhooks.Get(ctx, epID, anthropic.BetaOrganizationWebhookGetParams{})
	if err != nil || got.ID != epID || got.Name != "ci" || got.JSON.ExtraFields["signing_secret"].Valid() {
		t.Fatalf("get %v: %v (the secret must not be shown)", got, err)
	}
	page, err := e.client.Beta.Organization.Webhooks.List(ctx, anthropic.BetaOrganizationWebhookListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != epID {
		t.Fatalf("list: %v %v", page, err)
	}
	// The operator's log: the deliveries made while down took retries.
	r := do(t, e.srv, "GET", "/admin/webhooks/"+epID+"/deliveries?limit=1000", "", nil, nil)
	var log struct {
		Data []struct {
			ResourceID string `json:"resource_id"`
			Status     string `json:"status"`
			Attempts   int    `json:"attempts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &log); r.status != 200 || err != nil {
		t.Fatalf("delivery log: %d %s", r.status, r.body)
	}
	retries := 0
	for _, d := range log.Data {
		if d.ResourceID == retried && d.Status == "delivered" && d.Attempts > 1 {
			retries++
		}
	}
	if retries == 0 {
		t.Errorf("delivery log %s: no delivery of %s took retries", r.body, retried)
	}
	secret, err := e.client.Beta.Organization.Webhooks.RegenerateSigningSecret(ctx, epID, anthropic.BetaOrganizationWebhookRegenerateSigningSecretParams{})
	if err != nil || secret.SigningSecret == "" {
		t.Fatalf("regenerate: %v", err)
	}
	rcv.secret.Store(secret.SigningSecret)
	id := e.session(t, nil)
	rcv.waitTypes(id, time.Minute, "session.created")
	upd, err := e.client.Beta.Organization.Webhooks.Update(ctx, epID, anthropic.BetaOrganizationWebhookUpdateParams{
		State: anthropic.BetaOrganizationWebhookUpdateParamsStateDisabled, EnabledEvents: []string{"session.created"}})
	if err != nil || upd.State != "disabled" || len(upd.EnabledEvents) != 1 {
		t.Fatalf("update: %v %v", upd, err)
	}
	_, err = e.client.Beta.Organization.Webhooks.Update(ctx, epID, anthropic.BetaOrganizationWebhookUpdateParams{EnabledEvents: []string{"session.nope"}})
	wantAPIError(t, err, 400)
	if _, err := e.client.Beta.Organization.Webhooks.Delete(ctx, epID, anthropic.BetaOrganizationWebhookDeleteParams{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.Beta.Organization.Webhooks.Get(ctx, epID, anthropic.BetaOrganizationWebhookGetParams{})
	wantAPIError(t, err, 404)
}
