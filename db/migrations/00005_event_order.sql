-- +goose Up

-- One order for a session's log: events are listed, paged and streamed by
-- seq, and processed_at never goes backwards along seq (see db/events.go,
-- the rule's one home, and docs/api.md "Order of events").
--
-- processed_at is now the time an event took its place in the log: at
-- append for everything, triggers included. Whether a worker has consumed
-- a trigger is taken_at (NULL: still to run), which processed_at used to
-- double as. A user.message sent while a turn runs waits in
-- queued_events, outside the log, until the session takes it up; then it
-- is appended at that point, so the log reads in the order the agent saw
-- things. last_event_at is the processed_at of the newest event, so an
-- append never stamps an earlier time (clocks of several replicas, or two
-- appends racing for the row lock). queued counts queued_events rows.
ALTER TABLE events ADD COLUMN taken_at timestamptz;
UPDATE events SET taken_at = processed_at;
DROP INDEX events_pending_idx;
CREATE INDEX events_untaken_idx ON events (session_id, seq) WHERE taken_at IS NULL;

ALTER TABLE sessions
    ADD COLUMN last_event_at timestamptz,
    ADD COLUMN queued        integer NOT NULL DEFAULT 0 CHECK (queued >= 0);
UPDATE sessions s SET last_event_at = (
    SELECT max(COALESCE(e.processed_at, e.created_at)) FROM events e WHERE e.session_id = s.id);

CREATE TABLE queued_events (
    session_id  text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    qseq        bigserial,
    id          text NOT NULL UNIQUE,
    type        text NOT NULL,
    body        json NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (session_id, qseq)
);

-- +goose Down
DROP TABLE queued_events;
ALTER TABLE sessions DROP COLUMN queued, DROP COLUMN last_event_at;
DROP INDEX events_untaken_idx;
CREATE INDEX events_pending_idx ON events (session_id, seq) WHERE processed_at IS NULL;
ALTER TABLE events DROP COLUMN taken_at;
