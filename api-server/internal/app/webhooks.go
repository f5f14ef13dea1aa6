package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/webhooks"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/internal/netguard"
)

// webhookWorkspace is the workspace_id of Mango's webhook events: an
// installation has one workspace.
const webhookWorkspace = "default"

// webhookStore is the webhook relay's store: the database's deliveries,
// their endpoints' secrets opened and their payloads built.
type webhookStore struct {
	store   *db.Store
	secrets *envelope.Keyring
	log     *slog.Logger
	// org is the organization_id of the events: the installation's id,
	// read at the first claim (the relay's goroutine only).
	org string
}

// ClaimDue implements webhooks.Store. A delivery whose endpoint's secret
// cannot be opened (the vault keys changed) gives up at once, disabling
// the endpoint and saying why.
func (w *webhookStore) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]webhooks.Delivery, error) {
	if w.org == "" {
		org, err := w.store.InstallationID(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the installation id (organization_id of webhook events): %w", err)
		}
		w.org = org
	}
	dues, err := w.store.WebhookClaimDue(ctx, now, limit, lease)
	if err != nil {
		return nil, err
	}
	out := make([]webhooks.Delivery, 0, len(dues))
	for _, d := range dues {
		secret, err := w.secrets.Open(d.SecretSealed, "webhook_secret:"+d.EndpointID)
		if err != nil {
			w.log.ErrorContext(ctx, "webhooks: open an endpoint's signing secret", "endpoint", d.EndpointID, "err", err)
			if err := w.store.WebhookRecord(ctx, db.WebhookAttempt{EventID: d.EventID, EndpointID: d.EndpointID, At: now, GaveUp: true,
				Error: "the signing secret cannot be opened", DisableReason: "Its signing secret cannot be opened with the server's vault keys " +
					"(MANGO_VAULT_KEYS changed): regenerate it."}); err != nil {
				return nil, err
			}
			continue
		}
		body, err := webhookPayload(d, w.org)
		if err != nil {
			return nil, err
		}
		out = append(out, webhooks.Delivery{EventID: d.EventID, EventType: d.EventType, EndpointID: d.EndpointID, URL: d.URL, Secret: string(secret),
			Body: body, Attempt: d.Attempts, CreatedAt: d.EventAt})
	}
	return out, nil
}

// webhookPayload is the thin payload of a delivery, the same on every
// attempt: the event's id, time and type, and the resource it concerns.
func webhookPayload(d db.WebhookDue, org string) ([]byte, error) {
	return json.Marshal(map[string]any{"type": "event", "id": d.EventID, "created_at": d.EventAt.UTC().Format(time.RFC3339Nano),
		"data": map[string]string{"type": d.EventType, "id": d.ResourceID, "organization_id": org, "workspace_id": webhookWorkspace}})
}

// Record implements webhooks.Store.
func (w *webhookStore) Record(ctx context.Context, a webhooks.Attempt) error {
	rec := db.WebhookAttempt{EventID: a.EventID, EndpointID: a.EndpointID, At: a.At, StatusCode: a.StatusCode, Error: a.Error,
		Latency: a.Latency, Delivered: a.Delivered, NextAt: a.NextAt, GaveUp: a.GaveUp, Skipped: a.Skipped}
	if a.GaveUp {
		rec.DisableReason = fmt.Sprintf("Deliveries failed for %s (last: %s); fix the endpoint and enable it again.",
			webhooks.DefaultRetryWindow, a.Error)
	}
	return w.store.WebhookRecord(ctx, rec)
}

// Stats implements webhooks.StatsStore.
func (w *webhookStore) Stats(ctx context.Context, now time.Time) (webhooks.Stats, error) {
	st, err := w.store.WebhookStats(ctx, now)
	if err != nil {
		return webhooks.Stats{}, err
	}
	return webhooks.Stats{Pending: st.Pending, OldestAge: st.OldestAge}, nil
}

// newWebhookRelay is the relay of webhook deliveries: nil without the
// vault keys (no endpoint can be registered then). A delivery connects
// through the private-network guard unless MANGO_WEBHOOK_ALLOW_PRIVATE.
// The metrics are registered with reg either way, so dashboards find
// them (at 0) on a server without webhooks.
func newWebhookRelay(cfg *config.Config, store *db.Store, log *slog.Logger, reg prometheus.Registerer, tracer trace.Tracer) *webhooks.Relay {
	metrics := webhooks.NewMetrics(reg)
	if cfg.Secrets == nil {
		return nil
	}
	log = log.With("component", "webhooks")
	client := &http.Client{Transport: netguard.Transport(cfg.WebhookAllowPrivate)}
	return &webhooks.Relay{Store: &webhookStore{store: store, secrets: cfg.Secrets, log: log}, Client: client, Logger: log,
		MaxDelay: cfg.WebhookRetryMax, Tracer: tracer, Metrics: metrics}
}

// runWebhooks delivers webhook events until ctx ends; an attempt cut short
// is attempted again (its lease expires).
func (s *Server) runWebhooks(ctx context.Context) {
	if s.webhooks != nil {
		_ = s.webhooks.Run(ctx)
	}
}

// webhookWake wakes the relay on each announcement of new deliveries, and
// after the listener reconnects (announcements may have been missed).
type webhookWake struct{ r *webhooks.Relay }

// Notify implements pglisten.Handler.
func (w webhookWake) Notify(string) { w.r.Wake() }

// Gap implements pglisten.Handler.
func (w webhookWake) Gap() { w.r.Wake() }

var _ webhooks.StatsStore = (*webhookStore)(nil)
