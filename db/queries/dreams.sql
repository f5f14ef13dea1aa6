-- name: DreamInsert :exec
INSERT INTO dreams (id, status, input_store_id, input_session_ids, model, instructions, output_behavior,
                    output_store_id, session_id, agent_id, created_at, updated_at)
VALUES ($1, 'pending', $2, $3, $4, $5, $6, $7, $8, $9, $10, $10);

-- name: DreamGet :one
SELECT sqlc.embed(dreams), s.usage AS session_usage
FROM dreams LEFT JOIN sessions s ON s.id = dreams.session_id
WHERE dreams.id = $1;

-- name: DreamLock :one
SELECT * FROM dreams WHERE id = $1 FOR UPDATE;

-- name: DreamList :many
SELECT sqlc.embed(dreams), s.usage AS session_usage
FROM dreams LEFT JOIN sessions s ON s.id = dreams.session_id
WHERE (sqlc.arg(include_archived)::bool OR dreams.archived_at IS NULL)
  AND (cardinality(sqlc.arg(statuses)::text[]) = 0 OR dreams.status = ANY (sqlc.arg(statuses)::text[]))
  AND (sqlc.narg(created_gt)::timestamptz IS NULL OR dreams.created_at > sqlc.narg(created_gt))
  AND (sqlc.narg(created_lt)::timestamptz IS NULL OR dreams.created_at < sqlc.narg(created_lt))
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (dreams.created_at, dreams.id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY dreams.created_at DESC, dreams.id DESC
LIMIT sqlc.arg(row_limit);

-- name: DreamSetStatus :exec
UPDATE dreams SET status = $2, error = $3, updated_at = $4,
    ended_at = CASE WHEN $2 IN ('completed', 'failed', 'canceled') THEN $4 ELSE ended_at END
WHERE id = $1;

-- name: DreamArchive :exec
UPDATE dreams SET archived_at = $2, updated_at = $2 WHERE id = $1 AND archived_at IS NULL;

-- name: SessionSetDreamID :exec
UPDATE sessions SET dream_id = $2 WHERE id = $1;
