-- The tool journal: what each tool call did (db/tooljournal.go).

-- name: ToolJournalInsert :many
-- The entry when this call stored it; no row when one was stored before.
INSERT INTO tool_journal (session_id, tool_use_id, body)
VALUES ($1, $2, $3)
ON CONFLICT (session_id, tool_use_id) DO NOTHING
RETURNING *;

-- name: ToolJournalGet :one
SELECT * FROM tool_journal WHERE session_id = $1 AND tool_use_id = $2;
