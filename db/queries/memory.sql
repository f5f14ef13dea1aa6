-- Memory stores, memories, memory versions and session bases (db/memory.go).

-- name: MemoryStoreInsert :one
INSERT INTO memory_stores (id, name, description, metadata, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $5)
RETURNING *;

-- name: MemoryStoreGet :one
SELECT * FROM memory_stores WHERE id = $1;

-- name: MemoryStoreLock :one
SELECT * FROM memory_stores WHERE id = $1 FOR UPDATE;

-- name: MemoryStoreUpdate :one
UPDATE memory_stores SET name = $2, description = $3, metadata = $4, updated_at = $5
WHERE id = $1
RETURNING *;

-- name: MemoryStoreArchive :one
UPDATE memory_stores SET archived_at = COALESCE(archived_at, sqlc.arg(now)::timestamptz), updated_at = CASE WHEN archived_at IS NULL THEN sqlc.arg(now)::timestamptz ELSE updated_at END
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: MemoryStoreDelete :execrows
DELETE FROM memory_stores WHERE id = $1;

-- name: MemoryStoreList :many
SELECT * FROM memory_stores
WHERE (sqlc.arg(include_archived)::bool OR archived_at IS NULL)
  AND (sqlc.narg(created_gte)::timestamptz IS NULL OR created_at >= sqlc.narg(created_gte))
  AND (sqlc.narg(created_lte)::timestamptz IS NULL OR created_at <= sqlc.narg(created_lte))
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(row_limit);

-- name: MemoryGetByID :one
SELECT * FROM memories WHERE store_id = $1 AND id = $2;

-- name: MemoryGetByPath :one
SELECT * FROM memories WHERE store_id = $1 AND path = $2;

-- name: MemoryInsert :exec
INSERT INTO memories (id, store_id, path, content, content_sha256, size_bytes, version_id, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8);

-- name: MemoryUpdate :exec
UPDATE memories SET path = $3, content = $4, content_sha256 = $5, size_bytes = $6, version_id = $7, updated_at = $8
WHERE store_id = $1 AND id = $2;

-- name: MemoryDelete :exec
DELETE FROM memories WHERE store_id = $1 AND id = $2;

-- name: MemoryListAll :many
SELECT * FROM memories WHERE store_id = $1 ORDER BY path;

-- name: MemoryListRange :many
-- Memories of a store in path order, from lo (inclusive, or exclusive
-- when lo_exclusive) to hi (exclusive; '' : no bound); content is ''
-- unless with_content.
SELECT id, store_id, path, CASE WHEN sqlc.arg(with_content)::bool THEN content ELSE '' END::text AS content,
       content_sha256, size_bytes, version_id, created_at, updated_at
FROM memories
WHERE store_id = sqlc.arg(store_id)
  AND (path > sqlc.arg(lo)::text OR (NOT sqlc.arg(lo_exclusive)::bool AND path = sqlc.arg(lo)::text))
  AND (sqlc.arg(hi)::text = '' OR path < sqlc.arg(hi)::text)
ORDER BY path
LIMIT sqlc.arg(row_limit);

-- name: MemoryPathClash :one
-- A memory other than except_id whose path is a folder of path (one of
-- ancestors) or lies under path as a folder (starts with path || '/').
SELECT path FROM memories
WHERE store_id = sqlc.arg(store_id) AND id <> sqlc.arg(except_id)::text
  AND (path = ANY(sqlc.arg(ancestors)::text[])
       OR (path > sqlc.arg(folder)::text AND path < sqlc.arg(folder_end)::text))
ORDER BY path
LIMIT 1;

-- name: MemoryVersionInsert :exec
INSERT INTO memory_versions (id, store_id, memory_id, path, operation, content, content_sha256, size_bytes, actor_type, actor_id, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: MemoryVersionGet :one
SELECT * FROM memory_versions WHERE store_id = $1 AND id = $2;

-- name: MemoryVersionList :many
SELECT * FROM memory_versions
WHERE store_id = sqlc.arg(store_id)
  AND (sqlc.narg(memory_id)::text IS NULL OR memory_id = sqlc.narg(memory_id))
  AND (sqlc.narg(operation)::text IS NULL OR operation = sqlc.narg(operation))
  AND (sqlc.narg(actor_type)::text IS NULL OR (actor_type = sqlc.narg(actor_type) AND actor_id = sqlc.arg(actor_id)::text))
  AND (sqlc.narg(created_gte)::timestamptz IS NULL OR created_at >= sqlc.narg(created_gte))
  AND (sqlc.narg(created_lte)::timestamptz IS NULL OR created_at <= sqlc.narg(created_lte))
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(row_limit);

-- name: MemoryVersionRedact :one
UPDATE memory_versions SET path = NULL, content = NULL, content_sha256 = NULL, size_bytes = NULL,
    redacted_at = $3, redacted_by_type = $4, redacted_by_id = $5
WHERE store_id = $1 AND id = $2 AND redacted_at IS NULL
RETURNING *;

-- name: MemoryBaseClear :exec
DELETE FROM session_memory_bases WHERE session_id = $1 AND resource_id = $2;

-- name: MemoryBaseGet :many
SELECT path, content_sha256 FROM session_memory_bases
WHERE session_id = $1 AND resource_id = $2 ORDER BY path;

-- name: MemoryBaseSet :exec
INSERT INTO session_memory_bases (session_id, resource_id, path, content_sha256)
VALUES ($1, $2, $3, $4)
ON CONFLICT (session_id, resource_id, path) DO UPDATE SET content_sha256 = EXCLUDED.content_sha256;

-- name: MemoryBaseSetMany :exec
INSERT INTO session_memory_bases (session_id, resource_id, path, content_sha256)
SELECT sqlc.arg(session_id)::text, sqlc.arg(resource_id)::text, unnest(sqlc.arg(paths)::text[]), unnest(sqlc.arg(sha256s)::text[]);

-- name: MemoryBaseDelete :exec
DELETE FROM session_memory_bases WHERE session_id = $1 AND resource_id = $2 AND path = $3;

-- name: MemoryStoreAccessOfSession :many
-- The access of the session's live memory_store resources of the store
-- (a self-hosted worker's work token may use the store through the API).
SELECT access::text FROM session_resources
WHERE type = 'memory_store' AND deleted_at IS NULL AND memory_store_id = sqlc.arg(store_id)::text AND session_id = sqlc.arg(session_id)::text;
