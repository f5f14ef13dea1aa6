-- +goose Up

-- Multi-agent sessions (issue 34). A child session thread is stored as a
-- session of its own (its id has the thread prefix sthr_), whose parent
-- is the session it belongs to: it has its own log, transcript, pending
-- triggers, status machine, usage and workflow, and shares its parent's
-- sandbox, resources and vaults. Its events are copied, with the same
-- ids and session_thread_id added, into the parent's log in the same
-- transaction, so the session's one log shows every thread in order
-- (db/threads.go). A session's primary thread is the session itself.
ALTER TABLE sessions ADD COLUMN parent_session_id text REFERENCES sessions (id) ON DELETE CASCADE;
-- awaiting_replies: messages the parent's coordinator sent the thread
-- that it has not answered yet (each message runs one turn, whose end
-- answers it).
ALTER TABLE sessions ADD COLUMN awaiting_replies integer NOT NULL DEFAULT 0;
-- archived_at of a thread is its archive time (the threads API).
-- held_stop_reason: the primary thread ended its turn while child
-- threads ran; the session stays running until the last one is idle,
-- then goes idle with this stop reason.
ALTER TABLE sessions ADD COLUMN held_stop_reason jsonb;
-- has_threads: a child thread was ever created (the append path looks
-- child threads up only then).
ALTER TABLE sessions ADD COLUMN has_threads boolean NOT NULL DEFAULT false;
CREATE INDEX sessions_parent_idx ON sessions (parent_session_id, created_at) WHERE parent_session_id IS NOT NULL;

-- An event copied into the parent's log keeps its id: ids are unique per
-- session, no longer across sessions.
ALTER TABLE events DROP CONSTRAINT events_id_key;
CREATE UNIQUE INDEX events_session_id_key ON events (session_id, id);

-- +goose Down
DROP INDEX events_session_id_key;
DELETE FROM events e USING sessions s WHERE e.session_id = s.id AND s.parent_session_id IS NOT NULL;
DELETE FROM events a USING events b WHERE a.id = b.id AND a.ctid > b.ctid;
ALTER TABLE events ADD CONSTRAINT events_id_key UNIQUE (id);
DROP INDEX sessions_parent_idx;
ALTER TABLE sessions DROP COLUMN has_threads;
ALTER TABLE sessions DROP COLUMN held_stop_reason;
ALTER TABLE sessions DROP COLUMN awaiting_replies;
ALTER TABLE sessions DROP COLUMN parent_session_id;
