-- Context snapshots (db/context.go).

-- name: ContextSnapshotInsert :execrows
INSERT INTO context_snapshots (session_id, snapshot_key, covered, body)
VALUES ($1, $2, $3, $4)
ON CONFLICT (session_id, snapshot_key) DO NOTHING;

-- name: ContextSnapshotGet :one
SELECT snapshot_key, covered, body FROM context_snapshots
WHERE session_id = $1 AND snapshot_key = $2;

-- name: ContextSnapshotLatest :one
SELECT snapshot_key, covered, body FROM context_snapshots
WHERE session_id = $1
ORDER BY seq DESC
LIMIT 1;
