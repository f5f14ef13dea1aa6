package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/mangohq/mango/api-server/internal/httpapi"
)

// webhookRoutes registers the webhook endpoint pages.
func (c *Console) webhookRoutes() {
	m := c.mux
	m.Handle("GET "+Prefix+"/webhooks", c.signedIn(c.webhookList))
	m.Handle("GET "+Prefix+"/webhooks/new", c.signedIn(c.webhookNewForm))
	m.Handle("POST "+Prefix+"/webhooks", c.signedIn(c.webhookCreate))
	m.Handle("GET "+Prefix+"/webhooks/{id}", c.signedIn(c.webhookPage))
	m.Handle("POST "+Prefix+"/webhooks/{id}/state", c.signedIn(c.webhookSetState))
	m.Handle("POST "+Prefix+"/webhooks/{id}/regenerate-secret", c.signedIn(c.webhookRegenerateSecret))
	m.Handle("POST "+Prefix+"/webhooks/{id}/delete", c.signedIn(c.call(http.MethodDelete, "/v1/organizations/webhooks/{id}", Prefix+"/webhooks")))
}

// webhookPath is the API path of an endpoint.
func webhookPath(id string) string { return "/v1/organizations/webhooks/" + url.PathEscape(id) }

type webhookListPage struct {
	Endpoints []map[string]any
	Next      string // after_id of the next page, or ""
}

// webhookList shows the endpoints, oldest first (the API's order).
func (c *Console) webhookList(w http.ResponseWriter, r *http.Request, v *visit) error {
	q := url.Values{"limit": {"50"}}
	if after := r.FormValue("after_id"); after != "" {
		q.Set("after_id", after)
	}
	var l list[map[string]any]
	if err := v.api.get(r.Context(), "/v1/organizations/webhooks", q, &l); err != nil {
		return err
	}
	p := webhookListPage{Endpoints: l.Data}
	if l.HasMore && l.LastID != "" {
		p.Next = l.LastID
	}
	c.render(w, r, v, http.StatusOK, "webhooks", p)
	return nil
}

// eventGroup is the event types of one resource, a fieldset of the form.
type eventGroup struct {
	Resource string
	Types    []string
}

// webhookEventGroups groups the event types the API accepts by resource
// (session, agent, ...), in the API's order.
func webhookEventGroups() []eventGroup {
	var out []eventGroup
	for _, t := range httpapi.WebhookEventTypes {
		res, _, _ := strings.Cut(t, ".")
		if n := len(out); n == 0 || out[n-1].Resource != res {
			out = append(out, eventGroup{Resource: res})
		}
		out[len(out)-1].Types = append(out[len(out)-1].Types, t)
	}
	return out
}

// webhookNewForm asks for a new endpoint's URL, name, description and
// events.
func (c *Console) webhookNewForm(w http.ResponseWriter, r *http.Request, v *visit) error {
	c.render(w, r, v, http.StatusOK, "webhook_new", webhookEventGroups())
	return nil
}

// webhookCreate registers an endpoint and shows its page with the
// signing secret, which the API answers this once: it is rendered from
// the answer and kept nowhere.
func (c *Console) webhookCreate(w http.ResponseWriter, r *http.Request, v *visit) error {
	if err := r.ParseForm(); err != nil {
		return badInput(fmt.Sprintf("the endpoint form could not be read: %v", err))
	}
	events := r.PostForm["enabled_events"]
	if len(events) == 0 {
		return badInput("events: tick at least one event type the endpoint receives")
	}
	body := map[string]any{"url": strings.TrimSpace(r.PostFormValue("url")), "enabled_events": events}
	for _, k := range []string{"name", "description"} {
		if s := strings.TrimSpace(r.PostFormValue(k)); s != "" {
			body[k] = s
		}
	}
	var e map[string]any
	if err := v.api.post(r.Context(), "/v1/organizations/webhooks", body, &e); err != nil {
		return err
	}
	return c.showWebhook(w, r, v, str(e["id"]), str(e["signing_secret"]))
}

type webhookPage struct {
	Endpoint   map[string]any
	Deliveries []map[string]any
	// Secret is the signing secret just created or regenerated ("" on a
	// plain visit).
	Secret string
}

// webhookPage shows an endpoint, what can be done with it and its
// latest deliveries.
func (c *Console) webhookPage(w http.ResponseWriter, r *http.Request, v *visit) error {
	return c.showWebhook(w, r, v, r.PathValue("id"), "")
}

// showWebhook renders the endpoint's page, with secret when one was just
// made.
func (c *Console) showWebhook(w http.ResponseWriter, r *http.Request, v *visit, id, secret string) error {
	p := webhookPage{Secret: secret}
	if err := v.api.get(r.Context(), webhookPath(id), nil, &p.Endpoint); err != nil {
		return err
	}
	var log struct {
		Data []map[string]any `json:"data"`
	}
	if err := v.api.get(r.Context(), "/admin/webhooks/"+url.PathEscape(id)+"/deliveries", url.Values{"limit": {"100"}}, &log); err != nil {
		return err
	}
	p.Deliveries = log.Data
	c.render(w, r, v, http.StatusOK, "webhook", p)
	return nil
}

// webhookSetState enables or disables an endpoint.
func (c *Console) webhookSetState(w http.ResponseWriter, r *http.Request, v *visit) error {
	id, state := r.PathValue("id"), r.PostFormValue("state")
	if state != "enabled" && state != "disabled" {
		return badInput(fmt.Sprintf("state: %q is neither enabled nor disabled", state))
	}
	if err := v.api.post(r.Context(), webhookPath(id), map[string]any{"state": state}, nil); err != nil {
		return err
	}
	done(w, r, Prefix+"/webhooks/"+url.PathEscape(id))
	return nil
}

// webhookRegenerateSecret replaces the endpoint's signing secret and
// shows the new one, this once.
func (c *Console) webhookRegenerateSecret(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	var out struct {
		SigningSecret string `json:"signing_secret"`
	}
	if err := v.api.post(r.Context(), webhookPath(id)+"/regenerate_signing_secret", map[string]any{}, &out); err != nil {
		return err
	}
	return c.showWebhook(w, r, v, id, out.SigningSecret)
}
