-- name: WebhookEndpointCreate :one
INSERT INTO webhook_endpoints (id, url, name, description, enabled_events, state, secret_sealed, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, 'enabled', $6, $7, $7)
RETURNING *;

-- name: WebhookEndpointGet :one
SELECT * FROM webhook_endpoints WHERE id = $1;

-- name: WebhookEndpointUpdate :one
UPDATE webhook_endpoints SET url = $2, name = $3, description = $4, enabled_events = $5, state = $6,
    disabled_reason = $7, updated_at = $8
WHERE id = $1
RETURNING *;

-- name: WebhookEndpointSetSecret :one
UPDATE webhook_endpoints SET secret_sealed = $2, updated_at = $3 WHERE id = $1 RETURNING *;

-- name: WebhookEndpointDelete :execrows
DELETE FROM webhook_endpoints WHERE id = $1;

-- name: WebhookEndpointList :many
SELECT * FROM webhook_endpoints
WHERE (sqlc.narg(after_created)::timestamptz IS NULL OR (created_at, id) > (sqlc.narg(after_created)::timestamptz, sqlc.arg(after_id)::text))
  AND (sqlc.narg(before_created)::timestamptz IS NULL OR (created_at, id) < (sqlc.narg(before_created)::timestamptz, sqlc.arg(before_id)::text))
ORDER BY
  CASE WHEN sqlc.arg(descending)::bool THEN created_at END DESC,
  CASE WHEN sqlc.arg(descending)::bool THEN id END DESC,
  created_at, id
LIMIT sqlc.arg(lim);

-- name: WebhookEmit :one
-- The deliveries of events (ids, types, resources paired by position) to
-- every enabled endpoint subscribed to their type, announced on
-- mango_webhooks (db.WebhookChannel) at commit when there are any.
WITH ins AS (
    INSERT INTO webhook_deliveries (event_id, endpoint_id, event_type, resource_id, event_at, next_attempt_at)
    SELECT (sqlc.arg(ids)::text[])[i], e.id, (sqlc.arg(types)::text[])[i], (sqlc.arg(resource_ids)::text[])[i],
           sqlc.arg(now)::timestamptz, sqlc.arg(now)::timestamptz
    FROM generate_subscripts(sqlc.arg(ids)::text[], 1) AS i
    JOIN webhook_endpoints e ON e.state = 'enabled' AND (sqlc.arg(types)::text[])[i] = ANY (e.enabled_events)
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT count(*)::bigint FROM ins, LATERAL (SELECT pg_notify('mango_webhooks', '')) AS n;

-- name: WebhookClaimDue :many
-- Leases up to lim due deliveries of enabled endpoints, oldest due first.
UPDATE webhook_deliveries d SET leased_until = sqlc.arg(lease_until)::timestamptz
FROM (
    SELECT dd.event_id, dd.endpoint_id FROM webhook_deliveries dd
    JOIN webhook_endpoints e ON e.id = dd.endpoint_id AND e.state = 'enabled'
    WHERE dd.status = 'pending' AND dd.next_attempt_at <= sqlc.arg(now)::timestamptz
      AND (dd.leased_until IS NULL OR dd.leased_until <= sqlc.arg(now)::timestamptz)
    ORDER BY dd.next_attempt_at
    LIMIT sqlc.arg(lim)
    FOR UPDATE OF dd SKIP LOCKED
) due, webhook_endpoints ep
WHERE d.event_id = due.event_id AND d.endpoint_id = due.endpoint_id AND ep.id = d.endpoint_id
RETURNING d.event_id, d.endpoint_id, d.event_type, d.resource_id, d.event_at, d.attempts, ep.url, ep.secret_sealed;

-- name: WebhookRecord :exec
UPDATE webhook_deliveries SET
    attempts = attempts + CASE WHEN sqlc.arg(skipped)::bool THEN 0 ELSE 1 END,
    status = sqlc.arg(status), next_attempt_at = sqlc.arg(next_attempt_at), leased_until = NULL,
    last_status = CASE WHEN sqlc.arg(skipped)::bool THEN last_status ELSE sqlc.narg(last_status) END,
    last_error = CASE WHEN sqlc.arg(skipped)::bool THEN last_error ELSE sqlc.arg(last_error) END,
    last_latency_ms = CASE WHEN sqlc.arg(skipped)::bool THEN last_latency_ms ELSE sqlc.narg(last_latency_ms) END,
    last_attempt_at = CASE WHEN sqlc.arg(skipped)::bool THEN last_attempt_at ELSE sqlc.arg(at)::timestamptz END,
    delivered_at = sqlc.narg(delivered_at)
WHERE event_id = sqlc.arg(event_id) AND endpoint_id = sqlc.arg(endpoint_id);

-- name: WebhookEndpointDisable :exec
-- Disables an endpoint whose deliveries keep failing, saying why.
UPDATE webhook_endpoints SET state = 'disabled', disabled_reason = $2, updated_at = $3
WHERE id = $1 AND state = 'enabled';

-- name: WebhookDeliveryList :many
SELECT * FROM webhook_deliveries WHERE endpoint_id = $1
ORDER BY event_at DESC, event_id DESC
LIMIT $2;

-- name: WebhookStats :one
-- The deliveries still to be made (pending, to enabled endpoints: those
-- of a disabled endpoint wait for it to be enabled again) and the age of
-- the oldest one's event at now, for the relay's gauges.
SELECT count(*)::bigint AS pending,
    coalesce(extract(epoch FROM sqlc.arg(now)::timestamptz - min(d.event_at)), 0)::float8 AS oldest_age_seconds
FROM webhook_deliveries d
JOIN webhook_endpoints e ON e.id = d.endpoint_id AND e.state = 'enabled'
WHERE d.status = 'pending';
