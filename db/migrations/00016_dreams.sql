-- +goose Up

-- Dreams (issue 33, point 4): a dream reorganises a memory store from
-- past sessions. It runs as a Mango session (session_id) whose agent is
-- made for the dream (agent_id); the session's status changes move the
-- dream's status in the same transaction (db/dreams.go, through
-- sessions.dream_id). input_session_ids are the sessions it reads;
-- output_store_id the store it writes (a new copy of the input store for
-- create_new, the input store for update_existing).
CREATE TABLE dreams (
    id                text PRIMARY KEY,
    status            text NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed', 'canceled')),
    input_store_id    text NOT NULL,
    input_session_ids text[] NOT NULL,
    model             jsonb NOT NULL,
    instructions      text,
    output_behavior   jsonb NOT NULL,
    output_store_id   text,
    session_id        text,
    agent_id          text,
    error             jsonb,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    ended_at          timestamptz,
    archived_at       timestamptz
);
CREATE INDEX dreams_created_idx ON dreams (created_at DESC, id DESC);

-- The dream a session runs, if any: the append path updates the dream
-- when such a session's status changes.
ALTER TABLE sessions ADD COLUMN dream_id text;

-- +goose Down
ALTER TABLE sessions DROP COLUMN dream_id;
DROP TABLE dreams;
