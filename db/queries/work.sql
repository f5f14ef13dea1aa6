-- Work items of self-hosted environments and the workers polling for
-- them (db/work.go). A session has at most one live item (queued,
-- starting or active): work_items_live_session_idx.

-- name: WorkExpireLeases :exec
-- The lazy end of leases, run whenever an environment's queue is read:
-- a starting or active item whose lease expired goes back to queued
-- (handed out afresh by the next poll, with a new secret); a stopping one
-- becomes stopped.
UPDATE work_items SET
    state = CASE WHEN state = 'stopping' THEN 'stopped' ELSE 'queued' END,
    stopped_at = CASE WHEN state = 'stopping' THEN sqlc.arg(now)::timestamptz ELSE stopped_at END,
    polled_at = CASE WHEN state = 'stopping' THEN polled_at END,
    polled_by = CASE WHEN state = 'stopping' THEN polled_by END,
    acknowledged_at = CASE WHEN state = 'stopping' THEN acknowledged_at END,
    started_at = CASE WHEN state = 'stopping' THEN started_at END,
    last_heartbeat_at = CASE WHEN state = 'stopping' THEN last_heartbeat_at END,
    lease_expires_at = CASE WHEN state = 'stopping' THEN lease_expires_at END,
    secret_hash = CASE WHEN state = 'stopping' THEN secret_hash END
WHERE environment_id = sqlc.arg(environment_id)
  AND state IN ('starting', 'active', 'stopping')
  AND lease_expires_at <= sqlc.arg(now)::timestamptz;

-- name: WorkPollerSeen :exec
INSERT INTO work_pollers (environment_id, worker_id, last_poll_at)
VALUES (sqlc.arg(environment_id), sqlc.arg(worker_id), sqlc.arg(now)::timestamptz)
ON CONFLICT (environment_id, worker_id)
DO UPDATE SET last_poll_at = GREATEST(work_pollers.last_poll_at, EXCLUDED.last_poll_at);

-- name: WorkPollNext :one
-- Hands out the oldest queued item no poll handed out since
-- reclaim_before, with a new secret. SKIP LOCKED: two polls never take
-- the same item; the one that waits for the lock sees polled_at moved.
UPDATE work_items SET polled_at = sqlc.arg(now)::timestamptz, polled_by = sqlc.narg(polled_by), secret_hash = sqlc.arg(secret_hash)
WHERE id = (
    SELECT w.id FROM work_items w
    WHERE w.environment_id = sqlc.arg(environment_id) AND w.state = 'queued'
      AND (w.polled_at IS NULL OR w.polled_at <= sqlc.arg(reclaim_before)::timestamptz)
    ORDER BY w.created_at, w.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING *;

-- name: WorkLock :one
SELECT * FROM work_items WHERE environment_id = $1 AND id = $2 FOR UPDATE;

-- name: WorkGetByID :one
SELECT * FROM work_items WHERE environment_id = $1 AND id = $2;

-- name: WorkGetBySecretHash :one
SELECT * FROM work_items WHERE secret_hash = $1 AND state <> 'stopped';

-- name: WorkSetState :one
-- Writes an item's state and timestamps as the caller decided them under
-- the row lock (WorkLock).
UPDATE work_items SET
    state = sqlc.arg(state),
    acknowledged_at = sqlc.narg(acknowledged_at),
    started_at = sqlc.narg(started_at),
    last_heartbeat_at = sqlc.narg(last_heartbeat_at),
    lease_expires_at = sqlc.narg(lease_expires_at),
    ttl_seconds = sqlc.arg(ttl_seconds),
    stop_requested_at = sqlc.narg(stop_requested_at),
    stopped_at = sqlc.narg(stopped_at)
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: WorkSetMetadata :one
UPDATE work_items SET metadata = sqlc.arg(metadata)
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: WorkList :many
SELECT * FROM work_items
WHERE environment_id = sqlc.arg(environment_id)
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(row_limit);

-- name: WorkStats :one
-- depth: queued items a poll would hand out; pending: queued items handed
-- out within the reclaim window, not acknowledged; oldest over both;
-- workers: pollers seen since poller_since.
SELECT
    count(*) FILTER (WHERE polled_at IS NULL OR polled_at <= sqlc.arg(reclaim_before)::timestamptz)::bigint AS depth,
    count(*) FILTER (WHERE polled_at > sqlc.arg(reclaim_before)::timestamptz)::bigint AS pending,
    min(created_at) AS oldest_queued_at,
    (SELECT count(*) FROM work_pollers p
     WHERE p.environment_id = sqlc.arg(environment_id) AND p.last_poll_at > sqlc.arg(poller_since)::timestamptz)::bigint AS workers
FROM work_items
WHERE environment_id = sqlc.arg(environment_id) AND state = 'queued';

-- name: WorkInsertHealthcheck :one
INSERT INTO work_items (id, environment_id, type, state, created_at)
VALUES (sqlc.arg(id), sqlc.arg(environment_id), 'healthcheck', 'queued', sqlc.arg(now)::timestamptz)
RETURNING *;

-- name: NotifyWork :exec
SELECT pg_notify('mango_work', sqlc.arg(environment_id)::text);

-- name: WorkEnsureSession :execrows
-- Inserts a session item (queued) for a self-hosted session that has no
-- live one, under the session's row lock held by the caller, and
-- announces it on mango_work with the environment id.
WITH w AS (
    INSERT INTO work_items (id, environment_id, session_id, type, state, created_at)
    SELECT sqlc.arg(id), s.environment_id, s.id, 'session', 'queued', sqlc.arg(now)::timestamptz
    FROM sessions s
    WHERE s.id = sqlc.arg(session_id) AND s.self_hosted AND s.environment_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM work_items l WHERE l.session_id = s.id AND l.state IN ('queued', 'starting', 'active'))
    ON CONFLICT DO NOTHING
    RETURNING environment_id
)
SELECT pg_notify('mango_work', w.environment_id) FROM w;

-- name: ToolUseStates :many
-- The agent.tool_use events of a session among ids, each with whether an
-- answer (user.tool_result or agent.tool_result) names it.
SELECT u.id, EXISTS (
    SELECT 1 FROM events a
    WHERE a.session_id = u.session_id AND a.type IN ('user.tool_result', 'agent.tool_result')
      AND a.body ->> 'tool_use_id' = u.id
)::bool AS answered
FROM events u
WHERE u.session_id = sqlc.arg(session_id) AND u.id = ANY(sqlc.arg(ids)::text[]) AND u.type = 'agent.tool_use';

-- name: ToolUseGet :one
SELECT * FROM events WHERE session_id = $1 AND id = $2 AND type = 'agent.tool_use';

-- name: ToolUseAnswerGet :one
SELECT * FROM events
WHERE session_id = sqlc.arg(session_id) AND type IN ('user.tool_result', 'agent.tool_result')
  AND body ->> 'tool_use_id' = sqlc.arg(tool_use_id)::text
ORDER BY seq
LIMIT 1;

-- name: WorkStopForSession :exec
-- Stops a session's items that are not stopped yet (its deletion began).
UPDATE work_items SET state = 'stopped', stopped_at = sqlc.arg(now)::timestamptz,
    stop_requested_at = COALESCE(stop_requested_at, sqlc.arg(now)::timestamptz)
WHERE session_id = sqlc.arg(session_id) AND state <> 'stopped';
