-- name: VaultInsert :one
INSERT INTO vaults (id, display_name, metadata, created_at, updated_at)
VALUES ($1, $2, $3, $4, $4)
RETURNING *;

-- name: VaultGetByID :one
SELECT * FROM vaults WHERE id = $1;

-- name: VaultGetByIDForUpdate :one
SELECT * FROM vaults WHERE id = $1 FOR UPDATE;

-- name: VaultUpdate :one
UPDATE vaults SET display_name = $2, metadata = $3, updated_at = $4
WHERE id = $1
RETURNING *;

-- name: VaultArchive :one
UPDATE vaults
SET archived_at = COALESCE(archived_at, sqlc.arg(now)::timestamptz),
    updated_at = CASE WHEN archived_at IS NULL THEN sqlc.arg(now)::timestamptz ELSE updated_at END
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: VaultDelete :execrows
DELETE FROM vaults WHERE id = $1;

-- name: VaultList :many
SELECT * FROM vaults
WHERE (sqlc.arg(include_archived)::bool OR archived_at IS NULL)
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(row_limit);

-- name: VaultsByIDs :many
SELECT * FROM vaults WHERE id = ANY(sqlc.arg(ids)::text[]);

-- name: CredentialInsert :one
INSERT INTO vault_credentials (id, vault_id, display_name, metadata, auth_type, mcp_server_url, auth, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
RETURNING *;

-- name: CredentialGet :one
SELECT * FROM vault_credentials WHERE vault_id = $1 AND id = $2;

-- name: CredentialGetForUpdate :one
SELECT * FROM vault_credentials WHERE vault_id = $1 AND id = $2 FOR UPDATE;

-- name: CredentialUpdate :one
UPDATE vault_credentials SET display_name = $3, metadata = $4, auth = $5, updated_at = $6
WHERE vault_id = $1 AND id = $2
RETURNING *;

-- name: CredentialArchive :one
UPDATE vault_credentials
SET archived_at = COALESCE(archived_at, sqlc.arg(now)::timestamptz),
    updated_at = CASE WHEN archived_at IS NULL THEN sqlc.arg(now)::timestamptz ELSE updated_at END
WHERE vault_id = sqlc.arg(vault_id) AND id = sqlc.arg(id)
RETURNING *;

-- name: CredentialDelete :execrows
DELETE FROM vault_credentials WHERE vault_id = $1 AND id = $2;

-- name: CredentialList :many
SELECT * FROM vault_credentials
WHERE vault_id = sqlc.arg(vault_id)
  AND (sqlc.arg(include_archived)::bool OR archived_at IS NULL)
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(row_limit);

-- name: CredentialsLiveOfVaults :many
SELECT * FROM vault_credentials
WHERE vault_id = ANY(sqlc.arg(vault_ids)::text[]) AND archived_at IS NULL
ORDER BY created_at, id;

-- name: CredentialSecretUpsert :exec
INSERT INTO vault_credential_secrets (credential_id, field, sealed)
VALUES ($1, $2, $3)
ON CONFLICT (credential_id, field) DO UPDATE SET sealed = EXCLUDED.sealed;

-- name: CredentialSecretDelete :exec
DELETE FROM vault_credential_secrets WHERE credential_id = $1 AND field = $2;

-- name: CredentialSecretsOf :many
SELECT * FROM vault_credential_secrets WHERE credential_id = $1 ORDER BY field;

-- name: CredentialSecretsAll :many
SELECT * FROM vault_credential_secrets ORDER BY credential_id, field;

-- name: CredentialRewrapSecret :execrows
UPDATE vault_credential_secrets SET sealed = sqlc.arg(new_sealed)
WHERE credential_id = sqlc.arg(credential_id) AND field = sqlc.arg(field) AND sealed = sqlc.arg(old_sealed);

-- name: SessionSetVaultIDs :exec
UPDATE sessions SET vault_ids = $2 WHERE id = $1;

-- name: CredentialSecretsDeleteOf :exec
DELETE FROM vault_credential_secrets WHERE credential_id = $1;

-- name: CredentialArchiveOfVault :exec
UPDATE vault_credentials SET archived_at = $2, updated_at = $2
WHERE vault_id = $1 AND archived_at IS NULL;

-- name: CredentialSecretsDeleteOfVault :exec
DELETE FROM vault_credential_secrets s USING vault_credentials c
WHERE s.credential_id = c.id AND c.vault_id = $1;
