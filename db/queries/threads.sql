-- Child session threads (db/threads.go): sessions whose parent is the
-- session they belong to.

-- name: ThreadInsert :many
-- A child thread of the locked parent: a session sharing the parent's
-- environment, provider, vaults and self-hosting. An id already taken
-- (a retried spawn) inserts nothing.
INSERT INTO sessions (id, parent_session_id, agent_id, agent_version, agent, environment_id, provider, title, metadata,
                      status, created_at, updated_at, self_hosted, vault_ids)
SELECT sqlc.arg(id), p.id, sqlc.arg(agent_id), sqlc.arg(agent_version), sqlc.arg(agent)::json, p.environment_id, p.provider,
       '', '{}'::jsonb, 'idle', sqlc.arg(now)::timestamptz, sqlc.arg(now)::timestamptz, p.self_hosted, p.vault_ids
FROM sessions p WHERE p.id = sqlc.arg(parent_id)
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: ThreadMarkParent :exec
UPDATE sessions SET has_threads = true WHERE id = $1 AND NOT has_threads;

-- name: ThreadList :many
SELECT * FROM sessions WHERE parent_session_id = $1 ORDER BY created_at, id;

-- name: ThreadRunningOthers :one
-- The parent's child threads running (or rescheduling) other than one.
SELECT count(*) FROM sessions
WHERE parent_session_id = sqlc.arg(parent_id) AND id <> sqlc.arg(except_id) AND status IN ('running', 'rescheduling');

-- name: ThreadSetHeld :exec
UPDATE sessions SET held_stop_reason = sqlc.narg(held)::jsonb WHERE id = sqlc.arg(id);

-- name: ThreadAddAwaiting :exec
-- delta 0 clears the count.
UPDATE sessions SET awaiting_replies = CASE WHEN sqlc.arg(delta)::int = 0 THEN 0 ELSE greatest(awaiting_replies + sqlc.arg(delta)::int, 0) END
WHERE id = sqlc.arg(id);

-- name: ThreadAwaiting :many
-- The parent's child threads awaiting a reply, among ids (all when ids
-- is empty).
SELECT id FROM sessions
WHERE parent_session_id = sqlc.arg(parent_id) AND awaiting_replies > 0
  AND (cardinality(sqlc.arg(ids)::text[]) = 0 OR id = ANY(sqlc.arg(ids)::text[]));

-- name: ThreadRepliesPending :many
-- The replies of child threads pending in the parent's log (not taken
-- by a wait nor a turn), oldest first, from the given threads (all when
-- ids is empty).
SELECT * FROM events
WHERE session_id = sqlc.arg(session_id) AND taken_at IS NULL AND type = 'agent.thread_message_received'
  AND (cardinality(sqlc.arg(ids)::text[]) = 0 OR (body->>'from_session_thread_id') = ANY(sqlc.arg(ids)::text[]))
ORDER BY seq;

-- name: ThreadArchive :one
UPDATE sessions
SET archived_at = COALESCE(archived_at, sqlc.arg(now)::timestamptz),
    updated_at = CASE WHEN archived_at IS NULL THEN sqlc.arg(now)::timestamptz ELSE updated_at END
WHERE id = sqlc.arg(id) AND parent_session_id = sqlc.arg(parent_id)
RETURNING *;

-- name: ThreadFenceAll :many
-- Fences a session's child threads (its deletion began): their ids.
UPDATE sessions SET deleting_at = COALESCE(deleting_at, sqlc.arg(now)::timestamptz)
WHERE parent_session_id = sqlc.arg(parent_id)
RETURNING id;

-- name: EventThreadOf :one
-- The child thread an event of the session's log was copied from ('' for
-- the session's own).
SELECT COALESCE(body->>'session_thread_id', '')::text FROM events WHERE session_id = $1 AND id = $2;
