-- name: OutcomeUpsert :many
-- An outcome enters as its user.define_outcome event does: pending while
-- the event waits behind other work, running once the event is in the
-- log (the same event taken from the queue moves it on). It returns the
-- row when inserted or moved on; nothing when it had ended meanwhile
-- (interrupted while queued).
INSERT INTO outcomes (id, session_id, event_id, description, rubric, max_iterations, result, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (id) DO UPDATE SET result = excluded.result
WHERE outcomes.result = 'pending' AND excluded.result = 'running'
RETURNING id;

-- name: SessionSetOutcome :exec
UPDATE sessions SET outcome_id = sqlc.narg(outcome_id) WHERE id = sqlc.arg(id);

-- name: OutcomeGet :one
SELECT * FROM outcomes WHERE id = $1;

-- name: OutcomeActive :one
SELECT o.* FROM outcomes o JOIN sessions s ON s.outcome_id = o.id WHERE s.id = $1;

-- name: OutcomeUpdate :exec
UPDATE outcomes SET iteration = $2, result = $3, explanation = $4,
    evaluation_start_id = sqlc.narg(evaluation_start_id), completed_at = sqlc.narg(completed_at)
WHERE id = $1;

-- name: OutcomeListForSessions :many
SELECT * FROM outcomes WHERE session_id = ANY(sqlc.arg(session_ids)::text[])
ORDER BY session_id, created_at, id;
