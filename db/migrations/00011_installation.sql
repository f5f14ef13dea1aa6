-- +goose Up

-- The installation: one row, created with the schema, whose random id names
-- this Mango installation. Execution workers label every sandbox resource
-- they create with it (through the ControlPlane), so installations sharing
-- a Docker daemon, a sandbox root or a provider account never take each
-- other's sandboxes for their own (docs/sandboxes.md). A database migrated
-- before this migration gets its id when the migration runs. The id never
-- changes: changing it would make this installation's sandboxes look like
-- another's.
CREATE TABLE installation (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    id         text NOT NULL DEFAULT gen_random_uuid()::text,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO installation DEFAULT VALUES;

-- +goose Down
DROP TABLE installation;
