-- name: SessionInsert :one
INSERT INTO sessions (id, agent_id, agent_version, agent, environment_id, provider, title, metadata, status, created_at, updated_at, budget_max_cents, self_hosted)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'idle', $9, $9, $10, $11)
RETURNING *;

-- name: SessionGetByID :one
SELECT * FROM sessions WHERE id = $1 AND deleting_at IS NULL;

-- name: SessionLock :one
SELECT * FROM sessions WHERE id = $1 FOR UPDATE;

-- name: SessionLockShare :one
SELECT id, deleting_at FROM sessions WHERE id = $1 FOR SHARE;

-- name: SessionSetStatus :exec
UPDATE sessions SET status = $2, stop_reason = $3, updated_at = $4, active_micros = $5, running_since = $6 WHERE id = $1;

-- name: SessionUpdate :one
UPDATE sessions SET title = $2, metadata = $3, agent = $4, updated_at = $5, budget_max_cents = $6, budget_removed = $7
WHERE id = $1
RETURNING *;

-- name: SessionArchive :one
UPDATE sessions
SET archived_at = COALESCE(archived_at, sqlc.arg(now)::timestamptz),
    updated_at = CASE WHEN archived_at IS NULL THEN sqlc.arg(now)::timestamptz ELSE updated_at END
WHERE id = sqlc.arg(id) AND deleting_at IS NULL
RETURNING *;

-- name: SessionFence :one
UPDATE sessions SET deleting_at = COALESCE(deleting_at, sqlc.arg(now)::timestamptz)
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: SessionDelete :execrows
DELETE FROM sessions WHERE id = $1;

-- name: SessionList :many
SELECT * FROM sessions
WHERE deleting_at IS NULL AND parent_session_id IS NULL
  AND (sqlc.arg(include_archived)::bool OR archived_at IS NULL)
  AND (sqlc.narg(agent_id)::text IS NULL OR agent_id = sqlc.narg(agent_id))
  AND (sqlc.narg(agent_version)::bigint IS NULL OR agent_version = sqlc.narg(agent_version))
  AND (sqlc.narg(deployment_id)::text IS NULL OR deployment_id = sqlc.narg(deployment_id))
  AND (cardinality(sqlc.arg(statuses)::text[]) = 0 OR status = ANY(sqlc.arg(statuses)::text[]))
  AND (sqlc.narg(created_gt)::timestamptz IS NULL OR created_at > sqlc.narg(created_gt))
  AND (sqlc.narg(created_gte)::timestamptz IS NULL OR created_at >= sqlc.narg(created_gte))
  AND (sqlc.narg(created_lt)::timestamptz IS NULL OR created_at < sqlc.narg(created_lt))
  AND (sqlc.narg(created_lte)::timestamptz IS NULL OR created_at <= sqlc.narg(created_lte))
  AND (sqlc.narg(before_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_created_at)::timestamptz, sqlc.arg(before_id)::text))
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) > (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY
  CASE WHEN sqlc.arg(ascending)::bool THEN created_at END ASC,
  CASE WHEN sqlc.arg(ascending)::bool THEN id END ASC,
  CASE WHEN NOT sqlc.arg(ascending)::bool THEN created_at END DESC,
  CASE WHEN NOT sqlc.arg(ascending)::bool THEN id END DESC
LIMIT sqlc.arg(row_limit);

-- name: NotifySession :exec
SELECT pg_notify('mango_events', sqlc.arg(payload)::text);
