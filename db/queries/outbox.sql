-- Outbox delivery. Rows are claimed with a lease: the claiming statement
-- picks due rows with FOR UPDATE SKIP LOCKED (so concurrent claimers on
-- several replicas never pick the same row) and pushes next_attempt_at to
-- the end of the lease, so the row stays invisible to other claimers while
-- its signal is in flight without holding a transaction open. A row is
-- deleted only after Temporal accepted the signal; a failure reschedules
-- it; a claimer that dies leaves the row due again when its lease ends.

-- A row never attempted is the direct path's (the api-server delivers it
-- right after its commit) for fresh_seconds after it became due; the poll
-- leaves it alone meanwhile, so it does not take fresh rows from the
-- direct path and deliver them one after another behind older ones.
-- traceparent is the W3C trace context of the writing request ('' without
-- tracing): the delivery continues that trace.
-- name: OutboxInsert :exec
INSERT INTO outbox (session_id, kind, payload, traceparent) VALUES ($1, $2, $3, sqlc.arg(traceparent));

-- name: OutboxClaimDue :many
WITH due AS (
    SELECT o.id
    FROM outbox o
    WHERE o.next_attempt_at <= now()
      AND (o.attempts > 0 OR o.next_attempt_at <= now() - make_interval(secs => sqlc.arg(fresh_seconds)::float8))
    ORDER BY o.next_attempt_at, o.id
    LIMIT sqlc.arg(row_limit)
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox
SET next_attempt_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8)
FROM due
WHERE outbox.id = due.id
RETURNING outbox.id, outbox.session_id, outbox.kind, outbox.created_at, outbox.attempts, outbox.traceparent,
    coalesce((SELECT s.provider FROM sessions s WHERE s.id = outbox.session_id), '')::text AS provider;

-- name: OutboxClaimForSession :many
WITH due AS (
    SELECT o.id
    FROM outbox o
    WHERE o.session_id = sqlc.arg(session_id) AND o.next_attempt_at <= now()
    ORDER BY o.id
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox
SET next_attempt_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8)
FROM due
WHERE outbox.id = due.id
RETURNING outbox.id, outbox.session_id, outbox.kind, outbox.created_at, outbox.attempts, outbox.traceparent,
    coalesce((SELECT s.provider FROM sessions s WHERE s.id = outbox.session_id), '')::text AS provider;

-- name: OutboxDelete :exec
DELETE FROM outbox WHERE id = $1;

-- name: OutboxReschedule :exec
UPDATE outbox
SET attempts = attempts + 1,
    last_error = sqlc.arg(last_error),
    next_attempt_at = now() + make_interval(secs => sqlc.arg(delay_seconds)::float8)
WHERE id = sqlc.arg(id);

-- name: OutboxStats :one
SELECT count(*)::bigint AS depth,
    coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_seconds
FROM outbox;
