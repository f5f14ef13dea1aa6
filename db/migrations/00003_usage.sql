-- +goose Up

-- Usage accounting and budgets (see db/usage.go, the one place that reads
-- and writes these columns).
--
-- sessions.usage (from 00002) holds the cumulative token counters and the
-- list cost in nano-USD as exact integers, updated in the transaction that
-- appends the event carrying a model request's usage.
--
-- budget_max_cents is the budget's max_list_cost in US cents (NULL: no
-- budget); budget_removed records that a budget was removed, since a
-- removed budget cannot be added back. active_micros is the time spent in
-- running status before running_since, the start of the current running
-- period (NULL unless running).
ALTER TABLE sessions
    ADD COLUMN budget_max_cents  bigint CHECK (budget_max_cents > 0),
    ADD COLUMN budget_removed    boolean NOT NULL DEFAULT false,
    ADD COLUMN active_micros     bigint NOT NULL DEFAULT 0,
    ADD COLUMN running_since     timestamptz;

UPDATE sessions SET running_since = updated_at WHERE status = 'running';

-- +goose Down
ALTER TABLE sessions
    DROP COLUMN running_since,
    DROP COLUMN active_micros,
    DROP COLUMN budget_removed,
    DROP COLUMN budget_max_cents;
