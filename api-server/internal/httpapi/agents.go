package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// agentResponse is the wire form of an agent (one version of it).
type agentResponse struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Version int64  `json:"version"`
	agentspec.Spec
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	ArchivedAt *time.Time `json:"archived_at"`
}

func toAgentResponse(a *db.Agent) (*agentResponse, error) {
	r := &agentResponse{Type: "agent", ID: a.ID, Version: a.Version, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt, ArchivedAt: a.ArchivedAt}
	if err := json.Unmarshal(a.Spec, &r.Spec); err != nil {
		return nil, fmt.Errorf("decode stored spec of agent %s v%d: %w", a.ID, a.Version, err)
	}
	return r, nil
}

func agentNotFound(id string) error { return apierror.NotFoundf("agent %q not found", id) }

func agentID(c echo.Context) (string, error) { return pathID(c, "id", ids.Agent, agentNotFound) }

func (a *API) writeAgent(c echo.Context, status int, ag *db.Agent) error {
	r, err := toAgentResponse(ag)
	if err != nil {
		return err
	}
	return c.JSON(status, r)
}

func (a *API) agentCreate(c echo.Context) error {
	var in agentspec.Input
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	spec, err := agentspec.Create(&in)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	skills, err := a.resolveSkills(ctx, spec.Skills, "")
	if err != nil {
		return err
	}
	id := ids.New(ids.Agent)
	roster, err := a.resolveRoster(ctx, spec.Multiagent, rosterOwner{ID: id, Version: 1})
	if err != nil {
		return err
	}
	spec.Multiagent = roster.pinned(1)
	raw, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	ag, err := a.deps.Store.AgentCreate(ctx, id, raw, skillRefs(skills), a.now())
	if err != nil {
		return skillRefGone(err, "")
	}
	return a.writeAgent(c, http.StatusOK, ag)
}

func (a *API) agentGet(c echo.Context) error {
	id, err := agentID(c)
	if err != nil {
		return err
	}
	if err := checkQuery(c); err != nil {
		return err
	}
	ctx := c.Request().Context()
	var ag *db.Agent
	if v := c.QueryParam("version"); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 1 {
			return apierror.Invalid("version: must be an integer of at least 1, got %q", v)
		}
		ag, err = a.deps.Store.AgentGetVersion(ctx, id, n)
		if errors.Is(err, db.ErrNotFound) {
			if _, gerr := a.deps.Store.AgentGet(ctx, id); errors.Is(gerr, db.ErrNotFound) {
				return agentNotFound(id)
			}
			return apierror.NotFoundf("agent %q has no version %d", id, n)
		}
	} else {
		ag, err = a.deps.Store.AgentGet(ctx, id)
	}
	if err != nil {
		return notFoundAs(err, agentNotFound(id))
	}
	return a.writeAgent(c, http.StatusOK, ag)
}

func (a *API) agentUpdate(c echo.Context) error {
	id, err := agentID(c)
	if err != nil {
		return err
	}
	var in agentspec.Input
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if err := agentspec.CheckUpdate(&in); err != nil {
		return err
	}
	ctx := c.Request().Context()
	ag, err := a.deps.Store.AgentUpdate(ctx, id, a.now(), func(cur *db.Agent) (json.RawMessage, []db.SkillRef, error) {
		return a.nextAgentVersion(ctx, cur, &in)
	})
	if err != nil {
		return notFoundAs(skillRefGone(err, ""), agentNotFound(id))
	}
	return a.writeAgent(c, http.StatusOK, ag)
}

// nextAgentVersion applies an update to the agent's current version and
// returns the spec of the next one and the skills it names, or a nil spec
// when the update changes nothing.
func (a *API) nextAgentVersion(ctx context.Context, cur *db.Agent, in *agentspec.Input) (json.RawMessage, []db.SkillRef, error) {
	id := cur.ID
	if in.Version.Set && !in.Version.Null && in.Version.Value != cur.Version {
		return nil, nil, apierror.Conflictf("agent %q is at version %d, not %d; fetch it again and retry the update", id, cur.Version, in.Version.Value)
	}
	if cur.ArchivedAt != nil {
		return nil, nil, apierror.Conflictf("agent %q is archived and cannot be updated", id)
	}
	var current agentspec.Spec
	if err := json.Unmarshal(cur.Spec, &current); err != nil {
		return nil, nil, fmt.Errorf("decode stored spec of agent %s: %w", id, err)
	}
	next, err := agentspec.Update(&current, in)
	if err != nil {
		return nil, nil, err
	}
	// Compared resolved: skills naming no version (or "latest") equal
	// the current ones while no newer version was uploaded, and so do
	// roster entries naming no version.
	skills, err := a.resolveSkills(ctx, next.Skills, "")
	if err != nil {
		return nil, nil, err
	}
	var roster *resolvedRoster
	if in.Multiagent.Set {
		if roster, err = a.resolveRoster(ctx, next.Multiagent, rosterOwner{ID: id, Version: cur.Version + 1}); err != nil {
			return nil, nil, err
		}
		next.Multiagent = roster.pinned(cur.Version)
	}
	if agentspec.Equal(&current, next) {
		return nil, nil, nil // nothing changed: no new version
	}
	if roster != nil {
		next.Multiagent = roster.pinned(cur.Version + 1)
	}
	raw, err := json.Marshal(next)
	return raw, skillRefs(skills), err
}

func (a *API) agentArchive(c echo.Context) error {
	id, err := agentID(c)
	if err != nil {
		return err
	}
	if _, err := a.readJSONBody(c, true); err != nil {
		return err
	}
	ag, err := a.deps.Store.AgentArchive(c.Request().Context(), id, a.now())
	if err != nil {
		return notFoundAs(err, agentNotFound(id))
	}
	return a.writeAgent(c, http.StatusOK, ag)
}

func (a *API) agentList(c echo.Context) error {
	lp, err := listParams(c)
	if err != nil {
		return err
	}
	p := db.AgentListParams{IncludeArchived: lp.IncludeArchived, After: lp.After, Limit: lp.Limit}
	if p.CreatedGTE, err = parseTimeParam(c, "created_at[gte]"); err != nil {
		return err
	}
	if p.CreatedLTE, err = parseTimeParam(c, "created_at[lte]"); err != nil {
		return err
	}
	agents, more, err := a.deps.Store.AgentList(c.Request().Context(), p)
	if err != nil {
		return err
	}
	resp := listResponse[*agentResponse]{Data: make([]*agentResponse, 0, len(agents))}
	for i := range agents {
		r, err := toAgentResponse(&agents[i])
		if err != nil {
			return err
		}
		resp.Data = append(resp.Data, r)
	}
	if more {
		last := agents[len(agents)-1]
		next := timeCursor(last.CreatedAt, last.ID)
		resp.NextPage = &next
	}
	return c.JSON(http.StatusOK, resp)
}

func (a *API) agentVersions(c echo.Context) error {
	id, err := agentID(c)
	if err != nil {
		return err
	}
	page, err := parsePage(c, maxPageLimit)
	if err != nil {
		return err
	}
	var before *int64
	if page.cursor != "" {
		n, err := parseVersionCursor(page.cursor)
		if err != nil {
			return err
		}
		before = &n
	}
	versions, more, err := a.deps.Store.AgentVersions(c.Request().Context(), id, before, page.limit)
	if err != nil {
		return notFoundAs(err, agentNotFound(id))
	}
	resp := listResponse[*agentResponse]{Data: make([]*agentResponse, 0, len(versions))}
	for i := range versions {
		r, err := toAgentResponse(&versions[i])
		if err != nil {
			return err
		}
		resp.Data = append(resp.Data, r)
	}
	if more {
		next := versionCursor(versions[len(versions)-1].Version)
		resp.NextPage = &next
	}
	return c.JSON(http.StatusOK, resp)
}
