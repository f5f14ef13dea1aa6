-- +goose Up

-- Clients' system.message events (issue 35, point 4): every turn reads the
-- session's into its system context, in log order (db.RunState); the index
-- holds only them, so the read costs nothing for the sessions without.
CREATE INDEX events_system_message_idx ON events (session_id, seq) WHERE type = 'system.message';

-- +goose Down
DROP INDEX events_system_message_idx;
