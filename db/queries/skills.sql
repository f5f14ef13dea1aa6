-- Skills and their versions (db/skills.go).

-- name: SkillInsert :exec
INSERT INTO skills (id, name, display_name, source, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $5);

-- name: SkillGetByID :one
SELECT s.*, COALESCE((SELECT v.id FROM skill_versions v WHERE v.skill_id = s.id
                      ORDER BY v.created_at DESC, v.id DESC LIMIT 1), '')::text AS latest_version_id
FROM skills s WHERE s.id = $1;

-- name: SkillLockByID :one
SELECT id FROM skills WHERE id = $1 FOR UPDATE;

-- name: SkillTouch :exec
UPDATE skills SET updated_at = $2 WHERE id = $1;

-- name: SkillList :many
SELECT s.*, COALESCE((SELECT v.id FROM skill_versions v WHERE v.skill_id = s.id
                      ORDER BY v.created_at DESC, v.id DESC LIMIT 1), '')::text AS latest_version_id
FROM skills s
WHERE (sqlc.narg(source)::text IS NULL OR s.source = sqlc.narg(source))
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (s.created_at, s.id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY s.created_at DESC, s.id DESC
LIMIT sqlc.arg(row_limit);

-- name: SkillDeleteByID :execrows
DELETE FROM skills WHERE id = $1;

-- name: SkillVersionInsert :exec
INSERT INTO skill_versions (id, skill_id, name, description, storage_key, size_bytes, file_count, content_sha256, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: SkillVersionGet :one
SELECT * FROM skill_versions WHERE skill_id = $1 AND id = $2;

-- name: SkillVersionLatest :one
SELECT * FROM skill_versions WHERE skill_id = $1
ORDER BY created_at DESC, id DESC LIMIT 1;

-- name: SkillVersionCount :one
SELECT count(*) FROM skill_versions WHERE skill_id = $1;

-- name: SkillVersionList :many
SELECT * FROM skill_versions
WHERE skill_id = sqlc.arg(skill_id)
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(row_limit);

-- name: SkillVersionDelete :one
DELETE FROM skill_versions WHERE skill_id = $1 AND id = $2 RETURNING storage_key;

-- name: SkillVersionDeleteAll :many
DELETE FROM skill_versions WHERE skill_id = $1 RETURNING storage_key;

-- name: SkillLockShareMany :many
-- Holds the skills an agent version names against a concurrent delete
-- (which locks them FOR UPDATE).
SELECT id FROM skills WHERE id = ANY(sqlc.arg(ids)::text[]) ORDER BY id FOR SHARE;

-- name: SkillVersionsExist :many
SELECT id, skill_id FROM skill_versions WHERE id = ANY(sqlc.arg(ids)::text[]);

-- name: SkillUsers :many
-- The non-archived agents whose current version names the skill (or,
-- with version_id, pins that version).
SELECT DISTINCT r.agent_id
FROM agent_skill_refs r
JOIN agents a ON a.id = r.agent_id AND a.current_version = r.agent_version
WHERE a.archived_at IS NULL AND r.skill_id = sqlc.arg(skill_id)
  AND (sqlc.narg(version_id)::text IS NULL OR r.skill_version_id = sqlc.narg(version_id))
ORDER BY r.agent_id
LIMIT sqlc.arg(row_limit);

-- name: SkillCatalogLock :exec
-- One catalog importer at a time (the key is 'mango.skills.catalog').
SELECT pg_advisory_xact_lock(hashtext('mango.skills.catalog'));

-- name: SkillCatalogList :many
-- The imported skills with the content hash of their latest version.
SELECT s.id, s.name,
       COALESCE((SELECT v.content_sha256 FROM skill_versions v WHERE v.skill_id = s.id
                 ORDER BY v.created_at DESC, v.id DESC LIMIT 1), '')::text AS latest_sha256
FROM skills s WHERE s.source = 'anthropic'
ORDER BY s.id;
