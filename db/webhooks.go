package db

// This file holds webhooks: the endpoints clients register and the
// deliveries of the events they subscribe to. A state change that
// clients may subscribe to writes its deliveries (one per enabled endpoint
// subscribed to its type) in the transaction that makes the change
// (emitWebhooks): the outbox the api-server's relay drains at least once.
// An event nobody subscribes to writes nothing.

import (
	"context"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// WebhookEventPrefix starts the id of a webhook event.
const WebhookEventPrefix = "wevt_"

// WebhookChannel is the PostgreSQL channel on which a commit that wrote
// webhook deliveries is announced (no payload): relays claim at once
// rather than at their next poll.
const WebhookChannel = "mango_webhooks"

// WebhookEndpoint is an endpoint deliveries are sent to.
type WebhookEndpoint struct {
	ID, URL, Name, Description string
	EnabledEvents              []string
	// State is enabled or disabled; DisabledReason says why Mango
	// disabled it (empty when the client did).
	State, DisabledReason string
	// SecretSealed is the signing secret, sealed with the vault keys.
	SecretSealed         []byte
	CreatedAt, UpdatedAt time.Time
}

func endpointFromRow(r dbsqlc.WebhookEndpoint) *WebhookEndpoint {
	return &WebhookEndpoint{ID: r.ID, URL: r.Url, Name: r.Name, Description: r.Description, EnabledEvents: r.EnabledEvents,
		State: r.State, DisabledReason: r.DisabledReason, SecretSealed: r.SecretSealed, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// WebhookEndpointCreate stores a new, enabled endpoint.
func (s *Store) WebhookEndpointCreate(ctx context.Context, e *WebhookEndpoint, now time.Time) (*WebhookEndpoint, error) {
	row, err := s.q.WebhookEndpointCreate(ctx, dbsqlc.WebhookEndpointCreateParams{ID: e.ID, Url: e.URL, Name: e.Name,
		Description: e.Description, EnabledEvents: e.EnabledEvents, SecretSealed: e.SecretSealed, CreatedAt: now})
	if err != nil {
		return nil, mapErr("create webhook endpoint", err)
	}
	return endpointFromRow(row), nil
}

// WebhookEndpointGet returns an endpoint (ErrNotFound).
func (s *Store) WebhookEndpointGet(ctx context.Context, id string) (*WebhookEndpoint, error) {
	row, err := s.q.WebhookEndpointGet(ctx, id)
	if err != nil {
		return nil, mapErr("get webhook endpoint", err)
	}
	return endpointFromRow(row), nil
}

// WebhookEndpointUpdate stores an endpoint's url, name, description,
// events, state and disabled reason.
func (s *Store) WebhookEndpointUpdate(ctx context.Context, e *WebhookEndpoint, now time.Time) (*WebhookEndpoint, error) {
	row, err := s.q.WebhookEndpointUpdate(ctx, dbsqlc.WebhookEndpointUpdateParams{ID: e.ID, Url: e.URL, Name: e.Name,
		Description: e.Description, EnabledEvents: e.EnabledEvents, State: e.State, DisabledReason: e.DisabledReason, UpdatedAt: now})
	if err != nil {
		return nil, mapErr("update webhook endpoint", err)
	}
	return endpointFromRow(row), nil
}

// WebhookEndpointSetSecret replaces an endpoint's sealed signing secret.
func (s *Store) WebhookEndpointSetSecret(ctx context.Context, id string, sealed []byte, now time.Time) (*WebhookEndpoint, error) {
	row, err := s.q.WebhookEndpointSetSecret(ctx, dbsqlc.WebhookEndpointSetSecretParams{ID: id, SecretSealed: sealed, UpdatedAt: now})
	if err != nil {
		return nil, mapErr("set webhook secret", err)
	}
	return endpointFromRow(row), nil
}

// WebhookEndpointDelete deletes an endpoint and its deliveries
// (ErrNotFound).
func (s *Store) WebhookEndpointDelete(ctx context.Context, id string) error {
	n, err := s.q.WebhookEndpointDelete(ctx, id)
	if err != nil {
		return mapErr("delete webhook endpoint", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// WebhookEndpointListParams page the endpoints by (created_at, id).
type WebhookEndpointListParams struct {
	After, Before *Cursor
	Descending    bool
	Limit         int
}

// WebhookEndpointList returns a page of endpoints and whether more follow.
func (s *Store) WebhookEndpointList(ctx context.Context, p WebhookEndpointListParams) ([]*WebhookEndpoint, bool, error) {
	arg := dbsqlc.WebhookEndpointListParams{Descending: p.Descending, Lim: int32(p.Limit + 1)}
	if p.After != nil {
		arg.AfterCreated, arg.AfterID = &p.After.CreatedAt, p.After.ID
	}
	if p.Before != nil {
		arg.BeforeCreated, arg.BeforeID = &p.Before.CreatedAt, p.Before.ID
	}
	rows, err := s.q.WebhookEndpointList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list webhook endpoints", err)
	}
	out := make([]*WebhookEndpoint, 0, len(rows))
	for _, r := range rows {
		out = append(out, endpointFromRow(r))
	}
	more := len(out) > p.Limit
	if more {
		out = out[:p.Limit]
	}
	return out, more, nil
}

// WebhookDue is a delivery a relay leased.
type WebhookDue struct {
	EventID, EndpointID, EventType, ResourceID string
	EventAt                                    time.Time
	Attempts                                   int
	URL                                        string
	SecretSealed                               []byte
}

// WebhookClaimDue leases up to limit deliveries due at now, of enabled
// endpoints, until now+lease.
func (s *Store) WebhookClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]WebhookDue, error) {
	rows, err := s.q.WebhookClaimDue(ctx, dbsqlc.WebhookClaimDueParams{Now: now, LeaseUntil: now.Add(lease), Lim: int32(limit)})
	if err != nil {
		return nil, mapErr("claim webhook deliveries", err)
	}
	out := make([]WebhookDue, 0, len(rows))
	for _, r := range rows {
		out = append(out, WebhookDue{EventID: r.EventID, EndpointID: r.EndpointID, EventType: r.EventType, ResourceID: r.ResourceID,
			EventAt: r.EventAt, Attempts: int(r.Attempts), URL: r.Url, SecretSealed: r.SecretSealed})
	}
	return out, nil
}

// WebhookAttempt is the outcome of one delivery attempt.
type WebhookAttempt struct {
	EventID, EndpointID string
	At                  time.Time
	// StatusCode is the endpoint's HTTP status (0: none); Error why the
	// attempt failed.
	StatusCode int
	Error      string
	Latency    time.Duration
	Delivered  bool
	// NextAt is when to try again (nil: no retry); GaveUp: the retry
	// window passed, the endpoint is disabled with DisableReason.
	NextAt        *time.Time
	GaveUp        bool
	DisableReason string
	// Skipped: no attempt was made (the endpoint was busy); the delivery
	// is due again at NextAt.
	Skipped bool
}

// WebhookRecord stores an attempt's outcome and releases the delivery's
// lease; a delivery given up disables its endpoint.
func (s *Store) WebhookRecord(ctx context.Context, a WebhookAttempt) error {
	return s.inTx(ctx, "record webhook attempt", func(q *dbsqlc.Queries) error {
		arg := dbsqlc.WebhookRecordParams{EventID: a.EventID, EndpointID: a.EndpointID, Skipped: a.Skipped, Status: "pending",
			NextAttemptAt: a.At, LastError: a.Error, At: a.At}
		if a.NextAt != nil {
			arg.NextAttemptAt = *a.NextAt
		}
		if a.StatusCode != 0 {
			code := int32(a.StatusCode)
			arg.LastStatus = &code
		}
		ms := int32(a.Latency.Milliseconds())
		arg.LastLatencyMs = &ms
		switch {
		case a.Delivered:
			arg.Status, arg.DeliveredAt = "delivered", &a.At
		case a.GaveUp:
			arg.Status = "failed"
		}
		if err := q.WebhookRecord(ctx, arg); err != nil {
			return err
		}
		if !a.GaveUp {
			return nil
		}
		return q.WebhookEndpointDisable(ctx, dbsqlc.WebhookEndpointDisableParams{ID: a.EndpointID, DisabledReason: a.DisableReason, UpdatedAt: a.At})
	})
}

// WebhookStats describes the webhook deliveries still to be made.
type WebhookStats struct {
	// Pending counts the pending deliveries to enabled endpoints (those
	// of a disabled endpoint wait until it is enabled again).
	Pending int64
	// OldestAge is the age of the oldest one's event, zero when there is
	// none.
	OldestAge time.Duration
}

// WebhookStats counts the pending deliveries and the age at now of the
// oldest one's event.
func (s *Store) WebhookStats(ctx context.Context, now time.Time) (WebhookStats, error) {
	r, err := s.q.WebhookStats(ctx, now)
	if err != nil {
		return WebhookStats{}, mapErr("read webhook delivery stats", err)
	}
	return WebhookStats{Pending: r.Pending, OldestAge: time.Duration(r.OldestAgeSeconds * float64(time.Second))}, nil
}

// WebhookDelivery is a delivery as the operator's log shows it.
type WebhookDelivery struct {
	EventID, EventType, ResourceID, Status, LastError string
	EventAt, NextAttemptAt                            time.Time
	Attempts                                          int
	LastStatus, LastLatencyMs                         *int32
	LastAttemptAt, DeliveredAt                        *time.Time
}

// WebhookDeliveries returns an endpoint's latest deliveries, newest
// first.
func (s *Store) WebhookDeliveries(ctx context.Context, endpointID string, limit int) ([]WebhookDelivery, error) {
	rows, err := s.q.WebhookDeliveryList(ctx, dbsqlc.WebhookDeliveryListParams{EndpointID: endpointID, Limit: int32(limit)})
	if err != nil {
		return nil, mapErr("list webhook deliveries", err)
	}
	out := make([]WebhookDelivery, 0, len(rows))
	for _, r := range rows {
		out = append(out, WebhookDelivery{EventID: r.EventID, EventType: r.EventType, ResourceID: r.ResourceID, Status: r.Status,
			LastError: r.LastError, EventAt: r.EventAt, NextAttemptAt: r.NextAttemptAt, Attempts: int(r.Attempts),
			LastStatus: r.LastStatus, LastLatencyMs: r.LastLatencyMs, LastAttemptAt: r.LastAttemptAt, DeliveredAt: r.DeliveredAt})
	}
	return out, nil
}

// WebhookEvent is a state change clients may subscribe to.
type WebhookEvent struct {
	// ID is deterministic (webhookEventID): a retried change writes no
	// second delivery.
	ID, Type, ResourceID string
}

// webhookEventID is the id of the webhook event of type that the change
// identified by source (a log event's id) makes.
func webhookEventID(source, typ string) string { return WebhookEventPrefix + idBody(source, typ) }

// emitWebhooks writes the deliveries of events in the transaction q.
func emitWebhooks(ctx context.Context, q *dbsqlc.Queries, now time.Time, events []WebhookEvent) error {
	if len(events) == 0 {
		return nil
	}
	arg := dbsqlc.WebhookEmitParams{Now: now}
	for _, e := range events {
		arg.Ids = append(arg.Ids, e.ID)
		arg.Types = append(arg.Types, e.Type)
		arg.ResourceIds = append(arg.ResourceIds, e.ResourceID)
	}
	_, err := q.WebhookEmit(ctx, arg)
	return err
}

// emitResourceWebhook writes the deliveries of an event of type about
// resource id; occurrence tells apart the events of a type that happen
// more than once to a resource (an update's version or time), empty for
// those that happen once.
func emitResourceWebhook(ctx context.Context, q *dbsqlc.Queries, id, typ, occurrence string, now time.Time) error {
	return emitWebhooks(ctx, q, now, []WebhookEvent{{ID: webhookEventID(id, typ+"/"+occurrence), Type: typ, ResourceID: id}})
}

// withWebhook runs fn in a transaction and, when it succeeds, writes in
// the same transaction the deliveries of the event of type about resource
// id that it makes (once per resource and type).
func (s *Store) withWebhook(ctx context.Context, op, id, typ string, now time.Time, fn func(q *dbsqlc.Queries) error) error {
	return s.inTx(ctx, op, func(q *dbsqlc.Queries) error {
		if err := fn(q); err != nil {
			return err
		}
		return emitResourceWebhook(ctx, q, id, typ, "", now)
	})
}

// EmitWebhooks writes the deliveries of events on their own (a change
// made outside an append, such as an archive).
func (s *Store) EmitWebhooks(ctx context.Context, now time.Time, events ...WebhookEvent) error {
	return mapErr("emit webhooks", emitWebhooks(ctx, s.q, now, events))
}

// sessionWebhooks are the webhook events of a session's append: its
// status changes (with the idle status's stop reason) and outcome
// verdicts, as the plan numbers them; a child thread's creation, idling
// and termination, as its session's.
func sessionWebhooks(cur *Session, p *appendPlan) []WebhookEvent {
	var out []WebhookEvent
	add := func(source string, types ...string) {
		for _, t := range types {
			out = append(out, WebhookEvent{ID: webhookEventID(source, t), Type: t, ResourceID: cur.ID})
		}
	}
	if cur.IsThread() {
		// A thread's changes are its session's events.
		for _, ev := range p.fresh {
			switch ev.Type {
			case ThreadCreatedType, threadStatusType(StatusIdle), threadStatusType(StatusTerminated):
				t := map[string]string{ThreadCreatedType: "session.thread_created", threadStatusType(StatusIdle): "session.thread_idled",
					threadStatusType(StatusTerminated): "session.thread_terminated"}[ev.Type]
				out = append(out, WebhookEvent{ID: webhookEventID(cur.ID+"/"+ev.ID, t), Type: t, ResourceID: *cur.ParentID})
			}
		}
		return out
	}
	for _, ev := range p.fresh {
		switch ev.Type {
		case StatusEventType(StatusRunning):
			add(ev.ID, "session.status_run_started", "session.running")
		case StatusEventType(StatusIdle):
			add(ev.ID, "session.status_idled", "session.idled")
			switch stopType(p.stopReason) {
			case "requires_action":
				add(ev.ID, "session.requires_action")
			case "budget_reached":
				add(ev.ID, "session.budget_reached")
			}
		case StatusEventType(StatusRescheduling):
			add(ev.ID, "session.status_rescheduled")
		case StatusEventType(StatusTerminated):
			add(ev.ID, "session.status_terminated")
		case EvaluationEndType:
			add(ev.ID, "session.outcome_evaluation_ended")
		}
	}
	return out
}
