-- Environment keys: credentials bound to one self-hosted environment
-- (db/envkeys.go). Only the SHA-256 of a key is stored.

-- name: EnvironmentKeyInsert :one
INSERT INTO environment_keys (id, environment_id, name, key_hash, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING *;

-- name: EnvironmentKeyList :many
SELECT * FROM environment_keys
WHERE environment_id = $1
ORDER BY created_at DESC, id DESC;

-- name: EnvironmentKeyRevoke :one
UPDATE environment_keys SET revoked_at = COALESCE(revoked_at, sqlc.arg(now)::timestamptz)
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: EnvironmentKeyGetByHash :one
-- The live key with the hash: not revoked, not expired at now.
SELECT * FROM environment_keys
WHERE key_hash = sqlc.arg(key_hash) AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > sqlc.arg(now)::timestamptz);

-- name: EnvironmentKeyTouch :exec
-- Records a use, at most once a minute.
UPDATE environment_keys SET last_used_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id)
  AND (last_used_at IS NULL OR last_used_at <= sqlc.arg(now)::timestamptz - interval '1 minute');
