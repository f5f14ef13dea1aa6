-- +goose Up

-- Memory stores (issue 33): named collections of text memories that
-- sessions mount (session resources of type 'memory_store') and clients
-- edit through the Memory Stores API (db/memory.go). Every write to a
-- store's memories holds the store's row FOR UPDATE, so writers of one
-- store (API edits, session syncs) serialize.
CREATE TABLE memory_stores (
    id          text PRIMARY KEY,
    name        text NOT NULL,
    description text NOT NULL DEFAULT '',
    metadata    jsonb NOT NULL DEFAULT '{}',
    archived_at timestamptz,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX memory_stores_created_idx ON memory_stores (created_at DESC, id DESC);

-- The live memories of a store. path is the wire path ("/notes.md"),
-- compared bytewise (COLLATE "C") so that listing by path and rolling up
-- folders match the order clients see. A deleted memory's row goes; its
-- versions stay.
CREATE TABLE memories (
    id             text PRIMARY KEY,
    store_id       text NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
    path           text COLLATE "C" NOT NULL,
    content        text NOT NULL,
    content_sha256 text NOT NULL,
    size_bytes     bigint NOT NULL,
    version_id     text NOT NULL,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);
CREATE UNIQUE INDEX memories_path_idx ON memories (store_id, path);

-- The history of a store's memories, append-only but for redaction
-- (which clears path, content, content_sha256 and size_bytes). actor_type
-- is 'api_actor' (actor_id: the API key id) or 'session_actor' (actor_id:
-- the session id). memory_id is not a foreign key: versions outlive the
-- memory.
CREATE TABLE memory_versions (
    id               text PRIMARY KEY,
    store_id         text NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
    memory_id        text NOT NULL,
    path             text COLLATE "C",
    operation        text NOT NULL CHECK (operation IN ('created', 'modified', 'deleted')),
    content          text,
    content_sha256   text,
    size_bytes       bigint,
    actor_type       text NOT NULL CHECK (actor_type IN ('api_actor', 'session_actor')),
    actor_id         text NOT NULL,
    created_at       timestamptz NOT NULL,
    redacted_at      timestamptz,
    redacted_by_type text,
    redacted_by_id   text,
    CHECK ((redacted_at IS NULL) = (path IS NOT NULL)),
    CHECK ((redacted_at IS NULL) = (redacted_by_type IS NULL))
);
CREATE INDEX memory_versions_store_idx ON memory_versions (store_id, created_at DESC, id DESC);
CREATE INDEX memory_versions_memory_idx ON memory_versions (memory_id, created_at DESC, id DESC);

-- Per session and memory_store resource, the base: what the sandbox was
-- given (placement) or last synced, path by path (wire paths).
CREATE TABLE session_memory_bases (
    session_id     text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    resource_id    text NOT NULL,
    path           text COLLATE "C" NOT NULL,
    content_sha256 text NOT NULL,
    PRIMARY KEY (session_id, resource_id, path)
);

-- Session resources of type 'memory_store': the store, the access the
-- session has (read_write or read_only), the attachment's instructions,
-- and the store's name and description as attached.
ALTER TABLE session_resources ADD COLUMN memory_store_id text;
ALTER TABLE session_resources ADD COLUMN access text;
ALTER TABLE session_resources ADD COLUMN instructions text;
ALTER TABLE session_resources ADD COLUMN store_name text;
ALTER TABLE session_resources ADD COLUMN store_description text;
ALTER TABLE session_resources DROP CONSTRAINT session_resources_type_check;
ALTER TABLE session_resources ADD CONSTRAINT session_resources_type_check
    CHECK (type IN ('file', 'github_repository', 'skill', 'memory_store'));
ALTER TABLE session_resources ADD CONSTRAINT session_resources_memory_store_check
    CHECK ((type = 'memory_store') = (memory_store_id IS NOT NULL AND access IS NOT NULL));
ALTER TABLE session_resources ADD CONSTRAINT session_resources_access_check
    CHECK (access IS NULL OR access IN ('read_write', 'read_only'));
CREATE INDEX session_resources_memory_store_idx ON session_resources (memory_store_id, session_id)
    WHERE type = 'memory_store' AND deleted_at IS NULL;

-- +goose Down
DROP INDEX session_resources_memory_store_idx;
DELETE FROM session_resources WHERE type = 'memory_store';
ALTER TABLE session_resources DROP CONSTRAINT session_resources_access_check;
ALTER TABLE session_resources DROP CONSTRAINT session_resources_memory_store_check;
ALTER TABLE session_resources DROP CONSTRAINT session_resources_type_check;
ALTER TABLE session_resources ADD CONSTRAINT session_resources_type_check
    CHECK (type IN ('file', 'github_repository', 'skill'));
ALTER TABLE session_resources DROP COLUMN store_description;
ALTER TABLE session_resources DROP COLUMN store_name;
ALTER TABLE session_resources DROP COLUMN instructions;
ALTER TABLE session_resources DROP COLUMN access;
ALTER TABLE session_resources DROP COLUMN memory_store_id;
DROP TABLE session_memory_bases;
DROP TABLE memory_versions;
DROP TABLE memories;
DROP TABLE memory_stores;
