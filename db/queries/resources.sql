-- name: ResourceInsert :one
INSERT INTO session_resources (id, session_id, type, mount_path, file_id, url, checkout, token_sealed, created_at, updated_at,
    memory_store_id, access, instructions, store_name, store_description)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11, $12, $13, $14)
RETURNING *;

-- name: ResourceGetLive :one
SELECT * FROM session_resources WHERE session_id = $1 AND id = $2 AND deleted_at IS NULL AND type <> 'skill';

-- name: ResourceListLive :many
SELECT * FROM session_resources
WHERE session_id = sqlc.arg(session_id) AND deleted_at IS NULL AND type <> 'skill'
  AND (sqlc.narg(after_created)::timestamptz IS NULL OR (created_at, id) > (sqlc.narg(after_created)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at, id
LIMIT sqlc.arg(row_limit);

-- name: ResourceListLiveForSessions :many
SELECT * FROM session_resources
WHERE session_id = ANY(sqlc.arg(session_ids)::text[]) AND deleted_at IS NULL AND type <> 'skill'
ORDER BY session_id, created_at, id;

-- name: ResourceListForWorker :many
-- Skill resources carry their skill's name and description (the
-- description is empty once the version is gone).
SELECT sqlc.embed(r), COALESCE(v.name, s.name, '')::text AS skill_name, COALESCE(v.description, '')::text AS skill_description
FROM session_resources r
LEFT JOIN skills s ON s.id = r.skill_id
LEFT JOIN skill_versions v ON v.id = r.skill_version_id AND v.skill_id = r.skill_id
WHERE r.session_id = $1 AND (r.deleted_at IS NULL OR r.materialized_version > 0)
ORDER BY r.created_at, r.id;

-- name: ResourceListOfThreadSession :many
-- The resources a child thread shares with its session (all but the
-- session's skills: a thread's skills are its agent's own); none for a
-- session, whose parent is NULL.
SELECT sqlc.embed(r)
FROM session_resources r
WHERE r.session_id = (SELECT t.parent_session_id FROM sessions t WHERE t.id = $1)
  AND r.type <> 'skill' AND (r.deleted_at IS NULL OR r.materialized_version > 0)
ORDER BY r.created_at, r.id;

-- name: ResourceInsertSkill :exec
-- A session's skill resource (hidden from clients, never counted).
INSERT INTO session_resources (id, session_id, type, mount_path, skill_id, skill_version_id, created_at, updated_at)
VALUES ($1, $2, 'skill', $3, $4, $5, $6, $6);

-- name: ResourceGetSkill :one
-- A skill of the session or of one of its child threads (placed in the
-- session's sandbox).
SELECT r.* FROM session_resources r
WHERE r.id = $2 AND r.type = 'skill' AND r.deleted_at IS NULL
  AND (r.session_id = $1 OR r.session_id IN (SELECT t.id FROM sessions t WHERE t.parent_session_id = $1));

-- name: ResourceCountLive :one
SELECT count(*) FROM session_resources WHERE session_id = $1 AND deleted_at IS NULL AND type <> 'skill';

-- name: ResourceSetToken :one
UPDATE session_resources SET token_sealed = $3, updated_at = $4
WHERE session_id = $1 AND id = $2 AND deleted_at IS NULL AND type <> 'skill'
RETURNING *;

-- name: ResourceSoftDelete :one
UPDATE session_resources SET deleted_at = $3, updated_at = $3, version = version + 1, token_sealed = NULL
WHERE session_id = $1 AND id = $2 AND deleted_at IS NULL AND type <> 'skill' AND materialized_version > 0
RETURNING *;

-- name: ResourceDeleteUnmaterialized :one
DELETE FROM session_resources
WHERE session_id = $1 AND id = $2 AND deleted_at IS NULL AND type <> 'skill' AND materialized_version = 0
RETURNING *;

-- name: ResourceMarkMaterialized :execrows
-- A resource of the session, or a skill of one of its child threads.
UPDATE session_resources r SET materialized_version = GREATEST(r.materialized_version, sqlc.arg(version))
WHERE r.id = sqlc.arg(id) AND r.deleted_at IS NULL
  AND (r.session_id = sqlc.arg(session_id)
       OR (r.type = 'skill' AND r.session_id IN (SELECT t.id FROM sessions t WHERE t.parent_session_id = sqlc.arg(session_id))));

-- name: ResourcePurgeDeleted :execrows
DELETE FROM session_resources WHERE session_id = $1 AND id = $2 AND deleted_at IS NOT NULL;

-- name: ResourceGetAny :one
SELECT * FROM session_resources WHERE session_id = $1 AND id = $2;

-- name: ResourceTokensAll :many
SELECT id, token_sealed FROM session_resources WHERE token_sealed IS NOT NULL ORDER BY id;

-- name: ResourceRewrapToken :execrows
UPDATE session_resources SET token_sealed = sqlc.arg(new_sealed)
WHERE id = sqlc.arg(id) AND token_sealed = sqlc.arg(old_sealed);

-- name: FileDeleteSessionCopies :many
DELETE FROM files WHERE scope_session_id = $1 AND origin = 'session_copy' RETURNING storage_key;

-- name: SkillReadable :one
-- Whether the skill is one of a session's skills: of session_id, or of a
-- self-hosted session of environment_id.
SELECT EXISTS (
    SELECT 1 FROM session_resources r JOIN sessions s ON s.id = r.session_id
    WHERE r.type = 'skill' AND r.deleted_at IS NULL AND r.skill_id = sqlc.arg(skill_id)::text
      AND (r.session_id = sqlc.narg(session_id) OR (s.environment_id = sqlc.narg(environment_id) AND s.self_hosted))
)::bool;
