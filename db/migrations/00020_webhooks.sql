-- +goose Up

-- Webhooks (issue 36): endpoints clients register (the SDK's
-- Organization.Webhooks), and the deliveries of the events they subscribe
-- to. A delivery row is written in the same transaction as the state
-- change it reports (db/webhooks.go), one per subscribed enabled endpoint:
-- the outbox the relay (api-server/internal/webhooks) drains at least
-- once, with backoff, signed per Standard Webhooks.
CREATE TABLE webhook_endpoints (
    id              text PRIMARY KEY,
    url             text NOT NULL,
    name            text NOT NULL DEFAULT '',
    description     text NOT NULL DEFAULT '',
    enabled_events  text[] NOT NULL,
    -- enabled or disabled.
    state           text NOT NULL,
    -- Why Mango disabled it (deliveries failing for the retry window); ''
    -- when enabled or disabled by the client.
    disabled_reason text NOT NULL DEFAULT '',
    -- The signing secret (whsec_...), sealed with the vault keys.
    secret_sealed   bytea NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    CONSTRAINT webhook_endpoints_state_check CHECK (state IN ('enabled', 'disabled'))
);
CREATE INDEX webhook_endpoints_created_idx ON webhook_endpoints (created_at, id);

-- One event due at one endpoint. The event itself (its id, type, the
-- resource and when) is carried by each of its deliveries: the payload is
-- rebuilt from them, identical on every attempt.
CREATE TABLE webhook_deliveries (
    event_id        text NOT NULL,
    endpoint_id     text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_type      text NOT NULL,
    resource_id     text NOT NULL,
    event_at        timestamptz NOT NULL,
    -- pending, delivered or failed (given up after the retry window).
    status          text NOT NULL DEFAULT 'pending',
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    -- A relay holds the delivery until then (a crashed relay's lease
    -- expires).
    leased_until    timestamptz,
    last_status     integer,
    last_error      text NOT NULL DEFAULT '',
    last_latency_ms integer,
    last_attempt_at timestamptz,
    delivered_at    timestamptz,
    PRIMARY KEY (event_id, endpoint_id),
    CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'delivered', 'failed'))
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, event_at DESC);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
