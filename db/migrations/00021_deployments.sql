-- +goose Up

-- Deployments (issue 36): an agent bound to an environment, vaults,
-- resources, a budget and initial events, run on a cron schedule (a
-- Temporal Schedule per deployment, kept in step with this row by the
-- api-server's schedule syncer) or on demand. Each run creates a session
-- and is recorded in deployment_runs.
CREATE TABLE deployments (
    id                  text PRIMARY KEY,
    name                text NOT NULL,
    description         text NOT NULL DEFAULT '',
    -- The agent is pinned: a version, resolved when the deployment is
    -- created or its agent is updated.
    agent_id            text NOT NULL,
    agent_version       bigint NOT NULL,
    -- No foreign key: a run of a deployment whose environment was deleted
    -- records environment_not_found_error.
    environment_id      text NOT NULL,
    initial_events      jsonb NOT NULL,
    metadata            jsonb NOT NULL DEFAULT '{}',
    -- The validated resource configs; a repository's authorization token
    -- is kept only sealed (token_sealed), never in clear.
    resources           jsonb NOT NULL DEFAULT '[]',
    vault_ids           text[] NOT NULL DEFAULT '{}',
    budget_max_cents    bigint,
    -- A 5-field cron expression and an IANA time zone; both null for a
    -- deployment run only on demand.
    schedule_expression text,
    schedule_timezone   text,
    status              text NOT NULL,
    -- {"type":"manual"} or {"type":"error","error":{"type":...}}; null
    -- when active.
    paused_reason       jsonb,
    -- When the most recent scheduled run started (manual runs do not
    -- count); kept after archiving.
    last_run_at         timestamptz,
    -- The schedule's desired state changes with schedule_version; the
    -- syncer records in schedule_synced the version Temporal holds.
    schedule_version    bigint NOT NULL DEFAULT 1,
    schedule_synced     bigint NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    archived_at         timestamptz,
    CONSTRAINT deployments_status_check CHECK (status IN ('active', 'paused')),
    CONSTRAINT deployments_schedule_check CHECK ((schedule_expression IS NULL) = (schedule_timezone IS NULL))
);
CREATE INDEX deployments_created_idx ON deployments (created_at, id);
CREATE INDEX deployments_agent_idx ON deployments (agent_id) WHERE archived_at IS NULL;
CREATE INDEX deployments_environment_idx ON deployments (environment_id) WHERE archived_at IS NULL;
CREATE INDEX deployments_unsynced_idx ON deployments (id) WHERE schedule_version > schedule_synced;

-- One run: a session created, or the error that prevented it.
CREATE TABLE deployment_runs (
    id             text PRIMARY KEY,
    deployment_id  text NOT NULL REFERENCES deployments (id),
    agent_id       text NOT NULL,
    agent_version  bigint NOT NULL,
    -- schedule or manual.
    trigger_type   text NOT NULL,
    -- The cron occurrence a scheduled run is for (the minute it names).
    scheduled_at   timestamptz,
    session_id     text,
    error_type     text,
    error_message  text,
    created_at     timestamptz NOT NULL,
    CONSTRAINT deployment_runs_trigger_check CHECK (trigger_type IN ('schedule', 'manual')),
    CONSTRAINT deployment_runs_scheduled_check CHECK ((trigger_type = 'schedule') = (scheduled_at IS NOT NULL)),
    CONSTRAINT deployment_runs_result_check CHECK ((session_id IS NULL) <> (error_type IS NULL))
);
-- At most one run per occurrence: a fire delivered twice records one run.
CREATE UNIQUE INDEX deployment_runs_fire_idx ON deployment_runs (deployment_id, scheduled_at) WHERE scheduled_at IS NOT NULL;
CREATE INDEX deployment_runs_created_idx ON deployment_runs (created_at, id);
CREATE INDEX deployment_runs_deployment_idx ON deployment_runs (deployment_id, created_at, id);

ALTER TABLE sessions ADD COLUMN deployment_id text;
CREATE INDEX sessions_deployment_idx ON sessions (deployment_id, created_at, id) WHERE deployment_id IS NOT NULL;

-- +goose Down
DROP INDEX sessions_deployment_idx;
ALTER TABLE sessions DROP COLUMN deployment_id;
DROP TABLE deployment_runs;
DROP TABLE deployments;
