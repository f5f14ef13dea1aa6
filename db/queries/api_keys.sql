-- name: APIKeyUpsert :exec
INSERT INTO api_keys (id, name, key_hash)
VALUES ($1, $2, $3)
ON CONFLICT (key_hash) DO UPDATE SET revoked_at = NULL;

-- name: APIKeyGetByHash :one
SELECT id, name, created_at
FROM api_keys
WHERE key_hash = $1 AND revoked_at IS NULL;
