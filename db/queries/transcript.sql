-- A session's provider transcript (db/transcript.go).

-- name: TranscriptEntryInsert :execrows
INSERT INTO transcript_entries (session_id, entry_key, body)
VALUES ($1, $2, $3)
ON CONFLICT (session_id, entry_key) DO NOTHING;

-- name: TranscriptEntryList :many
SELECT coalesce(seq, 0)::bigint AS seq, entry_key, body FROM transcript_entries
WHERE session_id = sqlc.arg(session_id) AND seq > sqlc.arg(after_seq)::bigint
ORDER BY transcript_entries.seq;
