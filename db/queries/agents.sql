-- name: AgentInsert :exec
-- One statement (one round trip, implicitly atomic) for the agent and its
-- first version.
WITH agent AS (
    INSERT INTO agents (id, current_version, created_at, updated_at)
    VALUES (sqlc.arg(id), 1, sqlc.arg(created_at), sqlc.arg(created_at))
)
INSERT INTO agent_versions (agent_id, version, spec, created_at)
VALUES (sqlc.arg(id), 1, sqlc.arg(spec), sqlc.arg(created_at));

-- name: AgentVersionInsert :exec
INSERT INTO agent_versions (agent_id, version, spec, created_at)
VALUES ($1, $2, $3, $4);

-- name: AgentGetByID :one
SELECT a.id, a.current_version AS version, a.created_at, a.updated_at, a.archived_at, v.spec
FROM agents a
JOIN agent_versions v ON v.agent_id = a.id AND v.version = a.current_version
WHERE a.id = $1;

-- name: AgentLock :one
-- Locks the agent row alone: a FOR UPDATE over the join with its current
-- version would, after waiting on a concurrent update, re-check the join
-- against the stale version row and return nothing.
SELECT id FROM agents WHERE id = $1 FOR UPDATE;

-- name: AgentGetVersion :one
SELECT a.id, v.version, a.created_at, v.created_at AS updated_at, a.archived_at, v.spec
FROM agents a
JOIN agent_versions v ON v.agent_id = a.id
WHERE a.id = $1 AND v.version = $2;

-- name: AgentSetCurrentVersion :exec
UPDATE agents SET current_version = $2, updated_at = $3
WHERE id = $1;

-- name: AgentArchive :exec
UPDATE agents SET archived_at = $2, updated_at = $2
WHERE id = $1 AND archived_at IS NULL;

-- name: AgentList :many
SELECT a.id, a.current_version AS version, a.created_at, a.updated_at, a.archived_at, v.spec
FROM agents a
JOIN agent_versions v ON v.agent_id = a.id AND v.version = a.current_version
WHERE (sqlc.arg(include_archived)::bool OR a.archived_at IS NULL)
  AND (sqlc.narg(created_gte)::timestamptz IS NULL OR a.created_at >= sqlc.narg(created_gte))
  AND (sqlc.narg(created_lte)::timestamptz IS NULL OR a.created_at <= sqlc.narg(created_lte))
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (a.created_at, a.id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY a.created_at DESC, a.id DESC
LIMIT sqlc.arg(row_limit);

-- name: AgentVersionList :many
SELECT a.id, v.version, a.created_at, v.created_at AS updated_at, a.archived_at, v.spec
FROM agents a
JOIN agent_versions v ON v.agent_id = a.id
WHERE a.id = sqlc.arg(agent_id)
  AND (sqlc.narg(before_version)::bigint IS NULL OR v.version < sqlc.narg(before_version))
ORDER BY v.version DESC
LIMIT sqlc.arg(row_limit);

-- name: AgentExists :one
SELECT EXISTS (SELECT 1 FROM agents WHERE id = $1);

-- name: AgentSkillRefInsert :exec
INSERT INTO agent_skill_refs (agent_id, agent_version, skill_id, skill_version_id)
VALUES ($1, $2, $3, $4);
