-- Sandbox bindings and provisioning intents (db/bindings.go).

-- name: SessionBindingExists :one
SELECT EXISTS (SELECT 1 FROM sandbox_bindings WHERE session_id = $1);

-- name: SandboxIntentUpsert :many
INSERT INTO sandbox_bindings (session_id, provider, external_id, spec_hash, task_queue, created_at, updated_at)
VALUES ($1, $2, NULL, $3, $4, sqlc.arg(now)::timestamptz, sqlc.arg(now)::timestamptz)
ON CONFLICT (session_id) DO UPDATE
SET provider = EXCLUDED.provider, spec_hash = EXCLUDED.spec_hash, task_queue = EXCLUDED.task_queue, updated_at = EXCLUDED.updated_at
WHERE sandbox_bindings.external_id IS NULL
RETURNING *;

-- name: SandboxBindingUpsert :many
INSERT INTO sandbox_bindings (session_id, provider, external_id, spec_hash, task_queue, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, sqlc.arg(now)::timestamptz, sqlc.arg(now)::timestamptz)
ON CONFLICT (session_id) DO UPDATE
SET provider = EXCLUDED.provider, external_id = EXCLUDED.external_id, spec_hash = EXCLUDED.spec_hash,
    task_queue = EXCLUDED.task_queue, updated_at = EXCLUDED.updated_at
WHERE sandbox_bindings.external_id IS NULL OR sandbox_bindings.external_id = EXCLUDED.external_id
RETURNING *;

-- name: SandboxBindingGet :one
SELECT * FROM sandbox_bindings WHERE session_id = $1;

-- name: SandboxBindingDelete :execrows
DELETE FROM sandbox_bindings WHERE session_id = $1;

-- name: SandboxBindingList :many
SELECT * FROM sandbox_bindings
WHERE (sqlc.arg(provider)::text = '' OR provider = sqlc.arg(provider)::text)
  AND (NOT sqlc.arg(only_intents)::bool OR external_id IS NULL)
  AND session_id > sqlc.arg(after_session_id)::text
ORDER BY session_id
LIMIT sqlc.arg(row_limit);
