-- +goose Up

-- Files: the metadata of uploaded files and of the outputs sessions
-- published (db/files.go). The bytes live in the api-server's file store
-- (api-server/internal/filestore) under storage_key, which is opaque here.
-- Several rows may share a storage_key (a session copy shares the bytes of
-- its source); the bytes are deleted once no row references the key.
-- scope_session_id is the session a file belongs to (its outputs and
-- session copies); it has no foreign key, so deleting a session leaves its
-- files listable by scope until they are deleted themselves. An output is
-- unique by (scope_session_id, output_path).
CREATE TABLE files (
    id                 text PRIMARY KEY,
    filename           text NOT NULL,
    mime_type          text NOT NULL,
    size_bytes         bigint NOT NULL CHECK (size_bytes >= 0),
    sha256             text NOT NULL,
    storage_key        text NOT NULL,
    downloadable       boolean NOT NULL,
    scope_session_id   text,
    origin             text NOT NULL CHECK (origin IN ('upload', 'output', 'session_copy')),
    output_path        text,
    output_modified_at timestamptz,
    created_at         timestamptz NOT NULL,
    CHECK ((origin = 'output') = (output_path IS NOT NULL)),
    CHECK (origin = 'upload' OR scope_session_id IS NOT NULL)
);
CREATE INDEX files_created_idx ON files (created_at, id);
CREATE INDEX files_scope_idx ON files (scope_session_id, created_at, id) WHERE scope_session_id IS NOT NULL;
CREATE UNIQUE INDEX files_output_path_idx ON files (scope_session_id, output_path) WHERE output_path IS NOT NULL;
CREATE INDEX files_storage_key_idx ON files (storage_key);

-- +goose Down
DROP TABLE files;
