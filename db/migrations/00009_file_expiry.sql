-- +goose Up

-- Files may expire (expires_in_seconds at upload): from expires_at on, a
-- file reads as missing, and the api-server's sweeper deletes it and, when
-- no other file references them, its bytes. A session's copy of a file
-- expires with it.
ALTER TABLE files ADD COLUMN expires_at timestamptz;
CREATE INDEX files_expiry_idx ON files (expires_at) WHERE expires_at IS NOT NULL;

-- +goose Down
DROP INDEX files_expiry_idx;
ALTER TABLE files DROP COLUMN expires_at;
