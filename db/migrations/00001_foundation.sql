-- +goose Up

-- API keys. Only a SHA-256 hash of each key is stored.
CREATE TABLE api_keys (
    id          text PRIMARY KEY,
    name        text NOT NULL,
    key_hash    bytea NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- Agents: one row per agent holding its current version; the immutable
-- version bodies live in agent_versions.
CREATE TABLE agents (
    id               text PRIMARY KEY,
    current_version  bigint NOT NULL CHECK (current_version >= 1),
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    archived_at      timestamptz
);

CREATE INDEX agents_created_at_idx ON agents (created_at DESC, id DESC);

-- Every version of an agent, immutable once written. spec is the fully
-- resolved definition (name, model, tools, ...) as the API returns it; it is
-- json, not jsonb, so that client-supplied documents such as tool input
-- schemas keep their exact text and member order.
CREATE TABLE agent_versions (
    agent_id    text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    version     bigint NOT NULL CHECK (version >= 1),
    spec        json NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (agent_id, version)
);

-- Environments: where sessions run. Names are unique among existing rows.
CREATE TABLE environments (
    id           text PRIMARY KEY,
    name         text NOT NULL,
    description  text NOT NULL DEFAULT '',
    config       jsonb NOT NULL,
    metadata     jsonb NOT NULL DEFAULT '{}'::jsonb,
    scope        text NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    archived_at  timestamptz
);

CREATE UNIQUE INDEX environments_name_key ON environments (name);
CREATE INDEX environments_created_at_idx ON environments (created_at DESC, id DESC);

-- +goose Down
DROP TABLE environments;
DROP TABLE agent_versions;
DROP TABLE agents;
DROP TABLE api_keys;
