-- Skills and their versions (db/skills.go).

-- name: SkillInsert :exec
INSERT INTO skills (id, name, display_name, created_at, updated_at)
VALUES ($1, $2, $3, $4, $4);

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
WHERE (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (s.created_at, s.id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY s.created_at DESC, s.id DESC
LIMIT sqlc.arg(row_limit);

-- name: SkillDeleteByID :execrows
DELETE FROM skills WHERE id = $1;

-- name: SkillVersionInsert :exec
INSERT INTO skill_versions (id, skill_id, name, description, storage_key, size_bytes, file_count, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8);

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
