-- The events of a session's log: appends, reads and queued user messages
-- (db/append.go, db/events.go).

-- name: EventsGetByKeys :many
SELECT * FROM events
WHERE session_id = sqlc.arg(session_id) AND event_key = ANY(sqlc.arg(keys)::text[]);

-- name: EventsAppend :one
-- One round trip for an append's writes, under the session's row lock
-- held by the caller: the session's last_seq (and status, when
-- set_status, with the active time), the usage (when set_usage), the
-- events numbered after the old last_seq in array order, the transcript
-- entries (in array order, those with a stored key skipped), the
-- processed marks of earlier events, the wake-up outbox row (when wake,
-- with the writer's traceparent; its id is returned, else 0) and the
-- notification. Every part runs whether or not the final SELECT reads it;
-- each sees the log as it was before the statement (the marks name
-- earlier events only).
WITH tr AS (
    INSERT INTO transcript_entries (session_id, entry_key, body)
    SELECT sqlc.arg(session_id), (sqlc.arg(transcript_keys)::text[])[i], ((sqlc.arg(transcript_bodies)::text[])[i])::json
    FROM generate_subscripts(sqlc.arg(transcript_keys)::text[], 1) AS i
    ORDER BY i
    ON CONFLICT (session_id, entry_key) DO NOTHING
), pr AS (
    -- Joined to the ids, so each is one probe of the id index: with
    -- "id = ANY(...)" a generic plan also scans the session's whole log.
    UPDATE events e SET taken_at = COALESCE(e.taken_at, sqlc.arg(now)::timestamptz),
        processed_at = COALESCE(e.processed_at, sqlc.arg(now)::timestamptz)
    FROM unnest(sqlc.arg(processed)::text[]) AS p(id)
    WHERE e.id = p.id AND e.session_id = sqlc.arg(session_id)
), s AS (
    UPDATE sessions SET
        last_seq    = last_seq + cardinality(sqlc.arg(ids)::text[]),
        status      = CASE WHEN sqlc.arg(set_status)::bool THEN sqlc.arg(status)::text ELSE status END,
        stop_reason = CASE WHEN sqlc.arg(set_status)::bool THEN sqlc.narg(stop_reason)::jsonb ELSE stop_reason END,
        updated_at  = CASE WHEN sqlc.arg(set_status)::bool THEN sqlc.arg(now)::timestamptz ELSE updated_at END,
        active_micros = CASE WHEN sqlc.arg(set_status)::bool THEN sqlc.arg(active_micros)::bigint ELSE active_micros END,
        running_since = CASE WHEN sqlc.arg(set_status)::bool THEN sqlc.narg(running_since)::timestamptz ELSE running_since END,
        usage       = CASE WHEN sqlc.arg(set_usage)::bool THEN sqlc.arg(usage)::jsonb ELSE usage END,
        last_event_at = sqlc.arg(now)::timestamptz
    WHERE id = sqlc.arg(session_id)
    RETURNING last_seq
), ins AS (
    INSERT INTO events (session_id, seq, id, type, body, event_key, created_at, processed_at, taken_at)
    SELECT sqlc.arg(session_id), s.last_seq - cardinality(sqlc.arg(ids)::text[]) + i,
           (sqlc.arg(ids)::text[])[i], (sqlc.arg(types)::text[])[i], ((sqlc.arg(bodies)::text[])[i])::json,
           NULLIF((sqlc.arg(keys)::text[])[i], ''), sqlc.arg(now)::timestamptz, sqlc.arg(now)::timestamptz,
           CASE WHEN (sqlc.arg(pending)::bool[])[i] THEN NULL ELSE sqlc.arg(now)::timestamptz END
    FROM s, generate_subscripts(sqlc.arg(ids)::text[], 1) AS i
    RETURNING seq
), ob AS (
    INSERT INTO outbox (session_id, kind, payload, traceparent)
    SELECT sqlc.arg(session_id), sqlc.arg(wake_kind)::text, '{}'::jsonb, sqlc.arg(traceparent)::text
    WHERE sqlc.arg(wake)::bool
    RETURNING id
)
SELECT s.last_seq::bigint AS last_seq, COALESCE((SELECT id FROM ob), 0)::bigint AS outbox_id
FROM s, LATERAL (SELECT pg_notify('mango_events', sqlc.arg(session_id)::text || ':' || s.last_seq)) AS n;

-- name: EventList :many
SELECT * FROM events
WHERE session_id = sqlc.arg(session_id)
  AND (cardinality(sqlc.arg(types)::text[]) = 0 OR type = ANY(sqlc.arg(types)::text[]))
  AND (sqlc.narg(created_gt)::timestamptz IS NULL OR COALESCE(processed_at, created_at) > sqlc.narg(created_gt))
  AND (sqlc.narg(created_gte)::timestamptz IS NULL OR COALESCE(processed_at, created_at) >= sqlc.narg(created_gte))
  AND (sqlc.narg(created_lt)::timestamptz IS NULL OR COALESCE(processed_at, created_at) < sqlc.narg(created_lt))
  AND (sqlc.narg(created_lte)::timestamptz IS NULL OR COALESCE(processed_at, created_at) <= sqlc.narg(created_lte))
  AND (sqlc.narg(after_seq)::bigint IS NULL OR seq > sqlc.narg(after_seq))
  AND (sqlc.narg(before_seq)::bigint IS NULL OR seq < sqlc.narg(before_seq))
ORDER BY
  CASE WHEN sqlc.arg(ascending)::bool THEN seq END ASC,
  CASE WHEN NOT sqlc.arg(ascending)::bool THEN seq END DESC
LIMIT sqlc.arg(row_limit);

-- name: EventsAfter :many
SELECT * FROM events
WHERE session_id = $1 AND seq > $2
ORDER BY seq
LIMIT $3;

-- name: EventSeqByID :one
SELECT seq FROM events WHERE session_id = $1 AND id = $2;

-- name: NotifyInterrupt :exec
SELECT pg_notify('mango_interrupts', sqlc.arg(payload)::text);

-- name: QueuedEventInsert :exec
-- A user.message that waits, outside the log, for the running turn to end.
WITH q AS (
    INSERT INTO queued_events (session_id, id, type, body, created_at)
    VALUES (sqlc.arg(session_id), sqlc.arg(id), sqlc.arg(type), sqlc.arg(body)::json, sqlc.arg(created_at))
    RETURNING session_id
)
UPDATE sessions SET queued = queued + 1 FROM q WHERE sessions.id = q.session_id;

-- name: QueuedEventList :many
SELECT * FROM queued_events WHERE session_id = $1 ORDER BY qseq;

-- name: QueuedEventTakeFirst :many
-- Removes the oldest queued event of a session (under its row lock, held
-- by the caller) for appending to the log.
WITH d AS (
    DELETE FROM queued_events
    WHERE queued_events.session_id = sqlc.arg(session_id)
      AND qseq = (SELECT min(qseq) FROM queued_events q2 WHERE q2.session_id = sqlc.arg(session_id))
    RETURNING *
), u AS (
    UPDATE sessions SET queued = queued - (SELECT count(*) FROM d) WHERE id = sqlc.arg(session_id)
)
SELECT * FROM d;

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

-- name: EventListSystemMessages :many
-- The session's system.message events, in log order
-- (events_system_message_idx).
SELECT body FROM events WHERE session_id = $1 AND type = 'system.message' ORDER BY seq;
