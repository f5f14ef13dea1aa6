-- name: DeploymentInsert :one
INSERT INTO deployments (id, name, description, agent_id, agent_version, environment_id, initial_events, metadata,
    resources, vault_ids, budget_max_cents, schedule_expression, schedule_timezone, status, created_at, updated_at)
VALUES (sqlc.arg(id), sqlc.arg(name), sqlc.arg(description), sqlc.arg(agent_id), sqlc.arg(agent_version),
    sqlc.arg(environment_id), sqlc.arg(initial_events), sqlc.arg(metadata), sqlc.arg(resources), sqlc.arg(vault_ids),
    sqlc.narg(budget_max_cents), sqlc.narg(schedule_expression), sqlc.narg(schedule_timezone), 'active',
    sqlc.arg(now), sqlc.arg(now))
RETURNING *;

-- name: DeploymentGet :one
SELECT * FROM deployments WHERE id = $1;

-- name: DeploymentLock :one
SELECT * FROM deployments WHERE id = $1 FOR UPDATE;

-- name: DeploymentSave :one
-- Writes a deployment's changeable fields; bump_schedule moves the
-- schedule's desired version (the syncer then updates Temporal).
UPDATE deployments SET
    name = sqlc.arg(name), description = sqlc.arg(description), agent_id = sqlc.arg(agent_id),
    agent_version = sqlc.arg(agent_version), environment_id = sqlc.arg(environment_id),
    initial_events = sqlc.arg(initial_events), metadata = sqlc.arg(metadata), resources = sqlc.arg(resources),
    vault_ids = sqlc.arg(vault_ids), budget_max_cents = sqlc.narg(budget_max_cents),
    schedule_expression = sqlc.narg(schedule_expression), schedule_timezone = sqlc.narg(schedule_timezone),
    status = sqlc.arg(status), paused_reason = sqlc.narg(paused_reason), archived_at = sqlc.narg(archived_at),
    updated_at = sqlc.arg(now),
    schedule_version = schedule_version + CASE WHEN sqlc.arg(bump_schedule)::bool THEN 1 ELSE 0 END
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: DeploymentList :many
SELECT * FROM deployments
WHERE (sqlc.arg(include_archived)::bool OR archived_at IS NULL)
  AND (sqlc.narg(agent_id)::text IS NULL OR agent_id = sqlc.narg(agent_id))
  AND (sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status))
  AND (sqlc.narg(created_gte)::timestamptz IS NULL OR created_at >= sqlc.narg(created_gte))
  AND (sqlc.narg(created_lte)::timestamptz IS NULL OR created_at <= sqlc.narg(created_lte))
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(row_limit);

-- name: DeploymentsPauseFor :many
-- Pauses, with reason, the active unarchived deployments that use an
-- agent or an environment, and announces the schedules to sync.
WITH paused AS (
    UPDATE deployments SET status = 'paused', paused_reason = sqlc.arg(reason), updated_at = sqlc.arg(now),
        schedule_version = schedule_version + 1
    WHERE archived_at IS NULL AND status = 'active'
      AND (agent_id = sqlc.narg(agent_id) OR environment_id = sqlc.narg(environment_id))
    RETURNING id
)
SELECT id FROM paused, LATERAL (SELECT pg_notify('mango_deployments', '')) AS n;

-- name: DeploymentSetLastRun :exec
UPDATE deployments SET last_run_at = GREATEST(last_run_at, sqlc.arg(at)::timestamptz) WHERE id = sqlc.arg(id);

-- name: DeploymentsUnsynced :many
SELECT id FROM deployments WHERE schedule_version > schedule_synced ORDER BY id LIMIT sqlc.arg(lim);

-- name: DeploymentSyncLock :exec
-- Serialises the syncers of one deployment (on every replica) for the
-- transaction.
SELECT pg_advisory_xact_lock(hashtext('mango.deployment_sync'), hashtext(sqlc.arg(id)::text));

-- name: DeploymentMarkSynced :exec
UPDATE deployments SET schedule_synced = sqlc.arg(version)
WHERE id = sqlc.arg(id) AND schedule_synced < sqlc.arg(version);

-- name: NotifyDeployments :exec
SELECT pg_notify('mango_deployments', '');

-- name: DeploymentRunInsert :one
INSERT INTO deployment_runs (id, deployment_id, agent_id, agent_version, trigger_type, scheduled_at, session_id,
    error_type, error_message, created_at)
VALUES (sqlc.arg(id), sqlc.arg(deployment_id), sqlc.arg(agent_id), sqlc.arg(agent_version), sqlc.arg(trigger_type),
    sqlc.narg(scheduled_at), sqlc.narg(session_id), sqlc.narg(error_type), sqlc.narg(error_message), sqlc.arg(created_at))
RETURNING *;

-- name: DeploymentRunGet :one
SELECT * FROM deployment_runs WHERE id = $1;

-- name: DeploymentRunByFire :one
SELECT * FROM deployment_runs WHERE deployment_id = sqlc.arg(deployment_id) AND scheduled_at = sqlc.arg(scheduled_at)::timestamptz;

-- name: DeploymentRunList :many
SELECT * FROM deployment_runs
WHERE (sqlc.narg(deployment_id)::text IS NULL OR deployment_id = sqlc.narg(deployment_id))
  AND (sqlc.narg(has_error)::bool IS NULL OR (error_type IS NOT NULL) = sqlc.narg(has_error))
  AND (sqlc.narg(trigger_type)::text IS NULL OR trigger_type = sqlc.narg(trigger_type))
  AND (sqlc.narg(created_gt)::timestamptz IS NULL OR created_at > sqlc.narg(created_gt))
  AND (sqlc.narg(created_gte)::timestamptz IS NULL OR created_at >= sqlc.narg(created_gte))
  AND (sqlc.narg(created_lt)::timestamptz IS NULL OR created_at < sqlc.narg(created_lt))
  AND (sqlc.narg(created_lte)::timestamptz IS NULL OR created_at <= sqlc.narg(created_lte))
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(after_created_at)::timestamptz, sqlc.arg(after_id)::text))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(row_limit);

-- name: SessionSetDeploymentID :exec
UPDATE sessions SET deployment_id = sqlc.arg(deployment_id) WHERE id = sqlc.arg(id);
