-- +goose Up

-- File bytes kept in PostgreSQL (the api-server's default blob store,
-- db/blobs.go). A blob is a head row plus its content cut into chunks of
-- chunk_size bytes (the last one shorter), numbered from 0. Both are
-- written in one transaction, so a blob is visible whole or not at all;
-- deleting the head deletes its chunks. Chunks are stored uncompressed
-- (STORAGE EXTERNAL): uploads are mostly compressed formats already, and
-- compressing them would cost time for nothing.
CREATE TABLE file_blob_heads (
    key        text PRIMARY KEY,
    size       bigint NOT NULL CHECK (size >= 0),
    chunk_size integer NOT NULL CHECK (chunk_size > 0),
    created_at timestamptz NOT NULL
);

CREATE TABLE file_blob_chunks (
    key  text NOT NULL REFERENCES file_blob_heads (key) ON DELETE CASCADE,
    seq  integer NOT NULL CHECK (seq >= 0),
    data bytea NOT NULL,
    PRIMARY KEY (key, seq)
);
ALTER TABLE file_blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- +goose Down
DROP TABLE file_blob_chunks;
DROP TABLE file_blob_heads;
