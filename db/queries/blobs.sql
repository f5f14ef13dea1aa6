-- Blob storage (db/blobs.go). A Put inserts the head first (so a second
-- Put of the key fails, or waits for the first to end), then the chunks,
-- then sets the head's size, all in one transaction.

-- name: BlobHeadInsert :exec
INSERT INTO file_blob_heads (key, size, chunk_size, created_at)
VALUES (sqlc.arg(key), 0, sqlc.arg(chunk_size), sqlc.arg(created_at));

-- name: BlobHeadSetSize :exec
UPDATE file_blob_heads SET size = sqlc.arg(size) WHERE key = sqlc.arg(key);

-- name: BlobHeadGet :one
SELECT key, size, chunk_size, created_at FROM file_blob_heads WHERE key = $1;

-- name: BlobHeadDelete :exec
DELETE FROM file_blob_heads WHERE key = $1;

-- name: BlobChunkInsert :exec
INSERT INTO file_blob_chunks (key, seq, data) VALUES (sqlc.arg(key), sqlc.arg(seq), sqlc.arg(data));

-- name: BlobChunkGet :one
SELECT data FROM file_blob_chunks WHERE key = sqlc.arg(key) AND seq = sqlc.arg(seq);
