-- +goose Up

-- Console sign-ins (issue 37). The web console exchanges an API key for a
-- cookie holding a random token; only the token's SHA-256 is stored. The
-- key itself is kept sealed with the vault keys (purpose
-- "console-session:<id>"), because the console acts through the public
-- API with exactly that key's permissions. A row lives until sign-out or
-- expiry; expired rows are swept.
CREATE TABLE console_sessions (
    id          text PRIMARY KEY,
    token_hash  bytea NOT NULL UNIQUE,
    key_sealed  bytea NOT NULL,
    -- The CSRF token every form and action of this sign-in must carry.
    csrf_token  text NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

-- +goose Down
DROP TABLE console_sessions;
