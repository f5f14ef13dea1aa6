-- Execution workers as seen through their heartbeats (db/workers.go).

-- name: WorkerUpsert :one
INSERT INTO workers (worker_id, provider, task_queues, capabilities, version, first_seen_at, last_seen_at)
VALUES ($1, $2, $3, $4, $5, sqlc.arg(now)::timestamptz, sqlc.arg(now)::timestamptz)
ON CONFLICT (worker_id) DO UPDATE
SET provider = EXCLUDED.provider, task_queues = EXCLUDED.task_queues, capabilities = EXCLUDED.capabilities,
    version = EXCLUDED.version, last_seen_at = EXCLUDED.last_seen_at
RETURNING *;

-- name: WorkerGet :one
SELECT * FROM workers WHERE worker_id = $1;

-- name: WorkerQueueLastSeen :one
-- The latest heartbeat of any worker polling a task queue (no row: none).
SELECT last_seen_at FROM workers WHERE sqlc.arg(task_queue)::text = ANY(task_queues)
ORDER BY last_seen_at DESC LIMIT 1;

-- name: WorkerList :many
SELECT * FROM workers ORDER BY provider, worker_id;

-- name: ProviderHasCapability :one
-- Whether a worker of the provider seen since a time reports a capability.
SELECT EXISTS (
    SELECT 1 FROM workers
    WHERE provider = sqlc.arg(provider) AND last_seen_at >= sqlc.arg(since)::timestamptz
      AND sqlc.arg(capability)::text = ANY(capabilities)
);
