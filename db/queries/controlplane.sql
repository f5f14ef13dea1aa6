-- Queries used by the ControlPlane (the internal API execution workers call).

-- name: SessionLockShare :one
SELECT id, deleting_at FROM sessions WHERE id = $1 FOR SHARE;

-- name: EventListPending :many
SELECT * FROM events
WHERE session_id = $1 AND taken_at IS NULL
ORDER BY seq;

-- name: EventListByKeys :many
SELECT id, event_key FROM events
WHERE session_id = $1 AND event_key = ANY(sqlc.arg(keys)::text[]);

-- name: EventMarkProcessed :many
-- Joined to the ids (one probe of the id index each), as EventsAppend's.
UPDATE events e SET taken_at = COALESCE(e.taken_at, sqlc.arg(now)::timestamptz),
    processed_at = COALESCE(e.processed_at, sqlc.arg(now)::timestamptz)
FROM unnest(sqlc.arg(ids)::text[]) AS p(id)
WHERE e.id = p.id AND e.session_id = sqlc.arg(session_id)
RETURNING e.*;

-- name: TranscriptEntryInsert :execrows
INSERT INTO transcript_entries (session_id, entry_key, body)
VALUES ($1, $2, $3)
ON CONFLICT (session_id, entry_key) DO NOTHING;

-- name: TranscriptEntryList :many
SELECT coalesce(seq, 0)::bigint AS seq, entry_key, body FROM transcript_entries
WHERE session_id = sqlc.arg(session_id) AND seq > sqlc.arg(after_seq)::bigint
ORDER BY transcript_entries.seq;

-- name: ToolJournalInsert :many
-- The entry when this call stored it; no row when one was stored before.
INSERT INTO tool_journal (session_id, tool_use_id, body)
VALUES ($1, $2, $3)
ON CONFLICT (session_id, tool_use_id) DO NOTHING
RETURNING *;

-- name: ToolJournalGet :one
SELECT * FROM tool_journal WHERE session_id = $1 AND tool_use_id = $2;

-- name: SandboxIntentUpsert :many
INSERT INTO sandbox_bindings (session_id, provider, external_id, spec_hash, task_queue, created_at, updated_at)
VALUES ($1, $2, NULL, $3, $4, sqlc.arg(now)::timestamptz, sqlc.arg(now)::timestamptz)
ON CONFLICT (session_id) DO UPDATE
SET provider = EXCLUDED.provider, spec_hash = EXCLUDED.spec_hash, task_queue = EXCLUDED.task_queue, updated_at = EXCLUDED.updated_at
WHERE sandbox_bindings.external_id IS NULL
RETURNING *;

-- name: SandboxBindingUpsert :many
INSERT INTO sandbox_bindings (session_id, provider, external_id, spec_hash, task_queue, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, sqlc.arg(now)::timestamptz, sqlc.arg(now)::timestamptz)
ON CONFLICT (session_id) DO UPDATE
SET provider = EXCLUDED.provider, external_id = EXCLUDED.external_id, spec_hash = EXCLUDED.spec_hash,
    task_queue = EXCLUDED.task_queue, updated_at = EXCLUDED.updated_at
WHERE sandbox_bindings.external_id IS NULL OR sandbox_bindings.external_id = EXCLUDED.external_id
RETURNING *;

-- name: SandboxBindingGet :one
SELECT * FROM sandbox_bindings WHERE session_id = $1;

-- name: SandboxBindingDelete :execrows
DELETE FROM sandbox_bindings WHERE session_id = $1;

-- name: SandboxBindingList :many
SELECT * FROM sandbox_bindings
WHERE (sqlc.arg(provider)::text = '' OR provider = sqlc.arg(provider)::text)
  AND (NOT sqlc.arg(only_intents)::bool OR external_id IS NULL)
  AND session_id > sqlc.arg(after_session_id)::text
ORDER BY session_id
LIMIT sqlc.arg(row_limit);

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

-- name: InstallationGet :one
SELECT id FROM installation;
