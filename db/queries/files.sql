-- Files (db/files.go).

-- name: FileInsert :exec
INSERT INTO files (id, filename, mime_type, size_bytes, sha256, storage_key, downloadable,
                   scope_session_id, origin, output_path, output_modified_at, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13);

-- name: FileGetByID :one
SELECT * FROM files WHERE id = $1;

-- name: FileLockShare :one
SELECT * FROM files WHERE id = $1 FOR SHARE;

-- name: FileList :many
SELECT * FROM files
WHERE (sqlc.narg(scope_session_id)::text IS NULL OR scope_session_id = sqlc.narg(scope_session_id)::text)
  AND (cardinality(sqlc.arg(ids)::text[]) = 0 OR id = ANY(sqlc.arg(ids)::text[]))
  AND (expires_at IS NULL OR expires_at > sqlc.arg(now)::timestamptz)
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(row_limit);

-- name: FileDeleteByID :one
DELETE FROM files WHERE id = $1 RETURNING storage_key;

-- name: FileKeyReferenced :one
SELECT EXISTS (SELECT 1 FROM files WHERE storage_key = $1);

-- name: OutputGetByPath :one
SELECT * FROM files WHERE scope_session_id = $1 AND output_path = $2;

-- name: OutputLockByPath :one
SELECT * FROM files WHERE scope_session_id = $1 AND output_path = $2 FOR UPDATE;

-- name: OutputList :many
SELECT * FROM files
WHERE scope_session_id = $1 AND output_path IS NOT NULL
ORDER BY output_path;

-- name: FileSessionExists :one
SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1);

-- name: FileExpiredList :many
SELECT id FROM files WHERE expires_at <= sqlc.arg(now)::timestamptz ORDER BY expires_at LIMIT sqlc.arg(row_limit);

-- name: FileKeysUnreferenced :many
SELECT k::text FROM unnest(sqlc.arg(keys)::text[]) AS k
WHERE NOT EXISTS (SELECT 1 FROM files f WHERE f.storage_key = k)
  AND NOT EXISTS (SELECT 1 FROM skill_versions v WHERE v.storage_key = k);

-- name: BlobOrphansDelete :execrows
DELETE FROM file_blob_heads h
WHERE h.key IN (
    SELECT b.key FROM file_blob_heads b
    WHERE b.created_at < sqlc.arg(older_than)::timestamptz
      AND NOT EXISTS (SELECT 1 FROM files f WHERE f.storage_key = b.key)
      AND NOT EXISTS (SELECT 1 FROM skill_versions v WHERE v.storage_key = b.key)
    LIMIT sqlc.arg(row_limit));
