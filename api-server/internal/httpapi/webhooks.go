package httpapi

// Webhook endpoints, as the SDK's Organization.Webhooks types them:
// where Mango delivers the managed-agents events a client subscribes to
// (api-server/internal/webhooks delivers them). The signing secret is
// shown once, at creation and regeneration, and sealed at rest with the
// vault keys.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/api-server/internal/webhooks"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/internal/netguard"
)

// WebhookEventTypes are the event types an endpoint may subscribe to: the
// managed-agents events of the SDK's webhook union. Mango sends those of
// the resources it has; the others are accepted so that a subscription
// made for the hosted service carries over.
var WebhookEventTypes = []string{
	"session.created", "session.pending", "session.running", "session.idled", "session.requires_action",
	"session.archived", "session.deleted", "session.updated", "session.budget_reached",
	"session.status_run_started", "session.status_idled", "session.status_rescheduled", "session.status_terminated",
	"session.thread_created", "session.thread_idled", "session.thread_terminated", "session.outcome_evaluation_ended",
	"agent.created", "agent.updated", "agent.archived", "agent.deleted",
	"environment.created", "environment.updated", "environment.archived", "environment.deleted",
	"memory_store.created", "memory_store.archived", "memory_store.deleted",
	"vault.created", "vault.archived", "vault.deleted",
	"vault_credential.created", "vault_credential.archived", "vault_credential.deleted", "vault_credential.refresh_failed",
	"deployment.created", "deployment.updated", "deployment.paused", "deployment.unpaused", "deployment.archived", "deployment.deleted",
	"deployment_run.started", "deployment_run.succeeded", "deployment_run.failed",
}

// webhookEndpointResponse is the wire form of an endpoint; SigningSecret
// only in the answers that show it.
type webhookEndpointResponse struct {
	ID             string    `json:"id"`
	URL            string    `json:"url"`
	Name           string    `json:"name"`
	Description    string    `json:"description"`
	EnabledEvents  []string  `json:"enabled_events"`
	State          string    `json:"state"`
	DisabledReason string    `json:"disabled_reason"`
	SigningSecret  string    `json:"signing_secret,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

func toWebhookEndpointResponse(e *db.WebhookEndpoint) *webhookEndpointResponse {
	return &webhookEndpointResponse{ID: e.ID, URL: e.URL, Name: e.Name, Description: e.Description, EnabledEvents: e.EnabledEvents,
		State: e.State, DisabledReason: e.DisabledReason, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
}

func webhookNotFound(id string) error { return apierror.NotFoundf("webhook endpoint %q not found", id) }

func webhookID(c echo.Context) (string, error) {
	return pathID(c, "id", ids.WebhookEndpoint, webhookNotFound)
}

// webhookSecretPurpose binds an endpoint's sealed secret to the endpoint.
func webhookSecretPurpose(id string) string { return "webhook_secret:" + id }

type webhookInput struct {
	URL           *string  `json:"url"`
	Name          *string  `json:"name"`
	Description   *string  `json:"description"`
	EnabledEvents []string `json:"enabled_events"`
	State         *string  `json:"state"`
}

func (a *API) webhookCreate(c echo.Context) error {
	var in webhookInput
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if in.State != nil {
		return apierror.Invalid("state: is set by updates only (an endpoint is created enabled)")
	}
	if in.URL == nil {
		return apierror.Invalid("url: is required")
	}
	if len(in.EnabledEvents) == 0 {
		return apierror.Invalid("enabled_events: must list at least one event type")
	}
	e := &db.WebhookEndpoint{ID: ids.New(ids.WebhookEndpoint)}
	if err := a.applyWebhookInput(e, &in); err != nil {
		return err
	}
	secret, err := a.newWebhookSecret(e.ID)
	if err != nil {
		return err
	}
	e.SecretSealed = secret.sealed
	created, err := a.deps.Store.WebhookEndpointCreate(c.Request().Context(), e, a.now())
	if err != nil {
		return err
	}
	resp := toWebhookEndpointResponse(created)
	resp.SigningSecret = secret.plain
	return c.JSON(http.StatusOK, resp)
}

// applyWebhookInput validates the members in sets and applies them to e.
func (a *API) applyWebhookInput(e *db.WebhookEndpoint, in *webhookInput) error {
	if in.URL != nil {
		if err := a.checkWebhookURL(*in.URL); err != nil {
			return err
		}
		e.URL = *in.URL
	}
	if in.Name != nil {
		if len([]rune(*in.Name)) > 256 {
			return apierror.Invalid("name: must be at most 256 characters")
		}
		e.Name = *in.Name
	}
	if in.Description != nil {
		if len([]rune(*in.Description)) > 2048 {
			return apierror.Invalid("description: must be at most 2048 characters")
		}
		e.Description = *in.Description
	}
	if len(in.EnabledEvents) > 0 {
		events, err := webhookEvents(in.EnabledEvents)
		if err != nil {
			return err
		}
		e.EnabledEvents = events
	}
	if in.State != nil {
		switch *in.State {
		case "enabled":
			e.State, e.DisabledReason = "enabled", ""
		case "disabled":
			e.State, e.DisabledReason = "disabled", ""
		default:
			return apierror.Invalid("state: must be \"enabled\" or \"disabled\", got %q", *in.State)
		}
	}
	return nil
}

// webhookEvents checks a subscription: known types, each once (sorted).
func webhookEvents(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for i, t := range in {
		if !slices.Contains(WebhookEventTypes, t) {
			return nil, jsonx.Errorf(fmt.Sprintf("enabled_events[%d]", i), "unknown event type %q (expected one of %s)",
				t, strings.Join(WebhookEventTypes, ", "))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}

// checkWebhookURL accepts an absolute https URL (http too when the
// operator allows private targets, for development) whose host is not a
// private address unless allowed: deliveries are guarded again when they
// connect (a name may resolve anywhere).
func (a *API) checkWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || len(raw) > 2048 {
		return apierror.Invalid("url: must be an absolute https URL of at most 2048 characters, got %q", raw)
	}
	allow := a.deps.WebhookAllowPrivate
	switch {
	case u.Scheme == "https", u.Scheme == "http" && allow:
	default:
		return apierror.Invalid("url: must use https, got %q", u.Scheme)
	}
	if u.User != nil {
		return apierror.Invalid("url: must not carry credentials")
	}
	if !allow {
		if err := netguard.CheckURL(raw); err != nil {
			return apierror.Invalid("url: %v (private, loopback and link-local targets need MANGO_WEBHOOK_ALLOW_PRIVATE=1)", err)
		}
	}
	return nil
}

// webhookSecret is a new signing secret and its sealed form.
type webhookSecret struct {
	plain  string
	sealed []byte
}

func (a *API) newWebhookSecret(id string) (*webhookSecret, error) {
	if a.deps.Secrets == nil {
		return nil, &apierror.Error{Status: http.StatusServiceUnavailable, Type: apierror.API,
			Message: "webhook endpoints need the vault keys (MANGO_VAULT_KEYS) to seal their signing secrets; this server has none"}
	}
	plain, err := webhooks.NewSecret()
	if err != nil {
		return nil, err
	}
	sealed, err := a.deps.Secrets.Seal([]byte(plain), webhookSecretPurpose(id))
	if err != nil {
		return nil, err
	}
	return &webhookSecret{plain: plain, sealed: sealed}, nil
}

func (a *API) webhookGet(c echo.Context) error {
	e, err := a.loadWebhook(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toWebhookEndpointResponse(e))
}

func (a *API) loadWebhook(c echo.Context) (*db.WebhookEndpoint, error) {
	id, err := webhookID(c)
	if err != nil {
		return nil, err
	}
	e, err := a.deps.Store.WebhookEndpointGet(c.Request().Context(), id)
	if errors.Is(err, db.ErrNotFound) {
		return nil, webhookNotFound(id)
	}
	return e, err
}

func (a *API) webhookUpdate(c echo.Context) error {
	e, err := a.loadWebhook(c)
	if err != nil {
		return err
	}
	var in webhookInput
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if err := a.applyWebhookInput(e, &in); err != nil {
		return err
	}
	updated, err := a.deps.Store.WebhookEndpointUpdate(c.Request().Context(), e, a.now())
	if errors.Is(err, db.ErrNotFound) {
		return webhookNotFound(e.ID)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toWebhookEndpointResponse(updated))
}

func (a *API) webhookDelete(c echo.Context) error {
	id, err := webhookID(c)
	if err != nil {
		return err
	}
	if err := a.deps.Store.WebhookEndpointDelete(c.Request().Context(), id); errors.Is(err, db.ErrNotFound) {
		return webhookNotFound(id)
	} else if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]string{"id": id, "type": "webhook_endpoint_deleted"})
}

func (a *API) webhookRegenerateSecret(c echo.Context) error {
	e, err := a.loadWebhook(c)
	if err != nil {
		return err
	}
	secret, err := a.newWebhookSecret(e.ID)
	if err != nil {
		return err
	}
	if _, err := a.deps.Store.WebhookEndpointSetSecret(c.Request().Context(), e.ID, secret.sealed, a.now()); errors.Is(err, db.ErrNotFound) {
		return webhookNotFound(e.ID)
	} else if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]string{"signing_secret": secret.plain})
}

// webhookList answers a page of endpoints the SDK's way: after_id,
// before_id, limit (1-100, default 20) and order (asc, the default, or
// desc by creation), with has_more, first_id and last_id.
func (a *API) webhookList(c echo.Context) error {
	ctx := c.Request().Context()
	p := db.WebhookEndpointListParams{Limit: 20}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return apierror.Invalid("limit: must be an integer between 1 and 100, got %q", v)
		}
		p.Limit = n
	}
	switch order := c.QueryParam("order"); order {
	case "", "asc":
	case "desc":
		p.Descending = true
	default:
		return apierror.Invalid("order: must be asc or desc, got %q", order)
	}
	var err error
	if p.After, err = a.webhookCursor(ctx, c.QueryParam("after_id"), "after_id"); err != nil {
		return err
	}
	if p.Before, err = a.webhookCursor(ctx, c.QueryParam("before_id"), "before_id"); err != nil {
		return err
	}
	if p.Descending {
		p.After, p.Before = p.Before, p.After
	}
	rows, more, err := a.deps.Store.WebhookEndpointList(ctx, p)
	if err != nil {
		return err
	}
	resp := struct {
		Data    []*webhookEndpointResponse `json:"data"`
		HasMore bool                       `json:"has_more"`
		FirstID *string                    `json:"first_id"`
		LastID  *string                    `json:"last_id"`
	}{Data: make([]*webhookEndpointResponse, 0, len(rows)), HasMore: more}
	for _, e := range rows {
		resp.Data = append(resp.Data, toWebhookEndpointResponse(e))
	}
	if len(rows) > 0 {
		resp.FirstID, resp.LastID = &rows[0].ID, &rows[len(rows)-1].ID
	}
	return c.JSON(http.StatusOK, resp)
}

// webhookCursor is the position of the endpoint a paging parameter names.
func (a *API) webhookCursor(ctx context.Context, id, param string) (*db.Cursor, error) {
	if id == "" {
		return nil, nil
	}
	e, err := a.deps.Store.WebhookEndpointGet(ctx, id)
	if errors.Is(err, db.ErrNotFound) {
		return nil, apierror.Invalid("%s: webhook endpoint %q not found", param, id)
	}
	if err != nil {
		return nil, err
	}
	return &db.Cursor{CreatedAt: e.CreatedAt, ID: e.ID}, nil
}

// webhookDeliveryResponse is a delivery in the operator's log.
type webhookDeliveryResponse struct {
	EventID       string     `json:"event_id"`
	EventType     string     `json:"event_type"`
	ResourceID    string     `json:"resource_id"`
	EventAt       time.Time  `json:"event_at"`
	Status        string     `json:"status"`
	Attempts      int        `json:"attempts"`
	LastStatus    *int32     `json:"last_status_code"`
	LastError     string     `json:"last_error"`
	LastLatencyMs *int32     `json:"last_latency_ms"`
	LastAttemptAt *time.Time `json:"last_attempt_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	DeliveredAt   *time.Time `json:"delivered_at"`
}

// adminWebhookDeliveries answers an endpoint's latest deliveries (limit,
// 1-1000, default 100), newest first: the operator's delivery log.
func (a *API) adminWebhookDeliveries(c echo.Context) error {
	e, err := a.loadWebhook(c)
	if err != nil {
		return err
	}
	limit := 100
	if v := c.QueryParam("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 1000 {
			return apierror.Invalid("limit: must be an integer between 1 and 1000, got %q", v)
		}
	}
	ds, err := a.deps.Store.WebhookDeliveries(c.Request().Context(), e.ID, limit)
	if err != nil {
		return err
	}
	out := make([]webhookDeliveryResponse, 0, len(ds))
	for _, d := range ds {
		r := webhookDeliveryResponse{EventID: d.EventID, EventType: d.EventType, ResourceID: d.ResourceID, EventAt: d.EventAt,
			Status: d.Status, Attempts: d.Attempts, LastStatus: d.LastStatus, LastError: d.LastError, LastLatencyMs: d.LastLatencyMs,
			LastAttemptAt: d.LastAttemptAt, DeliveredAt: d.DeliveredAt}
		if d.Status == "pending" {
			r.NextAttemptAt = &d.NextAttemptAt
		}
		out = append(out, r)
	}
	return c.JSON(http.StatusOK, map[string]any{"endpoint": toWebhookEndpointResponse(e), "data": out})
}
