package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/envspec"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// environmentResponse is the wire form of an environment.
type environmentResponse struct {
	Type        string            `json:"type"`
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Config      json.RawMessage   `json:"config"`
	Metadata    map[string]string `json:"metadata"`
	Scope       string            `json:"scope"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	ArchivedAt  *time.Time        `json:"archived_at"`
}

func toEnvironmentResponse(e *db.Environment) *environmentResponse {
	return &environmentResponse{Type: "environment", ID: e.ID, Name: e.Name, Description: e.Description,
		Config: e.Config, Metadata: orEmpty(e.Metadata), Scope: e.Scope, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, ArchivedAt: e.ArchivedAt}
}

func environmentNotFound(id string) error { return apierror.NotFoundf("environment %q not found", id) }

func environmentID(c echo.Context) (string, error) {
	return pathID(c, "id", ids.Environment, environmentNotFound)
}

func nameTaken(name string) error {
	return apierror.Conflictf("an environment named %q already exists", name)
}

// isSelfHosted reports whether the environment's config.type is
// self_hosted: its sessions' built-in tools run on the client's worker.
func isSelfHosted(e *db.Environment) bool {
	var cfg struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(e.Config, &cfg) == nil && cfg.Type == envspec.SelfHosted
}

func specOf(e *db.Environment) (*envspec.Spec, error) {
	s := &envspec.Spec{Name: e.Name, Description: e.Description, Scope: e.Scope, Metadata: e.Metadata}
	if err := json.Unmarshal(e.Config, &s.Config); err != nil {
		return nil, fmt.Errorf("decode stored config of environment %s: %w", e.ID, err)
	}
	return s, nil
}

func (a *API) environmentCreate(c echo.Context) error {
	var in envspec.Input
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	spec, err := envspec.Create(&in)
	if err != nil {
		return err
	}
	cfg, err := json.Marshal(spec.Config)
	if err != nil {
		return err
	}
	now := a.now()
	env, err := a.deps.Store.EnvironmentCreate(c.Request().Context(), &db.Environment{
		ID: ids.New(ids.Environment), Name: spec.Name, Description: spec.Description, Config: cfg,
		Metadata: spec.Metadata, Scope: spec.Scope, CreatedAt: now, UpdatedAt: now,
	})
	if errors.Is(err, db.ErrConflict) {
		return nameTaken(spec.Name)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toEnvironmentResponse(env))
}

func (a *API) environmentGet(c echo.Context) error {
	id, err := environmentID(c)
	if err != nil {
		return err
	}
	env, err := a.deps.Store.EnvironmentGet(c.Request().Context(), id)
	if err != nil {
		return notFoundAs(err, environmentNotFound(id))
	}
	return c.JSON(http.StatusOK, toEnvironmentResponse(env))
}

func (a *API) environmentUpdate(c echo.Context) error {
	id, err := environmentID(c)
	if err != nil {
		return err
	}
	var in envspec.Input
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	var newName string
	env, err := a.deps.Store.EnvironmentUpdate(c.Request().Context(), id, func(cur *db.Environment) (*db.Environment, error) {
		if cur.ArchivedAt != nil {
			return nil, apierror.Conflictf("environment %q is archived and cannot be updated", id)
		}
		current, err := specOf(cur)
		if err != nil {
			return nil, err
		}
		next, err := envspec.Update(current, &in)
		if err != nil {
			return nil, err
		}
		if (current.Config.Type == envspec.SelfHosted) != (next.Config.Type == envspec.SelfHosted) {
			return nil, apierror.Invalid("config.type: an environment cannot change between cloud and self_hosted (environment %q is %s); create a new environment instead",
				id, current.Config.Type)
		}
		cfg, err := json.Marshal(next.Config)
		if err != nil {
			return nil, err
		}
		newName = next.Name
		out := *cur
		out.Name, out.Description, out.Config, out.Metadata, out.Scope = next.Name, next.Description, cfg, next.Metadata, next.Scope
		out.UpdatedAt = a.now()
		return &out, nil
	})
	switch {
	case errors.Is(err, db.ErrNotFound):
		return environmentNotFound(id)
	case errors.Is(err, db.ErrConflict):
		return nameTaken(newName)
	case err != nil:
		return err
	}
	return c.JSON(http.StatusOK, toEnvironmentResponse(env))
}

func (a *API) environmentArchive(c echo.Context) error {
	id, err := environmentID(c)
	if err != nil {
		return err
	}
	if _, err := a.readJSONBody(c, true); err != nil {
		return err
	}
	env, err := a.deps.Store.EnvironmentArchive(c.Request().Context(), id, a.now())
	if err != nil {
		return notFoundAs(err, environmentNotFound(id))
	}
	return c.JSON(http.StatusOK, toEnvironmentResponse(env))
}

func (a *API) environmentDelete(c echo.Context) error {
	id, err := environmentID(c)
	if err != nil {
		return err
	}
	err = a.deps.Store.EnvironmentDelete(c.Request().Context(), id)
	if err != nil {
		return notFoundAs(err, environmentNotFound(id))
	}
	return c.JSON(http.StatusOK, map[string]string{"id": id, "type": "environment_deleted"})
}

func (a *API) environmentList(c echo.Context) error {
	p, err := listParams(c)
	if err != nil {
		return err
	}
	envs, more, err := a.deps.Store.EnvironmentList(c.Request().Context(), db.EnvironmentListParams(p))
	if err != nil {
		return err
	}
	return writeList(c, envs, more, func(e db.Environment) *environmentResponse { return toEnvironmentResponse(&e) },
		func(e db.Environment) string { return timeCursor(e.CreatedAt, e.ID) })
}
