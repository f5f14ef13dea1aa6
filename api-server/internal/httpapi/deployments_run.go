package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/eventspec"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/db"
)

// A deployment run creates a session from the deployment's pinned agent
// version, environment, vaults, resources, budget and initial events, and
// records it (or the error that prevented it) in the same transaction as
// the session. A scheduled run is recorded at most once per occurrence; a
// scheduled run whose error needs the client to act (an archived agent,
// a deleted file...) pauses the deployment with that error as its reason.

// deploymentResource is a resource config as a deployment stores it: the
// validated request, with a repository's token only sealed (under the
// purpose of the resource id it was first checked as).
type deploymentResource struct {
	deploymentResView
	TokenSealed   []byte `json:"token_sealed,omitempty"`
	TokenResource string `json:"token_resource,omitempty"`
}

// deploymentResView is the wire form of a deployment's resource
// (BetaManagedAgentsSessionResourceConfigUnion): no token.
type deploymentResView struct {
	Type          string       `json:"type"`
	FileID        string       `json:"file_id,omitempty"`
	URL           string       `json:"url,omitempty"`
	Checkout      *db.Checkout `json:"checkout,omitempty"`
	MountPath     string       `json:"mount_path,omitempty"`
	MemoryStoreID string       `json:"memory_store_id,omitempty"`
	Access        string       `json:"access,omitempty"`
	Instructions  *string      `json:"instructions,omitempty"`
}

func decodeDeploymentResources(d *db.Deployment) ([]deploymentResource, error) {
	var out []deploymentResource
	if err := json.Unmarshal(d.Resources, &out); err != nil {
		return nil, fmt.Errorf("decode resources of deployment %s: %w", d.ID, err)
	}
	return out, nil
}

// deploymentResources checks the resources member as a session create
// would and returns what the deployment stores; null or [] clear them.
func (a *API) deploymentResources(ctx context.Context, raw jsonx.Opt[json.RawMessage]) (json.RawMessage, error) {
	out := []deploymentResource{}
	if !raw.Null {
		checked, err := a.parseResources(ctx, raw.Value, "resources")
		if err != nil {
			return nil, err
		}
		for _, rc := range checked {
			r := deploymentResource{deploymentResView: deploymentResView{Type: rc.Type, MountPath: rc.MountPath}}
			switch rc.Type {
			case db.ResourceFile:
				r.FileID = rc.SourceFileID
			case db.ResourceRepository:
				r.URL, r.Checkout = rc.URL, rc.Checkout
				if rc.TokenSealed != nil {
					r.TokenSealed, r.TokenResource = rc.TokenSealed, rc.ID
				}
			case db.ResourceMemoryStore:
				r.MountPath, r.MemoryStoreID, r.Access = "", rc.MemoryStoreID, rc.Access
				if rc.Instructions != "" {
					r.Instructions = &rc.Instructions
				}
			}
			out = append(out, r)
		}
	}
	return json.Marshal(out)
}

// runError is a run's error (BetaManagedAgentsDeploymentRunErrorUnion).
type runError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Run error types that do not pause a deployment: the next fire may
// succeed.
const (
	runErrRateLimited = "session_rate_limited_error"
	runErrUnknown     = "unknown_error"
	runErrRejected    = "session_creation_rejected_error"
)

// checkDeploymentRefs checks what a run needs that the client may have
// archived or deleted since the deployment was written: its agent,
// environment, vaults, files and memory stores. A nil runError means all
// are usable.
func (a *API) checkDeploymentRefs(ctx context.Context, d *db.Deployment) (*runError, error) {
	ag, err := a.deps.Store.AgentGet(ctx, d.AgentID)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return &runError{runErrRejected, fmt.Sprintf("agent %q not found", d.AgentID)}, nil
	case err != nil:
		return nil, err
	case ag.ArchivedAt != nil:
		return &runError{"agent_archived_error", fmt.Sprintf("agent %q is archived", d.AgentID)}, nil
	}
	env, err := a.deps.Store.EnvironmentGet(ctx, d.EnvironmentID)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return &runError{"environment_not_found_error", fmt.Sprintf("environment %q not found", d.EnvironmentID)}, nil
	case err != nil:
		return nil, err
	case env.ArchivedAt != nil:
		return &runError{"environment_archived_error", fmt.Sprintf("environment %q is archived", d.EnvironmentID)}, nil
	}
	if len(d.VaultIDs) > 0 {
		vaults, err := a.deps.Store.VaultsByID(ctx, d.VaultIDs)
		if err != nil {
			return nil, err
		}
		for _, id := range d.VaultIDs {
			if v, ok := vaults[id]; !ok {
				return &runError{"vault_not_found_error", fmt.Sprintf("vault %q not found", id)}, nil
			} else if v.ArchivedAt != nil {
				return &runError{"vault_archived_error", fmt.Sprintf("vault %q is archived", id)}, nil
			}
		}
	}
	resources, err := decodeDeploymentResources(d)
	if err != nil {
		return nil, err
	}
	for _, r := range resources {
		if re, err := a.checkDeploymentResource(ctx, &r, isSelfHosted(env)); re != nil || err != nil {
			return re, err
		}
	}
	return nil, nil
}

func (a *API) checkDeploymentResource(ctx context.Context, r *deploymentResource, selfHosted bool) (*runError, error) {
	switch r.Type {
	case db.ResourceFile, db.ResourceRepository:
		if selfHosted {
			return &runError{"self_hosted_resources_unsupported_error",
				fmt.Sprintf("the environment is self-hosted and cannot mount %s resources", r.Type)}, nil
		}
		if r.Type == db.ResourceRepository {
			return nil, nil
		}
		live, err := a.liveFile(ctx, r.FileID)
		if err != nil || live {
			return nil, err
		}
		return &runError{"file_not_found_error", fmt.Sprintf("file %q not found", r.FileID)}, nil
	case db.ResourceMemoryStore:
		ms, err := a.deps.Store.MemoryStoreGet(ctx, r.MemoryStoreID)
		switch {
		case errors.Is(err, db.ErrNotFound):
			return &runError{"session_resource_not_found_error", fmt.Sprintf("memory store %q not found", r.MemoryStoreID)}, nil
		case err != nil:
			return nil, err
		case ms.ArchivedAt != nil:
			return &runError{"memory_store_archived_error", fmt.Sprintf("memory store %q is archived", r.MemoryStoreID)}, nil
		}
	}
	return nil, nil
}

// runResources rebuilds the session resources of a run: each stored
// config checked again as a session create checks it, a repository's
// token unsealed and sealed anew for the session's resource.
func (a *API) runResources(ctx context.Context, d *db.Deployment) ([]db.ResourceCreate, error) {
	resources, err := decodeDeploymentResources(d)
	if err != nil || len(resources) == 0 {
		return nil, err
	}
	inputs := make([]map[string]any, 0, len(resources))
	for _, r := range resources {
		in := map[string]any{"type": r.Type}
		switch r.Type {
		case db.ResourceFile:
			in["file_id"], in["mount_path"] = r.FileID, r.MountPath
		case db.ResourceRepository:
			in["url"], in["mount_path"] = r.URL, r.MountPath
			if r.Checkout != nil {
				in["checkout"] = r.Checkout
			}
			if r.TokenSealed != nil {
				token, err := a.deps.Secrets.Open(r.TokenSealed, db.ResourceTokenPurpose(r.TokenResource))
				if err != nil {
					return nil, fmt.Errorf("open the authorization token of deployment %s's repository %s: %w", d.ID, r.URL, err)
				}
				in["authorization_token"] = string(token)
			}
		case db.ResourceMemoryStore:
			in["memory_store_id"], in["access"] = r.MemoryStoreID, r.Access
			if r.Instructions != nil {
				in["instructions"] = *r.Instructions
			}
		}
		inputs = append(inputs, in)
	}
	raw, err := json.Marshal(inputs)
	if err != nil {
		return nil, err
	}
	return a.parseResources(ctx, raw, "resources")
}

// runSession builds the session of a run of d; a runError when one of its
// parts can no longer be used.
func (a *API) runSession(ctx context.Context, d *db.Deployment, run *db.DeploymentRun) (*newSession, *runError, error) {
	if re, err := a.checkDeploymentRefs(ctx, d); re != nil || err != nil {
		return nil, re, err
	}
	resources, err := a.runResources(ctx, d)
	if err != nil {
		return nil, rejected(err), nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(d.InitialEvents, &raws); err != nil {
		return nil, nil, fmt.Errorf("decode initial events of deployment %s: %w", d.ID, err)
	}
	initial, err := eventspec.ParseList(raws, "initial_events", deploymentInitialEventTypes)
	if err == nil {
		err = a.checkFileSources(ctx, initial, "initial_events")
	}
	if err != nil {
		var ae *apierror.Error
		if errors.As(err, &ae) {
			return nil, &runError{"file_not_found_error", ae.Message}, nil
		}
		return nil, nil, err
	}
	return &newSession{ID: ids.New(ids.Session), Ref: &agentspec.AgentRef{ID: d.AgentID, Version: d.AgentVersion},
		EnvironmentID: d.EnvironmentID, Resources: resources, Budget: d.BudgetMaxCents, Title: d.Name,
		Metadata: map[string]string{}, Initial: initial, VaultIDs: d.VaultIDs, Run: run}, nil, nil
}

// rejected is the runError of a public (4xx) error; nil for others, which
// the caller returns (a scheduled fire is retried).
func rejected(err error) *runError {
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status >= 500 {
		return nil
	}
	if ae.Status == http.StatusTooManyRequests {
		return &runError{runErrRateLimited, ae.Message}
	}
	return &runError{runErrRejected, ae.Message}
}

// runDeployment makes one run of d: scheduledAt is the occurrence of a
// scheduled run, nil for a manual one. A public error of the session
// create is recorded as the run's error; an internal one is returned
// with nothing recorded.
func (a *API) runDeployment(ctx context.Context, d *db.Deployment, scheduledAt *time.Time) (*db.DeploymentRun, error) {
	run := &db.DeploymentRun{ID: ids.New(ids.DeploymentRun), DeploymentID: d.ID, AgentID: d.AgentID,
		AgentVersion: d.AgentVersion, TriggerType: db.TriggerManual, ScheduledAt: scheduledAt, CreatedAt: a.now()}
	if scheduledAt != nil {
		run.TriggerType = db.TriggerSchedule
	}
	n, re, err := a.runSession(ctx, d, run)
	if err != nil {
		return nil, err
	}
	if re == nil {
		var sess *db.Session
		sess, err = a.createSession(ctx, n)
		if err == nil {
			run.SessionID = &sess.ID
			a.deploymentRuns.WithLabelValues(run.TriggerType, "session").Inc()
			return run, nil
		}
		if re = rejected(err); re == nil {
			return nil, err
		}
	}
	run.ErrorType, run.ErrorMessage = &re.Type, &re.Message
	pause := scheduledAt != nil && re.Type != runErrRateLimited && re.Type != runErrUnknown
	if err := a.deps.Store.DeploymentRunFail(ctx, run, pause); err != nil {
		return nil, err
	}
	a.deploymentRuns.WithLabelValues(run.TriggerType, "error").Inc()
	return run, nil
}

// RunScheduled makes the run of a deployment's scheduled occurrence:
// nothing when the deployment is gone, archived or paused (a fire that
// raced a pause), the recorded run when the occurrence has one already.
func (a *API) RunScheduled(ctx context.Context, deploymentID string, scheduledAt time.Time) error {
	d, err := a.deps.Store.DeploymentGet(ctx, deploymentID)
	if errors.Is(err, db.ErrNotFound) {
		a.deps.Logger.WarnContext(ctx, "scheduled fire of a deployment this installation does not have", slog.String("deployment_id", deploymentID))
		return nil
	}
	if err != nil {
		return err
	}
	if d.ArchivedAt != nil || d.Status != db.DeploymentActive {
		return nil
	}
	if _, err := a.deps.Store.DeploymentRunByFire(ctx, d.ID, scheduledAt); err == nil || !errors.Is(err, db.ErrNotFound) {
		return err
	}
	run, err := a.runDeployment(ctx, d, &scheduledAt)
	if errors.Is(err, db.ErrRunExists) {
		return nil
	}
	if err == nil {
		a.deps.Logger.InfoContext(ctx, "deployment run", slog.String("deployment_id", d.ID), slog.String("run_id", run.ID),
			slog.Time("scheduled_at", scheduledAt), slog.Bool("failed", run.ErrorType != nil))
	}
	return err
}

// FailScheduled records a scheduled occurrence whose run could not be
// made (an internal error persisted past its retries) as a run with an
// unknown_error; the deployment stays active. The cause goes to the log
// only: the run's message names no internal detail.
func (a *API) FailScheduled(ctx context.Context, deploymentID string, scheduledAt time.Time, cause string) error {
	d, err := a.deps.Store.DeploymentGet(ctx, deploymentID)
	if errors.Is(err, db.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if d.ArchivedAt != nil || d.Status != db.DeploymentActive {
		return nil // paused or archived meanwhile: the occurrence makes no run
	}
	a.deps.Logger.ErrorContext(ctx, "deployment run failed past its retries; recorded as unknown_error", slog.String("deployment_id", d.ID),
		slog.Time("scheduled_at", scheduledAt), slog.String("cause", cause))
	msg := "the run's session could not be created: an internal error persisted through an hour of retries"
	typ := runErrUnknown
	run := &db.DeploymentRun{ID: ids.New(ids.DeploymentRun), DeploymentID: d.ID, AgentID: d.AgentID, AgentVersion: d.AgentVersion,
		TriggerType: db.TriggerSchedule, ScheduledAt: &scheduledAt, ErrorType: &typ, ErrorMessage: &msg, CreatedAt: a.now()}
	switch err := a.deps.Store.DeploymentRunFail(ctx, run, false); {
	case err == nil:
		a.deploymentRuns.WithLabelValues(db.TriggerSchedule, "error").Inc()
	case !errors.Is(err, db.ErrRunExists):
		return err
	}
	return nil
}

func (a *API) deploymentRun(c echo.Context) error {
	id, err := deploymentID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	d, err := a.deps.Store.DeploymentGet(ctx, id)
	if err != nil {
		return deploymentError(id, err)
	}
	if d.ArchivedAt != nil {
		return deploymentArchived(id)
	}
	run, err := a.runDeployment(ctx, d, nil)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toRunResponse(run))
}

// Deployment runs (the SDK's Beta.DeploymentRuns).

type triggerContext struct {
	Type        string     `json:"type"`
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
}

// runResponse is the wire form of a run (BetaManagedAgentsDeploymentRun).
type runResponse struct {
	Type           string           `json:"type"`
	ID             string           `json:"id"`
	Agent          agentRefResponse `json:"agent"`
	DeploymentID   string           `json:"deployment_id"`
	SessionID      *string          `json:"session_id"`
	Error          *runError        `json:"error"`
	TriggerContext triggerContext   `json:"trigger_context"`
	CreatedAt      time.Time        `json:"created_at"`
}

func toRunResponse(r *db.DeploymentRun) *runResponse {
	out := &runResponse{Type: "deployment_run", ID: r.ID, Agent: agentRefResponse{Type: "agent", ID: r.AgentID, Version: r.AgentVersion},
		DeploymentID: r.DeploymentID, SessionID: r.SessionID, TriggerContext: triggerContext{Type: r.TriggerType, ScheduledAt: r.ScheduledAt},
		CreatedAt: r.CreatedAt}
	if r.ErrorType != nil {
		out.Error = &runError{Type: *r.ErrorType}
		if r.ErrorMessage != nil {
			out.Error.Message = *r.ErrorMessage
		}
	}
	return out
}

func runNotFound(id string) error { return apierror.NotFoundf("deployment run %q not found", id) }

func (a *API) deploymentRunGet(c echo.Context) error {
	id, err := pathID(c, "id", ids.DeploymentRun, runNotFound)
	if err != nil {
		return err
	}
	r, err := a.deps.Store.DeploymentRunGet(c.Request().Context(), id)
	if errors.Is(err, db.ErrNotFound) {
		return runNotFound(id)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toRunResponse(r))
}

// maxRunPageLimit is the largest page of runs (the SDK documents 1000).
const maxRunPageLimit = 1000

func (a *API) deploymentRunList(c echo.Context) error {
	page, after, err := parseKeysetPage(c, maxRunPageLimit)
	if err != nil {
		return err
	}
	p := db.DeploymentRunListParams{Limit: page.limit, After: after}
	if v := c.QueryParam("deployment_id"); v != "" {
		p.DeploymentID = &v
	}
	if v := c.QueryParam("has_error"); v != "" {
		b, err := parseBoolParam(c, "has_error")
		if err != nil {
			return err
		}
		p.HasError = &b
	}
	switch v := c.QueryParam("trigger_type"); v {
	case "":
	case db.TriggerSchedule, db.TriggerManual:
		p.TriggerType = &v
	default:
		return apierror.Invalid("trigger_type: must be schedule or manual, got %q", v)
	}
	if p.CreatedGT, p.CreatedGTE, p.CreatedLT, p.CreatedLTE, err = parseCreatedRange(c); err != nil {
		return err
	}
	rows, more, err := a.deps.Store.DeploymentRunList(c.Request().Context(), p)
	if err != nil {
		return err
	}
	return writeList(c, rows, more, func(r db.DeploymentRun) *runResponse { return toRunResponse(&r) },
		func(r db.DeploymentRun) string { return timeCursor(r.CreatedAt, r.ID) })
}
