-- +goose Up

-- Session resources: files and repositories a client attached to a
-- session, materialized into its sandbox by a worker before the turn that
-- first needs them (db/resources.go). version counts what the sandbox
-- must hold; materialized_version is what it holds. A resource deleted
-- while materialized keeps its row (deleted_at set) until the worker has
-- removed it from the sandbox. token_sealed is an authorization token
-- sealed by package envelope (MANGO_VAULT_KEYS); it is never returned.
CREATE TABLE session_resources (
    id                   text PRIMARY KEY,
    session_id           text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    type                 text NOT NULL CHECK (type IN ('file', 'github_repository')),
    mount_path           text NOT NULL,
    file_id              text,
    url                  text,
    checkout             jsonb,
    token_sealed         bytea,
    version              bigint NOT NULL DEFAULT 1,
    materialized_version bigint NOT NULL DEFAULT 0,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    deleted_at           timestamptz,
    CHECK ((type = 'file') = (file_id IS NOT NULL)),
    CHECK ((type = 'github_repository') = (url IS NOT NULL))
);
CREATE UNIQUE INDEX session_resources_mount_idx ON session_resources (session_id, mount_path) WHERE deleted_at IS NULL;
CREATE INDEX session_resources_session_idx ON session_resources (session_id, created_at, id);

-- +goose Down
DROP TABLE session_resources;
