package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/deployments"
	"github.com/mangohq/mango/api-server/internal/eventspec"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/api-server/internal/usage"
	"github.com/mangohq/mango/db"
)

// Deployments (the SDK's Beta.Deployments): an agent version bound to an
// environment, vaults, resources, a budget and initial events, run on a
// cron schedule or on demand. Each run creates a session
// (deployments_run.go); the schedule is a Temporal Schedule the syncer
// (package deployments) keeps in step with the row.

// Schedules keeps deployments' Temporal Schedules in step with the
// database and reads their upcoming fires.
type Schedules interface {
	// Sync brings the deployment's schedule in step now; a failure is
	// logged and retried in the background.
	Sync(ctx context.Context, deploymentID string)
	// Upcoming returns up to five upcoming fires of the deployment's
	// schedule (empty when it has none or Temporal cannot be asked).
	Upcoming(ctx context.Context, d *db.Deployment) []time.Time
}

// Limits of a deployment's members.
const (
	maxDeploymentName        = 256
	maxDeploymentDescription = 2048
)

// deploymentInitialEventTypes are the events a deployment may start its
// sessions with.
var deploymentInitialEventTypes = []string{eventspec.UserMessage, eventspec.UserDefineOutcome, eventspec.SystemMessage}

type agentRefResponse struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Version int64  `json:"version"`
}

type scheduleResponse struct {
	Type           string      `json:"type"`
	Expression     string      `json:"expression"`
	Timezone       string      `json:"timezone"`
	LastRunAt      *time.Time  `json:"last_run_at"`
	UpcomingRunsAt []time.Time `json:"upcoming_runs_at"`
}

// deploymentResponse is the wire form of a deployment
// (BetaManagedAgentsDeployment).
type deploymentResponse struct {
	Type          string              `json:"type"`
	ID            string              `json:"id"`
	Name          string              `json:"name"`
	Description   string              `json:"description"`
	Agent         agentRefResponse    `json:"agent"`
	EnvironmentID string              `json:"environment_id"`
	InitialEvents []json.RawMessage   `json:"initial_events"`
	Metadata      map[string]string   `json:"metadata"`
	PausedReason  json.RawMessage     `json:"paused_reason"`
	Resources     []deploymentResView `json:"resources"`
	Schedule      *scheduleResponse   `json:"schedule"`
	Status        string              `json:"status"`
	VaultIDs      []string            `json:"vault_ids"`
	Budget        *usage.Budget       `json:"budget"`
	CreatedAt     time.Time           `json:"created_at"`
	UpdatedAt     time.Time           `json:"updated_at"`
	ArchivedAt    *time.Time          `json:"archived_at"`
}

func (a *API) toDeploymentResponse(ctx context.Context, d *db.Deployment) (*deploymentResponse, error) {
	events, err := initialEventsView(d.InitialEvents)
	if err != nil {
		return nil, err
	}
	res, err := decodeDeploymentResources(d)
	if err != nil {
		return nil, err
	}
	views := make([]deploymentResView, 0, len(res))
	for _, r := range res {
		views = append(views, r.deploymentResView)
	}
	out := &deploymentResponse{Type: "deployment", ID: d.ID, Name: d.Name, Description: d.Description,
		Agent: agentRefResponse{Type: "agent", ID: d.AgentID, Version: d.AgentVersion}, EnvironmentID: d.EnvironmentID,
		InitialEvents: events, Metadata: orEmpty(d.Metadata), PausedReason: d.PausedReason, Resources: views,
		Status: d.Status, VaultIDs: d.VaultIDs, Budget: usage.BudgetOfCents(d.BudgetMaxCents),
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, ArchivedAt: d.ArchivedAt}
	if d.Schedule != nil {
		out.Schedule = &scheduleResponse{Type: "cron", Expression: d.Schedule.Expression, Timezone: d.Schedule.Timezone,
			LastRunAt: d.LastRunAt, UpcomingRunsAt: []time.Time{}}
		if d.ArchivedAt == nil && a.deps.Schedules != nil {
			out.Schedule.UpcomingRunsAt = a.deps.Schedules.Upcoming(ctx, d)
		}
	}
	return out, nil
}

// initialEventsView is the wire form of stored initial events: each as the
// session would store it, without the outcome id a run mints.
func initialEventsView(raw json.RawMessage) ([]json.RawMessage, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, err
	}
	events, err := eventspec.ParseList(raws, "initial_events", nil)
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, 0, len(events))
	for _, ev := range events {
		var body map[string]json.RawMessage
		if err := json.Unmarshal(ev.Body, &body); err != nil {
			return nil, err
		}
		delete(body, "outcome_id")
		typ, _ := json.Marshal(ev.Type)
		body["type"] = typ
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func deploymentNotFound(id string) error { return apierror.NotFoundf("deployment %q not found", id) }

func deploymentID(c echo.Context) (string, error) {
	return pathID(c, "id", ids.Deployment, deploymentNotFound)
}

func deploymentError(id string, err error) error {
	if errors.Is(err, db.ErrNotFound) {
		return deploymentNotFound(id)
	}
	return err
}

func deploymentArchived(id string) error {
	return apierror.Conflictf("deployment %q is archived; an archived deployment cannot be changed or run", id)
}

// deploymentInput is the body of Deployments.New and Update: every member
// optional, so that an update tells absent from null.
type deploymentInput struct {
	Name          jsonx.Opt[string]          `json:"name"`
	Description   jsonx.Opt[string]          `json:"description"`
	Agent         jsonx.Opt[json.RawMessage] `json:"agent"`
	EnvironmentID jsonx.Opt[string]          `json:"environment_id"`
	InitialEvents jsonx.Opt[json.RawMessage] `json:"initial_events"`
	Metadata      map[string]*string         `json:"metadata"`
	Resources     jsonx.Opt[json.RawMessage] `json:"resources"`
	VaultIDs      jsonx.Opt[[]string]        `json:"vault_ids"`
	Budget        jsonx.Opt[json.RawMessage] `json:"budget"`
	Schedule      jsonx.Opt[json.RawMessage] `json:"schedule"`
}

func (a *API) deploymentCreate(c echo.Context) error {
	var in deploymentInput
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	for _, m := range []struct {
		name string
		set  bool
	}{{"name", in.Name.Set}, {"agent", in.Agent.Set}, {"environment_id", in.EnvironmentID.Set}, {"initial_events", in.InitialEvents.Set}} {
		if !m.set {
			return apierror.Invalid("%s: is required", m.name)
		}
	}
	ctx := c.Request().Context()
	d := &db.Deployment{ID: ids.New(ids.Deployment), Metadata: map[string]string{}, Resources: json.RawMessage(`[]`)}
	if err := a.applyDeploymentInput(ctx, d, &in); err != nil {
		return err
	}
	d, err := a.deps.Store.DeploymentCreate(ctx, d, a.now())
	if err != nil {
		return err
	}
	a.syncSchedule(ctx, d)
	return a.deploymentJSON(c, d)
}

// applyDeploymentInput checks the members in sets and writes them on d.
func (a *API) applyDeploymentInput(ctx context.Context, d *db.Deployment, in *deploymentInput) error {
	if err := applyDeploymentText(d, in); err != nil {
		return err
	}
	if in.Agent.Set {
		if err := a.pinDeploymentAgent(ctx, d, in.Agent); err != nil {
			return err
		}
	}
	provider := ""
	if in.EnvironmentID.Set || in.VaultIDs.Set {
		if in.EnvironmentID.Null || (in.EnvironmentID.Set && in.EnvironmentID.Value == "") {
			return apierror.Invalid("environment_id: is required and cannot be cleared")
		}
		if in.EnvironmentID.Set {
			d.EnvironmentID = in.EnvironmentID.Value
		}
		_, p, err := a.environmentProvider(ctx, d.EnvironmentID)
		if err != nil {
			return err
		}
		provider = p
	}
	if in.InitialEvents.Set {
		if err := a.checkDeploymentEvents(ctx, in.InitialEvents); err != nil {
			return err
		}
		d.InitialEvents = in.InitialEvents.Value
	}
	metadata, err := agentspec.PatchMetadata(d.Metadata, in.Metadata, false)
	if err != nil {
		return err
	}
	d.Metadata = metadata
	if in.Resources.Set {
		if d.Resources, err = a.deploymentResources(ctx, in.Resources); err != nil {
			return err
		}
	}
	if in.VaultIDs.Set {
		if d.VaultIDs, err = a.checkSessionVaults(ctx, in.VaultIDs.Value, provider, "vault_ids"); err != nil {
			return err
		}
	}
	if err := a.applyDeploymentBudget(ctx, d, in.Budget); err != nil {
		return err
	}
	return applyDeploymentSchedule(d, in.Schedule)
}

func applyDeploymentText(d *db.Deployment, in *deploymentInput) error {
	if in.Name.Set {
		if in.Name.Null || in.Name.Value == "" {
			return apierror.Invalid("name: must not be empty")
		}
		if n := utf8.RuneCountInString(in.Name.Value); n > maxDeploymentName {
			return apierror.Invalid("name: must be at most %d characters, got %d", maxDeploymentName, n)
		}
		d.Name = in.Name.Value
	}
	if in.Description.Set {
		if n := utf8.RuneCountInString(in.Description.Value); n > maxDeploymentDescription {
			return apierror.Invalid("description: must be at most %d characters, got %d", maxDeploymentDescription, n)
		}
		d.Description = in.Description.Value // null clears: Value is ""
	}
	return nil
}

// pinDeploymentAgent resolves the agent member (an id: its current
// version; {type:"agent", id, version}: that version) and pins it on d.
func (a *API) pinDeploymentAgent(ctx context.Context, d *db.Deployment, raw jsonx.Opt[json.RawMessage]) error {
	if raw.Null {
		return apierror.Invalid("agent: is required and cannot be cleared")
	}
	ref, err := agentspec.ParseAgentRef(raw.Value)
	if err != nil {
		return err
	}
	if ref.Overrides != nil {
		return apierror.Invalid("agent: a deployment takes an agent id or {type: \"agent\", id, version}, not overrides")
	}
	snap, err := a.resolveAgent(ctx, ref)
	if err != nil {
		return err
	}
	d.AgentID, d.AgentVersion = snap.ID, snap.Version
	return nil
}

// checkDeploymentEvents checks initial events: 1 to 50 user.message,
// user.define_outcome (at most one) or system.message events whose files
// exist.
func (a *API) checkDeploymentEvents(ctx context.Context, raw jsonx.Opt[json.RawMessage]) error {
	if raw.Null {
		return apierror.Invalid("initial_events: is required and cannot be cleared")
	}
	var raws []json.RawMessage
	if err := jsonx.Decode(raw.Value, &raws, "initial_events"); err != nil {
		return err
	}
	if len(raws) == 0 {
		return apierror.Invalid("initial_events: must hold at least one event (a user.message or user.define_outcome that starts each run's work)")
	}
	events, err := eventspec.ParseList(raws, "initial_events", deploymentInitialEventTypes)
	if err != nil {
		return err
	}
	outcomes := 0
	for _, ev := range events {
		if ev.Type == eventspec.UserDefineOutcome {
			outcomes++
		}
	}
	if outcomes > 1 {
		return apierror.Invalid("initial_events: at most one user.define_outcome is allowed, got %d", outcomes)
	}
	return a.checkFileSources(ctx, events, "initial_events")
}

func (a *API) applyDeploymentBudget(ctx context.Context, d *db.Deployment, raw jsonx.Opt[json.RawMessage]) error {
	switch {
	case !raw.Set:
		return nil
	case raw.Null:
		d.BudgetMaxCents = nil
		return nil
	}
	n, err := usage.ParseBudget(raw.Value)
	if err != nil {
		return apierror.Invalid("%v", err)
	}
	ag, err := a.deps.Store.AgentGetVersion(ctx, d.AgentID, d.AgentVersion)
	if err != nil {
		return err
	}
	var spec agentspec.Spec
	if err := json.Unmarshal(ag.Spec, &spec); err != nil {
		return err
	}
	if err := a.checkBudgetable(spec.Model.ID); err != nil {
		return err
	}
	d.BudgetMaxCents = &n
	return nil
}

func applyDeploymentSchedule(d *db.Deployment, raw jsonx.Opt[json.RawMessage]) error {
	switch {
	case !raw.Set:
		return nil
	case raw.Null:
		d.Schedule = nil
		return nil
	}
	var in struct {
		Type       *string `json:"type"`
		Expression *string `json:"expression"`
		Timezone   *string `json:"timezone"`
	}
	if err := jsonx.DecodeObject(raw.Value, &in, "schedule"); err != nil {
		return err
	}
	if in.Type != nil && *in.Type != "cron" {
		return apierror.Invalid("schedule.type: must be cron, got %q", *in.Type)
	}
	if in.Expression == nil || in.Timezone == nil {
		return apierror.Invalid("schedule: expression and timezone are both required")
	}
	if _, err := deployments.ParseCron(*in.Expression); err != nil {
		return apierror.Invalid("schedule.expression: %v", err)
	}
	if _, err := deployments.LoadTimezone(*in.Timezone); err != nil {
		return apierror.Invalid("schedule.timezone: %v", err)
	}
	d.Schedule = &db.Schedule{Expression: *in.Expression, Timezone: *in.Timezone}
	return nil
}

func (a *API) deploymentJSON(c echo.Context, d *db.Deployment) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), scheduleCallTimeout)
	defer cancel()
	r, err := a.toDeploymentResponse(ctx, d)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// syncSchedule brings a changed deployment's schedule in step at once, so
// that the response shows its upcoming runs; the syncer retries when
// Temporal cannot be reached.
func (a *API) syncSchedule(ctx context.Context, d *db.Deployment) {
	if a.deps.Schedules != nil && d.ScheduleVersion > d.ScheduleSynced {
		ctx, cancel := context.WithTimeout(ctx, scheduleCallTimeout)
		defer cancel()
		a.deps.Schedules.Sync(ctx, d.ID)
	}
}

// scheduleCallTimeout bounds what a request waits for Temporal (a sync,
// the upcoming runs of a page of deployments): with Temporal down, the
// request answers without them.
const scheduleCallTimeout = 3 * time.Second

func (a *API) deploymentGet(c echo.Context) error {
	id, err := deploymentID(c)
	if err != nil {
		return err
	}
	d, err := a.deps.Store.DeploymentGet(c.Request().Context(), id)
	if err != nil {
		return deploymentError(id, err)
	}
	return a.deploymentJSON(c, d)
}

func (a *API) deploymentUpdate(c echo.Context) error {
	id, err := deploymentID(c)
	if err != nil {
		return err
	}
	var in deploymentInput
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	ctx := c.Request().Context()
	d, err := a.deps.Store.DeploymentChange(ctx, id, a.now(), func(cur *db.Deployment) (*db.Deployment, []string, error) {
		if cur.ArchivedAt != nil {
			return nil, nil, deploymentArchived(id)
		}
		next := *cur
		if err := a.applyDeploymentInput(ctx, &next, &in); err != nil {
			return nil, nil, err
		}
		return &next, []string{"deployment.updated"}, nil
	})
	if err != nil {
		return deploymentError(id, err)
	}
	a.syncSchedule(ctx, d)
	return a.deploymentJSON(c, d)
}

// deploymentTransition changes a deployment's status or archival with
// change, which returns the next state and its event (nil: unchanged).
func (a *API) deploymentTransition(c echo.Context, change func(ctx context.Context, cur *db.Deployment, now time.Time) (*db.Deployment, string, error)) error {
	id, err := deploymentID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	now := a.now()
	d, err := a.deps.Store.DeploymentChange(ctx, id, now, func(cur *db.Deployment) (*db.Deployment, []string, error) {
		next, event, err := change(ctx, cur, now)
		if err != nil || next == nil {
			return nil, nil, err
		}
		return next, []string{event}, nil
	})
	if err != nil {
		return deploymentError(id, err)
	}
	a.syncSchedule(ctx, d)
	return a.deploymentJSON(c, d)
}

func (a *API) deploymentPause(c echo.Context) error {
	return a.deploymentTransition(c, func(_ context.Context, cur *db.Deployment, _ time.Time) (*db.Deployment, string, error) {
		switch {
		case cur.ArchivedAt != nil:
			return nil, "", deploymentArchived(cur.ID)
		case cur.Status == db.DeploymentPaused:
			return nil, "", nil
		}
		next := *cur
		next.Status, next.PausedReason = db.DeploymentPaused, db.PausedReasonManual
		return &next, "deployment.paused", nil
	})
}

func (a *API) deploymentUnpause(c echo.Context) error {
	return a.deploymentTransition(c, func(ctx context.Context, cur *db.Deployment, _ time.Time) (*db.Deployment, string, error) {
		switch {
		case cur.ArchivedAt != nil:
			return nil, "", deploymentArchived(cur.ID)
		case cur.Status == db.DeploymentActive:
			return nil, "", nil
		}
		// What would fail every run is refused now rather than after the
		// next fire pauses the deployment again.
		if re, err := a.checkDeploymentRefs(ctx, cur); err != nil || re != nil {
			if re != nil {
				err = apierror.Conflictf("deployment %q cannot be unpaused: %s (%s)", cur.ID, re.Message, re.Type)
			}
			return nil, "", err
		}
		next := *cur
		next.Status, next.PausedReason = db.DeploymentActive, nil
		return &next, "deployment.unpaused", nil
	})
}

func (a *API) deploymentArchive(c echo.Context) error {
	return a.deploymentTransition(c, func(_ context.Context, cur *db.Deployment, now time.Time) (*db.Deployment, string, error) {
		if cur.ArchivedAt != nil {
			return nil, "", nil
		}
		next := *cur
		next.ArchivedAt = &now
		return &next, "deployment.archived", nil
	})
}

func (a *API) deploymentList(c echo.Context) error {
	page, after, err := parseKeysetPage(c, maxPageLimit)
	if err != nil {
		return err
	}
	p := db.DeploymentListParams{Limit: page.limit, After: after}
	if p.IncludeArchived, err = parseBoolParam(c, "include_archived"); err != nil {
		return err
	}
	if v := c.QueryParam("agent_id"); v != "" {
		p.AgentID = &v
	}
	switch v := c.QueryParam("status"); v {
	case "":
	case db.DeploymentActive, db.DeploymentPaused:
		if p.IncludeArchived {
			return apierror.Invalid("status: cannot be combined with include_archived")
		}
		p.Status = &v
	default:
		return apierror.Invalid("status: must be active or paused, got %q", v)
	}
	if p.CreatedGTE, err = parseTimeParam(c, "created_at[gte]"); err != nil {
		return err
	}
	if p.CreatedLTE, err = parseTimeParam(c, "created_at[lte]"); err != nil {
		return err
	}
	ctx := c.Request().Context()
	rows, more, err := a.deps.Store.DeploymentList(ctx, p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, scheduleCallTimeout) // only Temporal is asked from here
	defer cancel()
	resp := listResponse[*deploymentResponse]{Data: make([]*deploymentResponse, 0, len(rows))}
	for i := range rows {
		r, err := a.toDeploymentResponse(ctx, &rows[i])
		if err != nil {
			return err
		}
		resp.Data = append(resp.Data, r)
	}
	if more {
		last := rows[len(rows)-1]
		next := timeCursor(last.CreatedAt, last.ID)
		resp.NextPage = &next
	}
	return c.JSON(http.StatusOK, resp)
}
