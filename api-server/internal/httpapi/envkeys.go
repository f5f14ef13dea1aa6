package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/envkeys"
	"github.com/mangohq/mango/db"
)

// environmentKeyResponse is the wire form of an environment key; Key, the
// secret, is present only in the response that created it.
type environmentKeyResponse struct {
	Type          string     `json:"type"`
	ID            string     `json:"id"`
	EnvironmentID string     `json:"environment_id"`
	Name          string     `json:"name"`
	Key           string     `json:"key,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	ExpiresAt     *time.Time `json:"expires_at"`
	RevokedAt     *time.Time `json:"revoked_at"`
	LastUsedAt    *time.Time `json:"last_used_at"`
}

func toEnvironmentKeyResponse(k *db.EnvironmentKey, secret string) *environmentKeyResponse {
	return &environmentKeyResponse{Type: "environment_key", ID: k.ID, EnvironmentID: k.EnvironmentID, Name: k.Name, Key: secret,
		CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt, LastUsedAt: k.LastUsedAt}
}

// adminEnvironmentKeyCreate answers POST /admin/environments/{id}/keys
// {name?, expires_in_seconds?}: the key, with its secret shown once.
func (a *API) adminEnvironmentKeyCreate(c echo.Context) error {
	var in struct {
		Name             *string `json:"name"`
		ExpiresInSeconds *int64  `json:"expires_in_seconds"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	var name string
	if in.Name != nil {
		name = *in.Name
	}
	var expiresIn time.Duration
	if in.ExpiresInSeconds != nil {
		if *in.ExpiresInSeconds < 1 || *in.ExpiresInSeconds > int64(envkeys.MaxExpiresIn/time.Second) {
			return apierror.Invalid("expires_in_seconds: must be between 1 and %d, got %d", int64(envkeys.MaxExpiresIn/time.Second), *in.ExpiresInSeconds)
		}
		expiresIn = time.Duration(*in.ExpiresInSeconds) * time.Second
	}
	k, secret, err := envkeys.Create(c.Request().Context(), a.deps.Store, c.Param("id"), name, expiresIn, a.now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toEnvironmentKeyResponse(k, secret))
}

// adminEnvironmentKeyList answers GET /admin/environments/{id}/keys.
func (a *API) adminEnvironmentKeyList(c echo.Context) error {
	keys, err := envkeys.List(c.Request().Context(), a.deps.Store, c.Param("id"))
	if err != nil {
		return err
	}
	out := make([]*environmentKeyResponse, 0, len(keys))
	for i := range keys {
		out = append(out, toEnvironmentKeyResponse(&keys[i], ""))
	}
	return c.JSON(http.StatusOK, map[string]any{"data": out})
}

// adminEnvironmentKeyRevoke answers POST /admin/environment-keys/{id}/revoke.
func (a *API) adminEnvironmentKeyRevoke(c echo.Context) error {
	if _, err := a.readJSONBody(c, true); err != nil {
		return err
	}
	k, err := envkeys.Revoke(c.Request().Context(), a.deps.Store, c.Param("id"), a.now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toEnvironmentKeyResponse(k, ""))
}
