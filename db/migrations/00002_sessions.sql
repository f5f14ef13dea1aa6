-- +goose Up

-- Sessions. The agent snapshot is immutable except for tools and MCP servers
-- updated while idle. last_seq is the sequence number of the newest event:
-- appending locks the row and advances it, so numbers are gapless per
-- session. deleting_at fences admission from the moment a delete begins.
CREATE TABLE sessions (
    id              text PRIMARY KEY,
    agent_id        text NOT NULL,
    agent_version   bigint NOT NULL,
    agent           json NOT NULL,
    environment_id  text,
    provider        text NOT NULL,
    title           text NOT NULL DEFAULT '',
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    status          text NOT NULL CHECK (status IN ('idle', 'running', 'rescheduling', 'terminated')),
    stop_reason     jsonb,
    usage           jsonb NOT NULL DEFAULT '{}'::jsonb,
    last_seq        bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    archived_at     timestamptz,
    deleting_at     timestamptz
);

CREATE INDEX sessions_created_at_idx ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_agent_idx ON sessions (agent_id, agent_version);

-- The event log. seq is gapless per session; event_key makes appends from
-- workers idempotent (a retried activity re-sends the same keys).
-- processed_at is when the event took effect: at append for events the
-- server produces, when a worker picks it up for user events that trigger
-- work.
CREATE TABLE events (
    session_id    text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq           bigint NOT NULL,
    id            text NOT NULL UNIQUE,
    type          text NOT NULL,
    body          json NOT NULL,
    event_key     text,
    created_at    timestamptz NOT NULL,
    processed_at  timestamptz,
    PRIMARY KEY (session_id, seq)
);

CREATE UNIQUE INDEX events_key_idx ON events (session_id, event_key) WHERE event_key IS NOT NULL;
CREATE INDEX events_pending_idx ON events (session_id, seq) WHERE processed_at IS NULL;

-- Transactional outbox: a row per wake-up owed to a session's workflow,
-- written in the transaction that admitted the triggering event and
-- deleted once Temporal accepted the signal.
CREATE TABLE outbox (
    id               bigserial PRIMARY KEY,
    session_id       text NOT NULL,
    kind             text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text
);

CREATE INDEX outbox_due_idx ON outbox (next_attempt_at);

-- The lossless provider transcript of each session, beside the public
-- events, keyed like events so retries never duplicate it.
CREATE TABLE transcript_entries (
    session_id  text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq         bigserial,
    entry_key   text NOT NULL,
    body        json NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, entry_key)
);

CREATE INDEX transcript_entries_seq_idx ON transcript_entries (session_id, seq);

-- Tool journal: what each tool call did, for idempotent replay on retry.
CREATE TABLE tool_journal (
    session_id   text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tool_use_id  text NOT NULL,
    body         json NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, tool_use_id)
);

-- Sandbox ownership: a provisioning intent (external_id NULL) written before
-- the provider creates anything, replaced atomically by the binding.
-- Deliberately no foreign key: a binding must outlive its session row until
-- the sandbox is torn down.
CREATE TABLE sandbox_bindings (
    session_id   text PRIMARY KEY,
    provider     text NOT NULL,
    external_id  text,
    spec_hash    text NOT NULL,
    task_queue   text NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);

-- Execution workers seen through their heartbeats.
CREATE TABLE workers (
    worker_id     text PRIMARY KEY,
    provider      text NOT NULL,
    task_queues   text[] NOT NULL,
    capabilities  text[] NOT NULL,
    version       text NOT NULL,
    first_seen_at timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL
);

-- +goose Down
DROP TABLE workers;
DROP TABLE sandbox_bindings;
DROP TABLE tool_journal;
DROP TABLE transcript_entries;
DROP TABLE outbox;
DROP TABLE events;
DROP TABLE sessions;
