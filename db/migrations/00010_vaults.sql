-- +goose Up

-- Vaults hold credentials agents use during sessions (db/vaults.go).
CREATE TABLE vaults (
    id           text PRIMARY KEY,
    display_name text NOT NULL,
    metadata     jsonb NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    archived_at  timestamptz
);
CREATE INDEX vaults_created_idx ON vaults (created_at DESC, id DESC);

-- A credential of a vault. auth holds the non-secret part of its
-- authentication settings as the API returns it (type-specific, owned by
-- the api-server); mcp_server_url is the server it applies to (static_bearer
-- and mcp_oauth). Its secrets live in vault_credential_secrets.
CREATE TABLE vault_credentials (
    id             text PRIMARY KEY,
    vault_id       text NOT NULL REFERENCES vaults (id) ON DELETE CASCADE,
    display_name   text,
    metadata       jsonb NOT NULL DEFAULT '{}',
    auth_type      text NOT NULL CHECK (auth_type IN ('static_bearer', 'mcp_oauth', 'environment_variable')),
    mcp_server_url text,
    auth           jsonb NOT NULL,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    archived_at    timestamptz,
    CHECK ((auth_type = 'environment_variable') = (mcp_server_url IS NULL))
);
CREATE INDEX vault_credentials_vault_idx ON vault_credentials (vault_id, created_at DESC, id DESC);
-- One live credential per MCP server in a vault: the first match wins.
CREATE UNIQUE INDEX vault_credentials_server_idx ON vault_credentials (vault_id, mcp_server_url)
    WHERE archived_at IS NULL AND mcp_server_url IS NOT NULL;

-- The write-only fields of credentials (token, access_token,
-- refresh_token, client_secret, secret_value), each sealed by package
-- envelope (MANGO_VAULT_KEYS) for a purpose naming the credential and the
-- field. They are never returned.
CREATE TABLE vault_credential_secrets (
    credential_id text NOT NULL REFERENCES vault_credentials (id) ON DELETE CASCADE,
    field         text NOT NULL,
    sealed        bytea NOT NULL,
    PRIMARY KEY (credential_id, field)
);

-- The vaults a session draws credentials from, in order.
ALTER TABLE sessions ADD COLUMN vault_ids text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE sessions DROP COLUMN vault_ids;
DROP TABLE vault_credential_secrets;
DROP TABLE vault_credentials;
DROP TABLE vaults;
