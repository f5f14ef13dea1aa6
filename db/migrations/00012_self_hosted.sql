-- +goose Up

-- Self-hosted environments (docs: issue 31). A session of an environment
-- whose config.type is "self_hosted" runs its agent loop on Mango's
-- execution workers, but its built-in tool calls are executed by the
-- client's worker, which polls the environment's work queue, claims the
-- session's work item and posts user.tool_result events. self_hosted is
-- the environment's config type when the session was created: an
-- environment never changes between cloud and self_hosted, so the
-- snapshot stays true.
ALTER TABLE sessions ADD COLUMN self_hosted boolean NOT NULL DEFAULT false;

-- Environment keys: credentials bound to one environment, for its
-- self-hosted workers (poll, ack, heartbeat, stop, list, stats, and the
-- tool results of its sessions). Only the SHA-256 of the secret is
-- stored. A key stops working once revoked or expired; last_used_at is
-- touched at most once a minute.
CREATE TABLE environment_keys (
    id              text PRIMARY KEY,
    environment_id  text NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    name            text NOT NULL,
    key_hash        bytea NOT NULL UNIQUE,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz,
    revoked_at      timestamptz,
    last_used_at    timestamptz
);

CREATE INDEX environment_keys_environment_idx ON environment_keys (environment_id, created_at DESC, id DESC);

-- Work items: what a self-hosted environment's workers poll for. A
-- session has at most one live item (queued, starting or active);
-- states move queued -> starting (ack) -> active (first heartbeat) ->
-- stopping (graceful stop) -> stopped. A starting or active item whose
-- lease expired goes back to queued when the queue is next read.
-- polled_at is when a poll last handed the item out; each poll mints a
-- new secret, whose SHA-256 replaces the last (secret_hash).
CREATE TABLE work_items (
    id                 text PRIMARY KEY,
    environment_id     text NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    session_id         text REFERENCES sessions (id) ON DELETE CASCADE,
    type               text NOT NULL CHECK (type IN ('session', 'healthcheck')),
    state              text NOT NULL CHECK (state IN ('queued', 'starting', 'active', 'stopping', 'stopped')),
    metadata           jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at         timestamptz NOT NULL,
    polled_at          timestamptz,
    polled_by          text,
    acknowledged_at    timestamptz,
    started_at         timestamptz,
    last_heartbeat_at  timestamptz,
    lease_expires_at   timestamptz,
    ttl_seconds        integer NOT NULL DEFAULT 0,
    stop_requested_at  timestamptz,
    stopped_at         timestamptz,
    secret_hash        bytea UNIQUE
);

CREATE UNIQUE INDEX work_items_live_session_idx ON work_items (session_id)
    WHERE state IN ('queued', 'starting', 'active');
CREATE INDEX work_items_queue_idx ON work_items (environment_id, state, created_at);
CREATE INDEX work_items_list_idx ON work_items (environment_id, created_at DESC, id DESC);

-- The workers that polled an environment's queue, for the queue's stats.
CREATE TABLE work_pollers (
    environment_id  text NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    worker_id       text NOT NULL,
    last_poll_at    timestamptz NOT NULL,
    PRIMARY KEY (environment_id, worker_id)
);

-- The answers to tool calls (user.tool_result from a self-hosted worker,
-- agent.tool_result from the server), by the tool_use event they answer:
-- a self-hosted call's wait looks its answer up here.
CREATE INDEX events_tool_answer_idx ON events (session_id, (body ->> 'tool_use_id'))
    WHERE type IN ('user.tool_result', 'agent.tool_result');

-- +goose Down
DROP INDEX events_tool_answer_idx;
DROP TABLE work_pollers;
DROP TABLE work_items;
DROP TABLE environment_keys;
ALTER TABLE sessions DROP COLUMN self_hosted;
