package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// Deployment states.
const (
	DeploymentActive = "active"
	DeploymentPaused = "paused"
)

// Deployment run triggers.
const (
	TriggerSchedule = "schedule"
	TriggerManual   = "manual"
)

// DeploymentChannel is the PostgreSQL notification channel a commit that
// changes a deployment's schedule announces itself on; the schedule
// syncers of every replica listen to it.
const DeploymentChannel = "mango_deployments"

// Deployment is an agent bound to an environment, vaults, resources, a
// budget and initial events, run on a schedule or on demand.
type Deployment struct {
	ID           string
	Name         string
	Description  string
	AgentID      string
	AgentVersion int64
	// EnvironmentID names the environment sessions run in.
	EnvironmentID string
	// InitialEvents is the validated list of events each run's session
	// starts with, as the client sent it.
	InitialEvents json.RawMessage
	Metadata      map[string]string
	// Resources is the validated list of resource configs; a repository's
	// authorization token appears only sealed.
	Resources      json.RawMessage
	VaultIDs       []string
	BudgetMaxCents *int64
	// Schedule is nil for a deployment run only on demand.
	Schedule *Schedule
	Status   string
	// PausedReason is the wire form of why it is paused; nil when active.
	PausedReason json.RawMessage
	// LastRunAt is when the most recent scheduled run started.
	LastRunAt *time.Time
	// ScheduleVersion is the version of the schedule's desired state;
	// ScheduleSynced the version Temporal holds.
	ScheduleVersion int64
	ScheduleSynced  int64
	CreatedAt       time.Time
	UpdatedAt       time.Time
	ArchivedAt      *time.Time
}

// Schedule is a deployment's cron schedule.
type Schedule struct {
	Expression string
	Timezone   string
}

// WantsSchedule reports whether the deployment should have a Temporal
// Schedule: it has a schedule and is not archived.
func (d *Deployment) WantsSchedule() bool { return d.Schedule != nil && d.ArchivedAt == nil }

func deploymentFromRow(r dbsqlc.Deployment) (*Deployment, error) {
	d := &Deployment{ID: r.ID, Name: r.Name, Description: r.Description, AgentID: r.AgentID, AgentVersion: r.AgentVersion,
		EnvironmentID: r.EnvironmentID, InitialEvents: r.InitialEvents, Resources: r.Resources, VaultIDs: r.VaultIds,
		BudgetMaxCents: r.BudgetMaxCents, Status: r.Status, PausedReason: r.PausedReason, LastRunAt: r.LastRunAt,
		ScheduleVersion: r.ScheduleVersion, ScheduleSynced: r.ScheduleSynced, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		ArchivedAt: r.ArchivedAt}
	if r.ScheduleExpression != nil && r.ScheduleTimezone != nil {
		d.Schedule = &Schedule{Expression: *r.ScheduleExpression, Timezone: *r.ScheduleTimezone}
	}
	if d.VaultIDs == nil {
		d.VaultIDs = []string{}
	}
	md, err := decodeMetadata(r.Metadata, "deployment", r.ID)
	if err != nil {
		return nil, err
	}
	d.Metadata = md
	return d, nil
}

func scheduleParts(s *Schedule) (expr, tz *string) {
	if s == nil {
		return nil, nil
	}
	return &s.Expression, &s.Timezone
}

// DeploymentCreate stores a new active deployment and writes its
// deployment.created event; a scheduled one is announced to the syncers.
func (s *Store) DeploymentCreate(ctx context.Context, d *Deployment, now time.Time) (*Deployment, error) {
	var out *Deployment
	err := s.inTx(ctx, "create deployment", func(q *dbsqlc.Queries) error {
		expr, tz := scheduleParts(d.Schedule)
		row, err := q.DeploymentInsert(ctx, dbsqlc.DeploymentInsertParams{ID: d.ID, Name: d.Name, Description: d.Description,
			AgentID: d.AgentID, AgentVersion: d.AgentVersion, EnvironmentID: d.EnvironmentID, InitialEvents: d.InitialEvents,
			Metadata: metadataJSON(d.Metadata), Resources: d.Resources, VaultIds: orEmptyIDs(d.VaultIDs),
			BudgetMaxCents: d.BudgetMaxCents, ScheduleExpression: expr, ScheduleTimezone: tz, Now: now})
		if err != nil {
			return err
		}
		if out, err = deploymentFromRow(row); err != nil {
			return err
		}
		if d.Schedule != nil {
			if err := q.NotifyDeployments(ctx); err != nil {
				return err
			}
		}
		return emitResourceWebhook(ctx, q, d.ID, "deployment.created", "", now)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func orEmptyIDs(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}

// DeploymentGet returns a deployment; ErrNotFound when absent.
func (s *Store) DeploymentGet(ctx context.Context, id string) (*Deployment, error) {
	row, err := s.q.DeploymentGet(ctx, id)
	if err != nil {
		return nil, mapErr("get deployment", err)
	}
	return deploymentFromRow(row)
}

// DeploymentChange changes a deployment under its row lock: change gets
// the current state and returns the next one (nil: no change) and the
// webhook event types the change makes (deployment.updated, .paused,
// .unpaused, .archived). A change of the schedule, the status or the
// archival moves the schedule's desired version and wakes the syncers.
// change's error is returned as is.
func (s *Store) DeploymentChange(ctx context.Context, id string, now time.Time,
	change func(cur *Deployment) (*Deployment, []string, error)) (*Deployment, error) {
	var out *Deployment
	err := s.inTx(ctx, "change deployment", func(q *dbsqlc.Queries) error {
		row, err := q.DeploymentLock(ctx, id)
		if err != nil {
			return err
		}
		cur, err := deploymentFromRow(row)
		if err != nil {
			return err
		}
		next, events, err := change(cur)
		if err != nil {
			return err
		}
		if next == nil {
			out = cur
			return nil
		}
		bump := next.Status != cur.Status || (next.ArchivedAt == nil) != (cur.ArchivedAt == nil) ||
			!equalSchedules(next.Schedule, cur.Schedule)
		if out, err = saveDeployment(ctx, q, next, now, bump); err != nil {
			return err
		}
		occurrence := strconv.FormatInt(now.UnixNano(), 10)
		for _, typ := range events {
			if err := emitResourceWebhook(ctx, q, id, typ, occurrence, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// saveDeployment writes d in the transaction q; bump moves the
// schedule's desired version and wakes the syncers.
func saveDeployment(ctx context.Context, q *dbsqlc.Queries, d *Deployment, now time.Time, bump bool) (*Deployment, error) {
	expr, tz := scheduleParts(d.Schedule)
	saved, err := q.DeploymentSave(ctx, dbsqlc.DeploymentSaveParams{ID: d.ID, Name: d.Name, Description: d.Description,
		AgentID: d.AgentID, AgentVersion: d.AgentVersion, EnvironmentID: d.EnvironmentID,
		InitialEvents: d.InitialEvents, Metadata: metadataJSON(d.Metadata), Resources: d.Resources,
		VaultIds: orEmptyIDs(d.VaultIDs), BudgetMaxCents: d.BudgetMaxCents, ScheduleExpression: expr,
		ScheduleTimezone: tz, Status: d.Status, PausedReason: d.PausedReason, ArchivedAt: d.ArchivedAt,
		Now: now, BumpSchedule: bump})
	if err != nil {
		return nil, err
	}
	if bump {
		if err := q.NotifyDeployments(ctx); err != nil {
			return nil, err
		}
	}
	return deploymentFromRow(saved)
}

func equalSchedules(a, b *Schedule) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// PausedReasonError is the paused_reason of a deployment paused because a
// run (or the archival of what it uses) failed with errType.
func PausedReasonError(errType string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": errType}})
	return b
}

// PausedReasonManual is the paused_reason of a deployment its client
// paused.
var PausedReasonManual = json.RawMessage(`{"type":"manual"}`)

// pauseDeploymentsFor pauses, in the transaction q, the active deployments
// that use the agent or the environment (one of them set), with an error
// reason of errType, and writes their deployment.paused events.
func pauseDeploymentsFor(ctx context.Context, q *dbsqlc.Queries, agentID, environmentID *string, errType string, now time.Time) error {
	paused, err := q.DeploymentsPauseFor(ctx, dbsqlc.DeploymentsPauseForParams{Reason: PausedReasonError(errType), Now: now,
		AgentID: agentID, EnvironmentID: environmentID})
	if err != nil {
		return err
	}
	occurrence := strconv.FormatInt(now.UnixNano(), 10)
	for _, id := range paused {
		if err := emitResourceWebhook(ctx, q, id, "deployment.paused", occurrence, now); err != nil {
			return err
		}
	}
	return nil
}

// DeploymentListParams filter and page a deployment list.
type DeploymentListParams struct {
	IncludeArchived bool
	AgentID         *string
	Status          *string
	CreatedGTE      *time.Time
	CreatedLTE      *time.Time
	After           *Cursor
	Limit           int
}

// DeploymentList returns deployments newest first, and whether more
// follow.
func (s *Store) DeploymentList(ctx context.Context, p DeploymentListParams) ([]Deployment, bool, error) {
	arg := dbsqlc.DeploymentListParams{IncludeArchived: p.IncludeArchived, AgentID: p.AgentID, Status: p.Status,
		CreatedGte: p.CreatedGTE, CreatedLte: p.CreatedLTE, RowLimit: int32(p.Limit + 1)}
	if p.After != nil {
		arg.AfterCreatedAt, arg.AfterID = &p.After.CreatedAt, p.After.ID
	}
	rows, err := s.q.DeploymentList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list deployments", err)
	}
	out := make([]Deployment, 0, len(rows))
	for _, r := range rows {
		d, err := deploymentFromRow(r)
		if err != nil {
			return nil, false, err
		}
		out = append(out, *d)
	}
	page, more := trim(out, p.Limit)
	return page, more, nil
}

// DeploymentsUnsynced returns up to limit deployments whose Temporal
// Schedule lags their desired state.
func (s *Store) DeploymentsUnsynced(ctx context.Context, limit int) ([]string, error) {
	out, err := s.q.DeploymentsUnsynced(ctx, int32(limit))
	return out, mapErr("list unsynced deployments", err)
}

// DeploymentSync brings a deployment's Temporal Schedule in step: apply
// gets the deployment and makes Temporal hold its state; the version it
// saw is then recorded as synced. Syncers of one deployment (on every
// replica) take turns; one that finds the version synced by the one
// before returns at once. A change committed while apply ran leaves the
// deployment unsynced for the next pass.
func (s *Store) DeploymentSync(ctx context.Context, id string, apply func(d *Deployment) error) error {
	return s.inTx(ctx, "sync deployment schedule", func(q *dbsqlc.Queries) error {
		if err := q.DeploymentSyncLock(ctx, id); err != nil {
			return err
		}
		row, err := q.DeploymentGet(ctx, id)
		if err != nil {
			return err
		}
		if row.ScheduleSynced >= row.ScheduleVersion {
			return nil
		}
		d, err := deploymentFromRow(row)
		if err != nil {
			return err
		}
		if err := apply(d); err != nil {
			return err
		}
		return q.DeploymentMarkSynced(ctx, dbsqlc.DeploymentMarkSyncedParams{ID: id, Version: row.ScheduleVersion})
	})
}

// DeploymentRun is one run of a deployment: the session it created, or
// the error that prevented it.
type DeploymentRun struct {
	ID           string
	DeploymentID string
	AgentID      string
	AgentVersion int64
	TriggerType  string
	// ScheduledAt is the cron occurrence of a scheduled run.
	ScheduledAt  *time.Time
	SessionID    *string
	ErrorType    *string
	ErrorMessage *string
	CreatedAt    time.Time
}

func runFromRow(r dbsqlc.DeploymentRun) *DeploymentRun {
	return &DeploymentRun{ID: r.ID, DeploymentID: r.DeploymentID, AgentID: r.AgentID, AgentVersion: r.AgentVersion,
		TriggerType: r.TriggerType, ScheduledAt: r.ScheduledAt, SessionID: r.SessionID, ErrorType: r.ErrorType,
		ErrorMessage: r.ErrorMessage, CreatedAt: r.CreatedAt}
}

// ErrRunExists reports a scheduled run already recorded for its
// occurrence (DeploymentRunByFire returns it).
var ErrRunExists = fmt.Errorf("deployment run already recorded for this occurrence: %w", ErrConflict)

// insertRun records run in the transaction q with its webhook events
// (deployment_run.started and .succeeded or .failed) and, for a scheduled
// run, the deployment's last_run_at. ErrRunExists when its occurrence has
// a run.
func insertRun(ctx context.Context, q *dbsqlc.Queries, run *DeploymentRun) error {
	_, err := q.DeploymentRunInsert(ctx, dbsqlc.DeploymentRunInsertParams{ID: run.ID, DeploymentID: run.DeploymentID,
		AgentID: run.AgentID, AgentVersion: run.AgentVersion, TriggerType: run.TriggerType, ScheduledAt: run.ScheduledAt,
		SessionID: run.SessionID, ErrorType: run.ErrorType, ErrorMessage: run.ErrorMessage, CreatedAt: run.CreatedAt})
	if err != nil {
		if errors.Is(mapErr("", err), ErrConflict) && run.ScheduledAt != nil {
			return ErrRunExists
		}
		return err
	}
	if run.TriggerType == TriggerSchedule {
		if err := q.DeploymentSetLastRun(ctx, dbsqlc.DeploymentSetLastRunParams{ID: run.DeploymentID, At: run.CreatedAt}); err != nil {
			return err
		}
	}
	end := "deployment_run.succeeded"
	if run.ErrorType != nil {
		end = "deployment_run.failed"
	}
	return emitWebhooks(ctx, q, run.CreatedAt, []WebhookEvent{
		{ID: webhookEventID(run.ID, "deployment_run.started"), Type: "deployment_run.started", ResourceID: run.ID},
		{ID: webhookEventID(run.ID, end), Type: end, ResourceID: run.ID}})
}

// DeploymentRunFail records a run that created no session. When pause is
// set (a scheduled run whose error needs the client to act), the
// deployment, if still active, is paused with the error as its reason in
// the same transaction. ErrRunExists when its occurrence has a run.
func (s *Store) DeploymentRunFail(ctx context.Context, run *DeploymentRun, pause bool) error {
	return s.inTx(ctx, "record failed deployment run", func(q *dbsqlc.Queries) error {
		if err := insertRun(ctx, q, run); err != nil {
			return err
		}
		if !pause || run.ErrorType == nil {
			return nil
		}
		row, err := q.DeploymentLock(ctx, run.DeploymentID)
		if err != nil {
			return err
		}
		d, err := deploymentFromRow(row)
		if err != nil {
			return err
		}
		if d.Status != DeploymentActive || d.ArchivedAt != nil {
			return nil
		}
		d.Status, d.PausedReason = DeploymentPaused, PausedReasonError(*run.ErrorType)
		if _, err := saveDeployment(ctx, q, d, run.CreatedAt, true); err != nil {
			return err
		}
		return emitResourceWebhook(ctx, q, d.ID, "deployment.paused", strconv.FormatInt(run.CreatedAt.UnixNano(), 10), run.CreatedAt)
	})
}

// DeploymentRunGet returns a run; ErrNotFound when absent.
func (s *Store) DeploymentRunGet(ctx context.Context, id string) (*DeploymentRun, error) {
	row, err := s.q.DeploymentRunGet(ctx, id)
	if err != nil {
		return nil, mapErr("get deployment run", err)
	}
	return runFromRow(row), nil
}

// DeploymentRunByFire returns the run recorded for a deployment's
// scheduled occurrence; ErrNotFound when none is.
func (s *Store) DeploymentRunByFire(ctx context.Context, deploymentID string, scheduledAt time.Time) (*DeploymentRun, error) {
	row, err := s.q.DeploymentRunByFire(ctx, dbsqlc.DeploymentRunByFireParams{DeploymentID: deploymentID, ScheduledAt: scheduledAt})
	if err != nil {
		return nil, mapErr("get deployment run by occurrence", err)
	}
	return runFromRow(row), nil
}

// DeploymentRunListParams filter and page a run list.
type DeploymentRunListParams struct {
	DeploymentID *string
	HasError     *bool
	TriggerType  *string
	CreatedGT    *time.Time
	CreatedGTE   *time.Time
	CreatedLT    *time.Time
	CreatedLTE   *time.Time
	After        *Cursor
	Limit        int
}

// DeploymentRunList returns runs newest first, and whether more follow.
func (s *Store) DeploymentRunList(ctx context.Context, p DeploymentRunListParams) ([]DeploymentRun, bool, error) {
	arg := dbsqlc.DeploymentRunListParams{DeploymentID: p.DeploymentID, HasError: p.HasError, TriggerType: p.TriggerType,
		CreatedGt: p.CreatedGT, CreatedGte: p.CreatedGTE, CreatedLt: p.CreatedLT, CreatedLte: p.CreatedLTE,
		RowLimit: int32(p.Limit + 1)}
	if p.After != nil {
		arg.AfterCreatedAt, arg.AfterID = &p.After.CreatedAt, p.After.ID
	}
	rows, err := s.q.DeploymentRunList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list deployment runs", err)
	}
	out := make([]DeploymentRun, 0, len(rows))
	for _, r := range rows {
		out = append(out, *runFromRow(r))
	}
	page, more := trim(out, p.Limit)
	return page, more, nil
}
