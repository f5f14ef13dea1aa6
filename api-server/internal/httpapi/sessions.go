package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/envspec"
	"github.com/mangohq/mango/api-server/internal/eventspec"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/api-server/internal/usage"
	"github.com/mangohq/mango/db"
)

// SandboxMetadataKey is the environment metadata key that selects the
// sandbox provider of sessions created in it.
const SandboxMetadataKey = "mango.sandbox"

// sessionResponse is the wire form of a session.
type sessionResponse struct {
	Type               string              `json:"type"`
	ID                 string              `json:"id"`
	Agent              json.RawMessage     `json:"agent"`
	EnvironmentID      *string             `json:"environment_id"`
	Title              string              `json:"title"`
	Metadata           map[string]string   `json:"metadata"`
	Status             db.Status           `json:"status"`
	Usage              usage.Usage         `json:"usage"`
	Stats              usage.Stats         `json:"stats"`
	Resources          []*resourceResponse `json:"resources"`
	VaultIDs           []string            `json:"vault_ids"`
	OutcomeEvaluations []outcomeEvaluation `json:"outcome_evaluations"`
	Budget             *usage.Budget       `json:"budget"`
	DeploymentID       *string             `json:"deployment_id"`
	CreatedAt          time.Time           `json:"created_at"`
	UpdatedAt          time.Time           `json:"updated_at"`
	ArchivedAt         *time.Time          `json:"archived_at"`
}

// outcomeEvaluation is the wire form of an outcome of a session
// (BetaManagedAgentsOutcomeEvaluationResource).
type outcomeEvaluation struct {
	Type        string     `json:"type"`
	OutcomeID   string     `json:"outcome_id"`
	Description string     `json:"description"`
	Result      string     `json:"result"`
	Explanation string     `json:"explanation"`
	Iteration   int        `json:"iteration"`
	CompletedAt *time.Time `json:"completed_at"`
}

func toOutcomeEvaluations(outcomes []*db.Outcome) []outcomeEvaluation {
	out := make([]outcomeEvaluation, 0, len(outcomes))
	for _, o := range outcomes {
		out = append(out, outcomeEvaluation{Type: "outcome_evaluation", OutcomeID: o.ID, Description: o.Description,
			Result: o.Result, Explanation: o.Explanation, Iteration: o.Iteration, CompletedAt: o.CompletedAt})
	}
	return out
}

// sessionExtras are what a session's wire form shows besides its row, by
// session.
type sessionExtras struct {
	resources map[string][]*db.Resource
	outcomes  map[string][]*db.Outcome
}

// loadSessionExtras loads the resources and outcomes of the sessions.
func (a *API) loadSessionExtras(ctx context.Context, sids []string) (*sessionExtras, error) {
	rs, err := a.deps.Store.ResourcesOfSessions(ctx, sids)
	if err != nil {
		return nil, err
	}
	os, err := a.deps.Store.OutcomesOfSessions(ctx, sids)
	if err != nil {
		return nil, err
	}
	return &sessionExtras{resources: rs, outcomes: os}, nil
}

// sessionJSON answers with a session's wire form (its resources and
// outcomes loaded).
func (a *API) sessionJSON(c echo.Context, s *db.Session) error {
	x, err := a.loadSessionExtras(c.Request().Context(), []string{s.ID})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a.toSessionResponse(s, x))
}

func (a *API) toSessionResponse(s *db.Session, x *sessionExtras) *sessionResponse {
	now := a.now()
	return &sessionResponse{Type: "session", ID: s.ID, Agent: s.Agent, EnvironmentID: s.EnvironmentID, Title: s.Title,
		Metadata: orEmpty(s.Metadata), Status: s.Status, Usage: usage.Of(s, now), Stats: usage.StatsOf(s, now), Budget: usage.BudgetOf(s),
		Resources: toResourceResponses(x.resources[s.ID], s.SelfHosted), VaultIDs: vaultIDsOf(s),
		OutcomeEvaluations: toOutcomeEvaluations(x.outcomes[s.ID]), DeploymentID: s.DeploymentID,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, ArchivedAt: s.ArchivedAt}
}

func vaultIDsOf(s *db.Session) []string {
	if s.VaultIDs == nil {
		return []string{}
	}
	return s.VaultIDs
}

func sessionNotFound(id string) error { return apierror.NotFoundf("session %q not found", id) }

func sessionID(c echo.Context) (string, error) { return pathID(c, "id", ids.Session, sessionNotFound) }

// sessionError maps store errors of session operations to public errors.
func sessionError(id string, err error) error {
	switch {
	case errors.Is(err, db.ErrNotFound), errors.Is(err, db.ErrDeleting):
		return sessionNotFound(id)
	case errors.Is(err, db.ErrInvalidTransition):
		return apierror.Conflictf("session %q cannot accept this now: %v", id, errors.Unwrap(err))
	}
	return err
}

type sessionCreateInput struct {
	Agent         json.RawMessage            `json:"agent"`
	EnvironmentID *string                    `json:"environment_id"`
	Title         *string                    `json:"title"`
	Metadata      map[string]*string         `json:"metadata"`
	InitialEvents []json.RawMessage          `json:"initial_events"`
	VaultIDs      []string                   `json:"vault_ids"`
	Resources     jsonx.Opt[json.RawMessage] `json:"resources"`
	Budget        jsonx.Opt[json.RawMessage] `json:"budget"`
}

func (a *API) sessionCreate(c echo.Context) error {
	var in sessionCreateInput
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if len(in.Agent) == 0 || string(in.Agent) == "null" {
		return apierror.Invalid("agent: is required")
	}
	ref, err := agentspec.ParseAgentRef(in.Agent)
	if err != nil {
		return err
	}
	if in.EnvironmentID == nil || *in.EnvironmentID == "" {
		return apierror.Invalid("environment_id: is required")
	}
	var resources []db.ResourceCreate
	if in.Resources.Set && !in.Resources.Null {
		if resources, err = a.parseResources(c.Request().Context(), in.Resources.Value, "resources"); err != nil {
			return err
		}
	}
	var budget *int64
	if in.Budget.Set && !in.Budget.Null {
		n, err := usage.ParseBudget(in.Budget.Value)
		if err != nil {
			return apierror.Invalid("%v", err)
		}
		budget = &n
	}
	title := ""
	if in.Title != nil {
		if len([]rune(*in.Title)) > 512 {
			return apierror.Invalid("title: must be at most 512 characters")
		}
		title = *in.Title
	}
	metadata, err := agentspec.PatchMetadata(nil, in.Metadata, false)
	if err != nil {
		return err
	}
	initial, err := eventspec.ParseList(in.InitialEvents, "initial_events", []string{eventspec.UserMessage, eventspec.UserDefineOutcome})
	if err != nil {
		return err
	}
	if err := a.checkFileSources(c.Request().Context(), initial, "initial_events"); err != nil {
		return err
	}

	sess, err := a.createSession(c.Request().Context(), &newSession{ID: ids.New(ids.Session), Ref: ref, EnvironmentID: *in.EnvironmentID,
		Resources: resources, Budget: budget, Title: title, Metadata: metadata, Initial: initial, VaultIDs: in.VaultIDs})
	if err != nil {
		return err
	}
	return a.sessionJSON(c, sess)
}

// newSession is a session to create: the request's parts, checked.
type newSession struct {
	ID            string
	Ref           *agentspec.AgentRef
	EnvironmentID string
	Resources     []db.ResourceCreate
	Budget        *int64
	Title         string
	Metadata      map[string]string
	Initial       []eventspec.Event
	VaultIDs      []string
	// DreamID is the dream the session runs, if any (dreams.go).
	DreamID *string
	// Run is the deployment run that creates the session, if any
	// (deployments_run.go).
	Run *db.DeploymentRun
}

// createSession resolves a session's agent, environment and vaults and
// stores it with its initial events.
func (a *API) createSession(ctx context.Context, n *newSession) (*db.Session, error) {
	snapshot, err := a.resolveAgent(ctx, n.Ref)
	if err != nil {
		return nil, err
	}
	// The agent version's skills are resolved already; overrides' are
	// resolved here. Either way each becomes a skill resource.
	skills, err := a.resolveSkills(ctx, snapshot.Skills, "agent.")
	if err != nil {
		return nil, err
	}
	if n.Budget != nil {
		if err := a.checkBudgetable(snapshot.Model.ID); err != nil {
			return nil, err
		}
	}
	if err := a.sessionRoster(ctx, snapshot); err != nil {
		return nil, err
	}
	env, provider, err := a.environmentProvider(ctx, n.EnvironmentID)
	if err != nil {
		return nil, err
	}
	if err := a.checkSessionEnvironment(ctx, env, provider, n.Resources); err != nil {
		return nil, err
	}
	vaultIDs, err := a.checkSessionVaults(ctx, n.VaultIDs, provider, "vault_ids")
	if err != nil {
		return nil, err
	}
	agentJSON, err := json.Marshal(snapshot)
	if err != nil {
		return nil, err
	}
	now := a.now()
	envID := n.EnvironmentID
	p := db.SessionCreateParams{ID: n.ID, AgentID: snapshot.ID, AgentVersion: snapshot.Version, Agent: agentJSON,
		EnvironmentID: &envID, Provider: provider, Title: n.Title, Metadata: n.Metadata, Now: now, BudgetMaxCents: n.Budget,
		Resources: n.Resources, Skills: sessionSkills(skills), VaultIDs: vaultIDs, SelfHosted: isSelfHosted(env), DreamID: n.DreamID, Run: n.Run}
	var req *db.AppendRequest
	if len(n.Initial) > 0 {
		req = a.admission(n.Initial, now)
	}
	sess, appended, err := a.deps.Store.SessionCreate(ctx, p, req)
	if errors.Is(err, db.ErrNotFound) && len(n.Resources) > 0 {
		return nil, apierror.Invalid("resources: a file named by resources was deleted while the session was being created")
	}
	if err != nil {
		return nil, err
	}
	a.afterAppend(ctx, sess.ID, appended, req)
	return sess, nil
}

func (a *API) resolveAgent(ctx context.Context, ref *agentspec.AgentRef) (*agentspec.Snapshot, error) {
	if !ids.Valid(ids.Agent, ref.ID) {
		return nil, agentNotFound(ref.ID)
	}
	var ag *db.Agent
	var err error
	if ref.Version > 0 {
		ag, err = a.deps.Store.AgentGetVersion(ctx, ref.ID, ref.Version)
	} else {
		ag, err = a.deps.Store.AgentGet(ctx, ref.ID)
	}
	if errors.Is(err, db.ErrNotFound) {
		if ref.Version > 0 {
			return nil, apierror.NotFoundf("agent %q has no version %d", ref.ID, ref.Version)
		}
		return nil, agentNotFound(ref.ID)
	}
	if err != nil {
		return nil, err
	}
	if ag.ArchivedAt != nil {
		return nil, apierror.Invalid("agent: agent %q is archived", ref.ID)
	}
	var spec agentspec.Spec
	if err := json.Unmarshal(ag.Spec, &spec); err != nil {
		return nil, fmt.Errorf("decode agent %s: %w", ag.ID, err)
	}
	return ref.Resolve(ag.ID, ag.Version, &spec)
}

// environmentProvider loads and checks the environment, and returns it
// with the sandbox provider its sessions use: metadata["mango.sandbox"]
// or the default.
func (a *API) environmentProvider(ctx context.Context, envID string) (*db.Environment, string, error) {
	if !ids.Valid(ids.Environment, envID) {
		return nil, "", environmentNotFound(envID)
	}
	env, err := a.deps.Store.EnvironmentGet(ctx, envID)
	if errors.Is(err, db.ErrNotFound) {
		return nil, "", environmentNotFound(envID)
	}
	if err != nil {
		return nil, "", err
	}
	if env.ArchivedAt != nil {
		return nil, "", apierror.Invalid("environment_id: environment %q is archived", envID)
	}
	providers := a.deps.Providers
	if len(providers) == 0 {
		providers = []string{"local"}
	}
	name, ok := env.Metadata[SandboxMetadataKey]
	if !ok {
		return env, providers[0], nil
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if !slices.Contains(providers, name) {
		return nil, "", apierror.Invalid("environment_id: environment %q selects sandbox provider %q through metadata[%q], which is not enabled on this server (enabled: %s)",
			envID, name, SandboxMetadataKey, strings.Join(providers, ", "))
	}
	return env, name, nil
}

// Capabilities a provider's workers report and sessions may need.
const (
	// CapabilityLimitedNetworking: the provider enforces an environment's
	// limited networking.
	CapabilityLimitedNetworking = "limited_networking"
	// CapabilityPackages: the provider installs an environment's packages.
	CapabilityPackages = "packages"
)

// checkSessionEnvironment checks that a new session's environment can
// run it: checkEnvironmentSupport, its memory stores' folders when it is
// self-hosted, checkLiveWorker.
func (a *API) checkSessionEnvironment(ctx context.Context, env *db.Environment, provider string, resources []db.ResourceCreate) error {
	if err := a.checkEnvironmentSupport(ctx, env, provider); err != nil {
		return err
	}
	if isSelfHosted(env) {
		if err := checkSelfHostedMemoryFolders(nil, resources, "resources"); err != nil {
			return err
		}
	}
	return a.checkLiveWorker(ctx, provider)
}

// checkEnvironmentSupport refuses (422) a session whose environment asks
// for what no live worker of its provider can do: limited networking
// without egress control, or packages without package installation. The
// environment would otherwise be accepted and silently not applied.
func (a *API) checkEnvironmentSupport(ctx context.Context, env *db.Environment, provider string) error {
	var cfg envspec.Config
	if json.Unmarshal(env.Config, &cfg) != nil {
		return nil
	}
	type need struct{ capability, what, cannot, instead string }
	var needs []need
	if cfg.Networking != nil && cfg.Networking.Type == "limited" {
		needs = append(needs, need{CapabilityLimitedNetworking, "limits networking", "cannot enforce egress rules",
			"use an environment with unrestricted networking or a provider with egress control"})
	}
	if cfg.Packages != nil && cfg.Packages.Count() > 0 {
		needs = append(needs, need{CapabilityPackages, "lists packages", "does not install packages",
			"use an environment without packages or a provider that installs them"})
	}
	for _, n := range needs {
		ok, err := a.deps.Store.ProviderHasCapability(ctx, provider, n.capability, a.now().Add(-LiveWorkerWindow))
		if err != nil {
			return err
		}
		if !ok {
			return &apierror.Error{Status: http.StatusUnprocessableEntity, Type: apierror.InvalidRequest,
				Message: fmt.Sprintf("environment %q %s, but the %s sandbox provider %s (no live worker of it reports %s); %s",
					env.ID, n.what, provider, n.cannot, n.capability, n.instead)}
		}
	}
	return nil
}

func (a *API) sessionGet(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	s, err := a.deps.Store.SessionGet(c.Request().Context(), id)
	if err != nil {
		return sessionError(id, err)
	}
	return a.sessionJSON(c, s)
}

func (a *API) sessionUpdate(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	var in struct {
		Title    jsonx.Opt[string]             `json:"title"`
		Metadata jsonx.Opt[map[string]*string] `json:"metadata"`
		Agent    jsonx.Opt[json.RawMessage]    `json:"agent"`
		Budget   jsonx.Opt[json.RawMessage]    `json:"budget"`
		VaultIDs jsonx.Opt[[]string]           `json:"vault_ids"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	var budget *int64
	if in.Budget.Set && !in.Budget.Null {
		n, err := usage.ParseBudget(in.Budget.Value)
		if err != nil {
			return apierror.Invalid("%v", err)
		}
		budget = &n
	}
	var vaultIDs []string
	if in.VaultIDs.Set {
		cur, err := a.deps.Store.SessionGet(c.Request().Context(), id)
		if err != nil {
			return sessionError(id, err)
		}
		if vaultIDs, err = a.checkSessionVaults(c.Request().Context(), in.VaultIDs.Value, cur.Provider, "vault_ids"); err != nil {
			return err
		}
	}
	if in.Title.Set && len([]rune(in.Title.Value)) > 512 {
		return apierror.Invalid("title: must be at most 512 characters")
	}
	s, err := a.deps.Store.SessionUpdate(c.Request().Context(), id, a.now(), func(cur *db.Session) (*db.Session, error) {
		next := *cur
		if in.Title.Set {
			next.Title = in.Title.Value
		}
		if in.Metadata.Set {
			md, err := agentspec.PatchMetadata(cur.Metadata, in.Metadata.Value, in.Metadata.Null)
			if err != nil {
				return nil, err
			}
			next.Metadata = md
		}
		if in.Agent.Set && !in.Agent.Null {
			if cur.Status != db.StatusIdle {
				return nil, apierror.Conflictf("session %q is %s: its agent's tools and MCP servers can change only while it is idle", id, cur.Status)
			}
			var snap agentspec.Snapshot
			if err := json.Unmarshal(cur.Agent, &snap); err != nil {
				return nil, fmt.Errorf("decode agent of session %s: %w", id, err)
			}
			updated, err := snap.UpdateTools(in.Agent.Value)
			if err != nil {
				return nil, err
			}
			agentJSON, err := json.Marshal(updated)
			if err != nil {
				return nil, err
			}
			next.Agent = agentJSON
		}
		if vaultIDs != nil {
			next.VaultIDs = vaultIDs
		}
		if in.Budget.Set {
			if err := a.updateBudget(&next, budget); err != nil {
				return nil, err
			}
		}
		return &next, nil
	})
	if err != nil {
		return sessionError(id, err)
	}
	return a.sessionJSON(c, s)
}

func (a *API) sessionArchive(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	if _, err := a.readJSONBody(c, true); err != nil {
		return err
	}
	s, err := a.deps.Store.SessionArchive(c.Request().Context(), id, a.now())
	if err != nil {
		return sessionError(id, err)
	}
	return a.sessionJSON(c, s)
}

// SessionCleanup releases what a session holds outside PostgreSQL before
// its row is deleted (its workflow, its sandbox binding). It must be
// idempotent: a deletion interrupted after the fence is resumed by calling
// DELETE again.
type SessionCleanup func(ctx context.Context, s *db.Session) error

func (a *API) sessionDelete(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	// Fence first: from this commit on nothing is admitted, reads answer
	// 404 and open streams end with session.deleted.
	s, _, err := a.deps.Store.SessionFence(ctx, id, a.now())
	if err != nil {
		return sessionError(id, err)
	}
	if a.deps.Cleanup != nil {
		if err := a.deps.Cleanup(ctx, s); err != nil {
			return fmt.Errorf("clean up session %s: %w", id, err)
		}
	}
	// A worker finishes the deletion (the fence commit wrote the outbox
	// row): it stops the session's workflow, tears the sandbox down if
	// there is one, removes the binding and deletes the row, retrying until
	// it succeeds, even across worker restarts.
	if a.deps.Wake != nil {
		a.deps.Wake(context.WithoutCancel(ctx), id)
	}
	return c.JSON(http.StatusOK, map[string]string{"id": id, "type": "session_deleted"})
}

func (a *API) sessionList(c echo.Context) error {
	page, err := parsePage(c, maxPageLimit)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	p := db.SessionListParams{Limit: page.limit}
	if p.IncludeArchived, err = parseBoolParam(c, "include_archived"); err != nil {
		return err
	}
	if v := c.QueryParam("agent_id"); v != "" {
		p.AgentID = &v
	}
	if v := c.QueryParam("deployment_id"); v != "" {
		p.DeploymentID = &v
	}
	if v := c.QueryParam("agent_version"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return apierror.Invalid("agent_version: must be an integer of at least 1, got %q", v)
		}
		p.AgentVersion = &n
	}
	for _, st := range append(q["statuses[]"], q["statuses"]...) {
		switch db.Status(st) {
		case db.StatusIdle, db.StatusRunning, db.StatusRescheduling, db.StatusTerminated:
			p.Statuses = append(p.Statuses, st)
		default:
			return apierror.Invalid("statuses[]: unknown status %q (expected idle, running, rescheduling or terminated)", st)
		}
	}
	if p.CreatedGT, p.CreatedGTE, p.CreatedLT, p.CreatedLTE, err = parseCreatedRange(c); err != nil {
		return err
	}
	switch order := c.QueryParam("order"); order {
	case "", "desc":
	case "asc":
		p.Ascending = true
	default:
		return apierror.Invalid("order: must be asc or desc, got %q", order)
	}
	backward := false
	hadCursor := page.cursor != ""
	if hadCursor {
		dir, t, id, err := parseSessionCursor(page.cursor)
		if err != nil {
			return err
		}
		cur := &db.Cursor{CreatedAt: t, ID: id}
		backward = dir == "p"
		// Forward in list order is "older" for desc and "newer" for asc.
		if backward == p.Ascending {
			p.Before = cur
		} else {
			p.After = cur
		}
		if backward {
			p.Ascending = !p.Ascending
		}
	}
	rows, more, err := a.deps.Store.SessionList(c.Request().Context(), p)
	if err != nil {
		return err
	}
	if backward {
		slices.Reverse(rows)
	}
	resp := struct {
		Data     []*sessionResponse `json:"data"`
		NextPage *string            `json:"next_page"`
		PrevPage *string            `json:"prev_page"`
	}{Data: make([]*sessionResponse, 0, len(rows))}
	sids := make([]string, 0, len(rows))
	for i := range rows {
		sids = append(sids, rows[i].ID)
	}
	x, err := a.loadSessionExtras(c.Request().Context(), sids)
	if err != nil {
		return err
	}
	for i := range rows {
		resp.Data = append(resp.Data, a.toSessionResponse(&rows[i], x))
	}
	if len(rows) > 0 {
		hasNext := (!backward && more) || (backward && hadCursor)
		hasPrev := (backward && more) || (!backward && hadCursor)
		if hasNext {
			n := sessionCursor("n", rows[len(rows)-1].CreatedAt, rows[len(rows)-1].ID)
			resp.NextPage = &n
		}
		if hasPrev {
			pv := sessionCursor("p", rows[0].CreatedAt, rows[0].ID)
			resp.PrevPage = &pv
		}
	}
	return c.JSON(http.StatusOK, resp)
}

// modelNotBudgetable is the reason a budget is refused for a session whose
// model has no list price.
const modelNotBudgetable = "model_not_budgetable"

// checkBudgetable refuses a budget for a session whose model has no list
// price in the price table: its cost could not be measured.
func (a *API) checkBudgetable(id string) error {
	if !a.deps.Prices.Priced(id) {
		return apierror.Invalid("budget: %s: model %q has no list price on this server, so a budget cannot be enforced (see MANGO_MODEL_PRICES)",
			modelNotBudgetable, id)
	}
	return nil
}

// updateBudget applies a Sessions.Update budget (nil: remove it) to next,
// with the refusals of the public API.
func (a *API) updateBudget(next *db.Session, maxCents *int64) error {
	if next.Status == db.StatusTerminated {
		return apierror.Conflictf("session %q is terminated: its budget cannot change", next.ID)
	}
	if maxCents != nil {
		var snap agentspec.Snapshot
		if err := json.Unmarshal(next.Agent, &snap); err != nil {
			return fmt.Errorf("decode agent of session %s: %w", next.ID, err)
		}
		if err := a.checkBudgetable(snap.Model.ID); err != nil {
			return err
		}
		if next.Usage.Unpriced && next.BudgetMaxCents != nil {
			// A worker ran a model without a price (MANGO_MODEL_ID): no
			// budget can measure this session any more; only removing it
			// lets the session continue.
			return apierror.Invalid("budget: %s: the session's usage includes a model with no list price on this server, so no budget can be enforced; remove the budget (null) to continue",
				modelNotBudgetable)
		}
	}
	switch err := db.CheckBudgetUpdate(next, maxCents); {
	case errors.Is(err, db.ErrBudgetCreateOnly):
		return apierror.Invalid("budget: budget_create_only: session %q has no budget; a budget can only be set when a session is created, and a removed one cannot be added back", next.ID)
	case errors.Is(err, db.ErrBudgetNotRaised):
		return apierror.Invalid("budget: budget_not_raised: the new max_list_cost must be above the session's consumed list cost (%s cents)",
			strconv.FormatInt(next.Usage.ListCostCents(), 10))
	case err != nil:
		return err
	}
	return nil
}
