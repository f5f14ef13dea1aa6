package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/credspec"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/db"
)

// vaultResponse is the wire form of a vault.
type vaultResponse struct {
	Type        string            `json:"type"`
	ID          string            `json:"id"`
	DisplayName string            `json:"display_name"`
	Metadata    map[string]string `json:"metadata"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	ArchivedAt  *time.Time        `json:"archived_at"`
}

func toVaultResponse(v *db.Vault) *vaultResponse {
	return &vaultResponse{Type: "vault", ID: v.ID, DisplayName: v.DisplayName, Metadata: orEmpty(v.Metadata),
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, ArchivedAt: v.ArchivedAt}
}

func orEmpty(md map[string]string) map[string]string {
	if md == nil {
		return map[string]string{}
	}
	return md
}

func vaultNotFound(id string) error { return apierror.NotFoundf("vault %q not found", id) }

func vaultID(c echo.Context) (string, error) { return pathID(c, "id", ids.Vault, vaultNotFound) }

func checkDisplayName(p, v string) error {
	return agentspec.CheckLen(p, v, 1, 255)
}

func (a *API) vaultCreate(c echo.Context) error {
	var in struct {
		DisplayName *string            `json:"display_name"`
		Metadata    map[string]*string `json:"metadata"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if in.DisplayName == nil {
		return apierror.Invalid("display_name: is required")
	}
	if err := checkDisplayName("display_name", *in.DisplayName); err != nil {
		return err
	}
	md, err := agentspec.PatchMetadata(nil, in.Metadata, false)
	if err != nil {
		return err
	}
	now := a.now()
	v, err := a.deps.Store.VaultCreate(c.Request().Context(), &db.Vault{ID: ids.New(ids.Vault), DisplayName: *in.DisplayName, Metadata: md,
		CreatedAt: now, UpdatedAt: now})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toVaultResponse(v))
}

func (a *API) vaultGet(c echo.Context) error {
	id, err := vaultID(c)
	if err != nil {
		return err
	}
	v, err := a.deps.Store.VaultGet(c.Request().Context(), id)
	if err != nil {
		return notFoundAs(err, vaultNotFound(id))
	}
	return c.JSON(http.StatusOK, toVaultResponse(v))
}

func (a *API) vaultUpdate(c echo.Context) error {
	id, err := vaultID(c)
	if err != nil {
		return err
	}
	var in struct {
		DisplayName jsonx.Opt[string]             `json:"display_name"`
		Metadata    jsonx.Opt[map[string]*string] `json:"metadata"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if in.DisplayName.Set && !in.DisplayName.Null {
		if err := checkDisplayName("display_name", in.DisplayName.Value); err != nil {
			return err
		}
	}
	v, err := a.deps.Store.VaultUpdate(c.Request().Context(), id, func(cur *db.Vault) (*db.Vault, error) {
		if cur.ArchivedAt != nil {
			return nil, apierror.Conflictf("vault %q is archived and cannot be updated", id)
		}
		next := *cur
		if in.DisplayName.Set && !in.DisplayName.Null {
			next.DisplayName = in.DisplayName.Value
		}
		if in.Metadata.Set {
			md, err := agentspec.PatchMetadata(cur.Metadata, in.Metadata.Value, in.Metadata.Null)
			if err != nil {
				return nil, err
			}
			next.Metadata = md
		}
		next.UpdatedAt = a.now()
		return &next, nil
	})
	if err != nil {
		return notFoundAs(err, vaultNotFound(id))
	}
	return c.JSON(http.StatusOK, toVaultResponse(v))
}

func (a *API) vaultArchive(c echo.Context) error {
	id, err := vaultID(c)
	if err != nil {
		return err
	}
	if _, err := a.readJSONBody(c, true); err != nil {
		return err
	}
	v, err := a.deps.Store.VaultArchive(c.Request().Context(), id, a.now())
	if err != nil {
		return notFoundAs(err, vaultNotFound(id))
	}
	return c.JSON(http.StatusOK, toVaultResponse(v))
}

func (a *API) vaultDelete(c echo.Context) error {
	id, err := vaultID(c)
	if err != nil {
		return err
	}
	err = a.deps.Store.VaultDelete(c.Request().Context(), id)
	if err != nil {
		return notFoundAs(err, vaultNotFound(id))
	}
	return c.JSON(http.StatusOK, map[string]string{"id": id, "type": "vault_deleted"})
}

// listParams reads the paging and include_archived parameters of a list.
func listParams(c echo.Context) (db.ListParams, error) {
	page, err := parsePage(c, maxPageLimit)
	if err != nil {
		return db.ListParams{}, err
	}
	p := db.ListParams{Limit: page.limit}
	if p.IncludeArchived, err = parseBoolParam(c, "include_archived"); err != nil {
		return p, err
	}
	p.After, err = pageAfter(page.cursor)
	return p, err
}

func (a *API) vaultList(c echo.Context) error {
	p, err := listParams(c)
	if err != nil {
		return err
	}
	vs, more, err := a.deps.Store.VaultList(c.Request().Context(), p)
	if err != nil {
		return err
	}
	return writeList(c, vs, more, toVaultResponse, func(v *db.Vault) string { return timeCursor(v.CreatedAt, v.ID) })
}

// Credentials.

// credentialResponse is the wire form of a credential: its non-secret
// fields only.
type credentialResponse struct {
	Type        string            `json:"type"`
	ID          string            `json:"id"`
	VaultID     string            `json:"vault_id"`
	DisplayName *string           `json:"display_name"`
	Metadata    map[string]string `json:"metadata"`
	Auth        json.RawMessage   `json:"auth"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	ArchivedAt  *time.Time        `json:"archived_at"`
}

func toCredentialResponse(cr *db.Credential) *credentialResponse {
	return &credentialResponse{Type: "vault_credential", ID: cr.ID, VaultID: cr.VaultID, DisplayName: cr.DisplayName,
		Metadata: orEmpty(cr.Metadata), Auth: cr.Auth, CreatedAt: cr.CreatedAt, UpdatedAt: cr.UpdatedAt, ArchivedAt: cr.ArchivedAt}
}

func credentialNotFound(id string) error { return apierror.NotFoundf("credential %q not found", id) }

// credentialIDs reads the vault and credential ids of a credential route.
func credentialIDs(c echo.Context) (vaultID, credID string, err error) {
	if vaultID, err = pathID(c, "id", ids.Vault, vaultNotFound); err != nil {
		return "", "", err
	}
	credID, err = pathID(c, "cid", ids.Credential, credentialNotFound)
	return vaultID, credID, err
}

// credentialError maps store errors of credential operations.
func credentialError(vaultID, credID string, err error) error {
	switch {
	case errors.Is(err, db.ErrVaultArchived):
		return apierror.Conflictf("vault %q is archived; it takes no new credentials", vaultID)
	case errors.Is(err, db.ErrServerTaken):
		return apierror.Conflictf("auth.mcp_server_url: another live credential of vault %q covers this MCP server; update or archive it instead", vaultID)
	case errors.Is(err, db.ErrNotFound) && credID == "":
		return vaultNotFound(vaultID)
	case errors.Is(err, db.ErrNotFound):
		return credentialNotFound(credID)
	}
	return err
}

func (a *API) credentialCreate(c echo.Context) error {
	vaultID := c.Param("id")
	if !ids.Valid(ids.Vault, vaultID) {
		return vaultNotFound(vaultID)
	}
	var in struct {
		DisplayName *string            `json:"display_name"`
		Metadata    map[string]*string `json:"metadata"`
		Auth        json.RawMessage    `json:"auth"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if in.DisplayName != nil {
		if err := agentspec.CheckLen("display_name", *in.DisplayName, 0, 255); err != nil {
			return err
		}
	}
	md, err := agentspec.PatchMetadata(nil, in.Metadata, false)
	if err != nil {
		return err
	}
	if len(in.Auth) == 0 || string(in.Auth) == "null" {
		return apierror.Invalid("auth: is required")
	}
	cred := &db.Credential{ID: ids.New(ids.Credential), VaultID: vaultID, DisplayName: in.DisplayName, Metadata: md}
	secrets, err := credspec.Parse(in.Auth, cred, a.deps.Secrets)
	if err != nil {
		return err
	}
	cred.CreatedAt = a.now()
	cred.UpdatedAt = cred.CreatedAt
	out, err := a.deps.Store.CredentialCreate(c.Request().Context(), cred, secrets)
	if err != nil {
		return credentialError(vaultID, "", err)
	}
	return c.JSON(http.StatusOK, toCredentialResponse(out))
}

func (a *API) credentialGet(c echo.Context) error {
	vaultID, credID, err := credentialIDs(c)
	if err != nil {
		return err
	}
	cred, err := a.deps.Store.CredentialGet(c.Request().Context(), vaultID, credID)
	if err != nil {
		return credentialError(vaultID, credID, err)
	}
	return c.JSON(http.StatusOK, toCredentialResponse(cred))
}

func (a *API) credentialUpdate(c echo.Context) error {
	vaultID, credID, err := credentialIDs(c)
	if err != nil {
		return err
	}
	var in struct {
		DisplayName jsonx.Opt[string]             `json:"display_name"`
		Metadata    jsonx.Opt[map[string]*string] `json:"metadata"`
		Auth        jsonx.Opt[json.RawMessage]    `json:"auth"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if in.DisplayName.Set && !in.DisplayName.Null {
		if err := checkDisplayName("display_name", in.DisplayName.Value); err != nil {
			return err
		}
	}
	cred, err := a.deps.Store.CredentialUpdate(c.Request().Context(), vaultID, credID, func(cur *db.Credential, stored db.Secrets) (*db.Credential, db.Secrets, error) {
		if cur.ArchivedAt != nil {
			return nil, nil, apierror.Conflictf("credential %q is archived and cannot be updated", credID)
		}
		next := *cur
		if in.DisplayName.Set {
			if in.DisplayName.Null {
				next.DisplayName = nil
			} else {
				v := in.DisplayName.Value
				next.DisplayName = &v
			}
		}
		if in.Metadata.Set {
			md, err := agentspec.PatchMetadata(cur.Metadata, in.Metadata.Value, in.Metadata.Null)
			if err != nil {
				return nil, nil, err
			}
			next.Metadata = md
		}
		var secrets db.Secrets
		if in.Auth.Set && !in.Auth.Null {
			auth, s, err := credspec.Update(cur, stored, in.Auth.Value, a.deps.Secrets)
			if err != nil {
				return nil, nil, err
			}
			next.Auth, secrets = auth, s
		}
		next.UpdatedAt = a.now()
		return &next, secrets, nil
	})
	if err != nil {
		return credentialError(vaultID, credID, err)
	}
	return c.JSON(http.StatusOK, toCredentialResponse(cred))
}

func (a *API) credentialArchive(c echo.Context) error {
	vaultID, credID, err := credentialIDs(c)
	if err != nil {
		return err
	}
	if _, err := a.readJSONBody(c, true); err != nil {
		return err
	}
	cred, err := a.deps.Store.CredentialArchive(c.Request().Context(), vaultID, credID, a.now())
	if err != nil {
		return credentialError(vaultID, credID, err)
	}
	return c.JSON(http.StatusOK, toCredentialResponse(cred))
}

func (a *API) credentialDelete(c echo.Context) error {
	vaultID, credID, err := credentialIDs(c)
	if err != nil {
		return err
	}
	if err := a.deps.Store.CredentialDelete(c.Request().Context(), vaultID, credID); err != nil {
		return credentialError(vaultID, credID, err)
	}
	return c.JSON(http.StatusOK, map[string]string{"id": credID, "type": "vault_credential_deleted"})
}

func (a *API) credentialList(c echo.Context) error {
	vaultID := c.Param("id")
	if !ids.Valid(ids.Vault, vaultID) {
		return vaultNotFound(vaultID)
	}
	p, err := listParams(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if _, err := a.deps.Store.VaultGet(ctx, vaultID); err != nil {
		return credentialError(vaultID, "", err)
	}
	creds, more, err := a.deps.Store.CredentialList(ctx, vaultID, p)
	if err != nil {
		return err
	}
	return writeList(c, creds, more, toCredentialResponse, func(cr *db.Credential) string { return timeCursor(cr.CreatedAt, cr.ID) })
}

// MaxSessionVaults bounds a session's vault_ids.
const MaxSessionVaults = 20

// checkSessionVaults validates a session's vault_ids (p is their JSON
// path): each names a live vault, once. A vault holding an
// environment_variable credential is refused (422): substituting its
// secret needs an egress gateway, which no sandbox provider has yet.
func (a *API) checkSessionVaults(ctx context.Context, vaultIDs []string, provider, p string) ([]string, error) {
	if len(vaultIDs) > MaxSessionVaults {
		return nil, apierror.Invalid("%s: at most %d vaults are allowed, got %d", p, MaxSessionVaults, len(vaultIDs))
	}
	out := make([]string, 0, len(vaultIDs))
	if len(vaultIDs) == 0 {
		return out, nil
	}
	vaults, err := a.deps.Store.VaultsByID(ctx, vaultIDs)
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, len(vaultIDs))
	for i, id := range vaultIDs {
		v, ok := vaults[id]
		switch {
		case !ids.Valid(ids.Vault, id) || !ok:
			return nil, apierror.Invalid("%s[%d]: vault %q not found", p, i, id)
		case v.ArchivedAt != nil:
			return nil, apierror.Invalid("%s[%d]: vault %q is archived", p, i, id)
		}
		if j, dup := index[id]; dup {
			return nil, apierror.Invalid("%s[%d]: vault %q is also %s[%d]", p, i, id, p, j)
		}
		index[id] = i
		out = append(out, id)
	}
	creds, err := a.deps.Store.CredentialsOfVaults(ctx, out)
	if err != nil {
		return nil, err
	}
	for _, cr := range creds {
		if cr.AuthType != db.CredentialEnvironmentVariable {
			continue
		}
		return nil, &apierror.Error{Status: http.StatusUnprocessableEntity, Type: apierror.InvalidRequest,
			Message: fmt.Sprintf("%s[%d]: vault %q holds environment_variable credential %q, which needs an egress gateway that substitutes secrets; none exists for provider %q",
				p, index[cr.VaultID], cr.VaultID, cr.ID, provider)}
	}
	return out, nil
}
