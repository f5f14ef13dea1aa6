-- +goose Up

-- Outcomes (issue 35): a user.define_outcome event defines what "done"
-- means for a session; a grader evaluates the agent's work against the
-- rubric after each of its turns, and while the verdict is
-- needs_revision the agent revises, up to max_iterations evaluations
-- (db/outcomes.go). One outcome is active per session at a time
-- (sessions.outcome_id); finished ones stay, for outcome_evaluations[].
CREATE TABLE outcomes (
    id                  text PRIMARY KEY,
    session_id          text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    -- The user.define_outcome event.
    event_id            text NOT NULL,
    description         text NOT NULL,
    -- {"type":"text","content":...} or {"type":"file","file_id":...}.
    rubric              jsonb NOT NULL,
    max_iterations      integer NOT NULL,
    -- The 0-indexed revision cycle the outcome is on.
    iteration           integer NOT NULL DEFAULT 0,
    -- pending (its event waits behind other work), running (the agent
    -- works), evaluating (the grader runs), then one of satisfied,
    -- max_iterations_reached, failed, interrupted.
    result              text NOT NULL,
    explanation         text NOT NULL DEFAULT '',
    -- The span.outcome_evaluation_start of the evaluation in progress.
    evaluation_start_id text,
    created_at          timestamptz NOT NULL,
    completed_at        timestamptz,
    CONSTRAINT outcomes_result_check CHECK (result IN ('pending', 'running', 'evaluating',
        'satisfied', 'max_iterations_reached', 'failed', 'interrupted'))
);
CREATE INDEX outcomes_session_idx ON outcomes (session_id, created_at, id);

-- The session's active outcome (not finished), if any.
ALTER TABLE sessions ADD COLUMN outcome_id text;

-- +goose Down
ALTER TABLE sessions DROP COLUMN outcome_id;
DROP TABLE outcomes;
