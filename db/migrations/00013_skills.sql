-- +goose Up

-- Skills (db/skills.go): a skill is a named folder of files (SKILL.md and
-- whatever it refers to) an agent can load. Each upload is an immutable
-- version; the skill's latest version is its newest (created_at, id).
-- name is the kebab-case slug from the first upload's SKILL.md front
-- matter, fixed for the skill's life. A version's bytes are one zip
-- archive in the api-server's file store (api-server/internal/filestore)
-- under storage_key, which no other row shares; the bytes are deleted
-- with the version.
CREATE TABLE skills (
    id           text PRIMARY KEY,
    name         text NOT NULL,
    display_name text NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);
CREATE INDEX skills_created_idx ON skills (created_at, id);

CREATE TABLE skill_versions (
    id          text PRIMARY KEY,
    skill_id    text NOT NULL REFERENCES skills (id) ON DELETE CASCADE,
    name        text NOT NULL,
    description text NOT NULL,
    storage_key text NOT NULL UNIQUE,
    size_bytes  bigint NOT NULL CHECK (size_bytes >= 0),
    file_count  integer NOT NULL CHECK (file_count > 0),
    created_at  timestamptz NOT NULL
);
CREATE INDEX skill_versions_skill_idx ON skill_versions (skill_id, created_at, id);

-- +goose Down
DROP TABLE skill_versions;
DROP TABLE skills;
