-- name: EnvironmentInsert :one
INSERT INTO environments (id, name, description, config, metadata, scope, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
RETURNING *;

-- name: EnvironmentGetByID :one
SELECT * FROM environments WHERE id = $1;

-- name: EnvironmentGetByIDForUpdate :one
SELECT * FROM environments WHERE id = $1 FOR UPDATE;

-- name: EnvironmentUpdate :one
UPDATE environments
SET name = $2, description = $3, config = $4, metadata = $5, scope = $6, updated_at = $7
WHERE id = $1
RETURNING *;

-- name: EnvironmentArchive :one
UPDATE environments
SET archived_at = COALESCE(archived_at, sqlc.arg(now)::timestamptz),
    updated_at = CASE WHEN archived_at IS NULL THEN sqlc.arg(now)::timestamptz ELSE updated_at END
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: EnvironmentDelete :execrows
DELETE FROM environments WHERE id = $1;

-- name: EnvironmentList :many
SELECT * FROM environments
WHERE (sqlc.arg(include_archived)::bool OR archived_at IS NULL)
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(row_limit);

-- name: EnvironmentGetForSession :one
-- The environment a session was created in (no row: none, or deleted).
SELECT e.* FROM environments e JOIN sessions s ON s.environment_id = e.id WHERE s.id = $1;
