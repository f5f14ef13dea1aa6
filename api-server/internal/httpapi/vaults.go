package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/credentials"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/db"
)

// MaxSecretBytes bounds a credential's secret field.
const MaxSecretBytes = 16 << 10

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
	if page.cursor != "" {
		t, id, err := parseTimeCursor(page.cursor)
		if err != nil {
			return p, err
		}
		p.After = &db.Cursor{CreatedAt: t, ID: id}
	}
	return p, nil
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

// The stored (and returned) non-secret auth of environment_variable
// credentials (the MCP ones are in package credentials).
type (
	injectionLocation struct {
		Body   bool `json:"body"`
		Header bool `json:"header"`
	}
	credentialNetworking struct {
		Type         string   `json:"type"`
		AllowedHosts []string `json:"allowed_hosts,omitempty"`
	}
	envVarAuth struct {
		Type              string               `json:"type"`
		SecretName        string               `json:"secret_name"`
		InjectionLocation injectionLocation    `json:"injection_location"`
		Networking        credentialNetworking `json:"networking"`
	}
)

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

// Inputs of credential auth.
type (
	tokenEndpointAuthIn struct {
		Type         string  `json:"type"`
		ClientSecret *string `json:"client_secret"`
	}
	oauthRefreshIn struct {
		ClientID          *string              `json:"client_id"`
		RefreshToken      *string              `json:"refresh_token"`
		TokenEndpoint     *string              `json:"token_endpoint"`
		TokenEndpointAuth *tokenEndpointAuthIn `json:"token_endpoint_auth"`
		Resource          *string              `json:"resource"`
		Scope             *string              `json:"scope"`
	}
	injectionLocationIn struct {
		Body   *bool `json:"body"`
		Header *bool `json:"header"`
	}
	networkingIn struct {
		Type         string   `json:"type"`
		AllowedHosts []string `json:"allowed_hosts"`
	}
	credentialAuthIn struct {
		Type         string  `json:"type"`
		MCPServerURL *string `json:"mcp_server_url"`
		// static_bearer
		Token *string `json:"token"`
		// mcp_oauth
		AccessToken *string                   `json:"access_token"`
		ExpiresAt   jsonx.Opt[time.Time]      `json:"expires_at"`
		Refresh     jsonx.Opt[oauthRefreshIn] `json:"refresh"`
		// environment_variable
		SecretName        *string              `json:"secret_name"`
		SecretValue       *string              `json:"secret_value"`
		InjectionLocation *injectionLocationIn `json:"injection_location"`
		Networking        *networkingIn        `json:"networking"`
	}
)

// fieldsOf lists the members a credential type accepts, for errors.
var credentialFields = map[string][]string{
	db.CredentialStaticBearer:        {"type", "mcp_server_url", "token"},
	db.CredentialMCPOAuth:            {"type", "mcp_server_url", "access_token", "expires_at", "refresh"},
	db.CredentialEnvironmentVariable: {"type", "secret_name", "secret_value", "injection_location", "networking"},
}

// checkMembers refuses members of another credential type.
func checkMembers(raw json.RawMessage, typ string, immutable []string) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return apierror.Invalid("auth: expected a JSON object")
	}
	allowed := credentialFields[typ]
	for k := range members {
		if !slices.Contains(allowed, k) {
			return apierror.Invalid("auth.%s: is not a field of %s credentials (fields: %s)", k, typ, strings.Join(allowed, ", "))
		}
		if slices.Contains(immutable, k) {
			return apierror.Invalid("auth.%s: cannot be changed after create", k)
		}
	}
	return nil
}

// sealSecret checks and seals one secret field; p is its JSON path.
// Messages never contain the value.
func (a *API) sealSecret(v *string, credID, field, p string, header bool) ([]byte, error) {
	if v == nil || *v == "" {
		return nil, apierror.Invalid("%s: is required", p)
	}
	if len(*v) > MaxSecretBytes {
		return nil, apierror.Invalid("%s: must be at most %d bytes", p, MaxSecretBytes)
	}
	if !utf8.ValidString(*v) {
		return nil, apierror.Invalid("%s: must be valid UTF-8", p)
	}
	if header {
		for _, r := range *v {
			if unicode.IsControl(r) || r == ' ' {
				return nil, apierror.Invalid("%s: must not contain spaces or control characters", p)
			}
		}
	}
	if a.deps.Secrets.Empty() {
		return nil, &apierror.Error{Status: http.StatusUnprocessableEntity, Type: apierror.InvalidRequest,
			Message: p + ": this server cannot store credentials: it has no encryption key configured"}
	}
	sealed, err := a.deps.Secrets.Seal([]byte(*v), db.CredentialSecretPurpose(credID, field))
	if err != nil {
		return nil, fmt.Errorf("seal credential secret: %w", err)
	}
	return sealed, nil
}

// checkEndpointURL validates a URL a credential is used with or sent to:
// https, or http to a loopback host (tests, local servers).
func checkEndpointURL(v *string, p string) (string, error) {
	if v == nil || *v == "" {
		return "", apierror.Invalid("%s: is required", p)
	}
	if len(*v) > 2048 {
		return "", apierror.Invalid("%s: must be at most 2048 characters", p)
	}
	u, err := url.Parse(*v)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "", apierror.Invalid("%s: must be an absolute http(s) URL", p)
	}
	if u.User != nil {
		return "", apierror.Invalid("%s: must not carry user information; credentials go in the credential's secret fields", p)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !loopbackHost(u.Hostname()) {
			return "", apierror.Invalid("%s: must use https (http is accepted for loopback hosts only)", p)
		}
	default:
		return "", apierror.Invalid("%s: must be an https URL, got scheme %q", p, u.Scheme)
	}
	if u.Fragment != "" {
		return "", apierror.Invalid("%s: must not have a fragment", p)
	}
	return u.String(), nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

var secretNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

var hostPattern = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*(:[0-9]{1,5})?$`)

func parseNetworking(n *networkingIn, p string) (credentialNetworking, error) {
	switch n.Type {
	case "unrestricted":
		if len(n.AllowedHosts) > 0 {
			return credentialNetworking{}, apierror.Invalid("%s.allowed_hosts: only limited networking takes allowed_hosts", p)
		}
		return credentialNetworking{Type: "unrestricted"}, nil
	case "limited":
		if len(n.AllowedHosts) == 0 {
			return credentialNetworking{}, apierror.Invalid("%s.allowed_hosts: is required for limited networking (at least one host)", p)
		}
		if len(n.AllowedHosts) > 100 {
			return credentialNetworking{}, apierror.Invalid("%s.allowed_hosts: at most 100 hosts are allowed, got %d", p, len(n.AllowedHosts))
		}
		for i, h := range n.AllowedHosts {
			if !hostPattern.MatchString(h) {
				return credentialNetworking{}, apierror.Invalid("%s.allowed_hosts[%d]: must be a host name (optionally *.-prefixed, with an optional port), got %q", p, i, h)
			}
		}
		return credentialNetworking{Type: "limited", AllowedHosts: n.AllowedHosts}, nil
	case "":
		return credentialNetworking{}, apierror.Invalid("%s.type: is required (unrestricted or limited)", p)
	}
	return credentialNetworking{}, apierror.Invalid("%s.type: must be unrestricted or limited, got %q", p, n.Type)
}

func checkOptLen(v *string, p string, maxLen int) error {
	if v == nil {
		return nil
	}
	return agentspec.CheckLen(p, *v, 1, maxLen)
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
	secrets, err := a.parseCredentialAuth(in.Auth, cred)
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

// parseCredentialAuth validates the auth of a new credential, fills
// cred's type, server URL and stored auth, and returns its sealed secrets.
func (a *API) parseCredentialAuth(raw json.RawMessage, cred *db.Credential) (db.Secrets, error) {
	if err := jsonx.Object(raw, "auth"); err != nil {
		return nil, err
	}
	typ, err := jsonx.TypeOf(raw)
	if err != nil {
		return nil, apierror.Invalid("auth.%v", err)
	}
	if _, ok := credentialFields[typ]; !ok {
		if typ == "" {
			return nil, apierror.Invalid("auth.type: is required (static_bearer, mcp_oauth or environment_variable)")
		}
		return nil, apierror.Invalid("auth.type: must be static_bearer, mcp_oauth or environment_variable, got %q", typ)
	}
	if err := checkMembers(raw, typ, nil); err != nil {
		return nil, err
	}
	var in credentialAuthIn
	if err := jsonx.Decode(raw, &in, "auth"); err != nil {
		return nil, err
	}
	cred.AuthType = typ
	secrets := db.Secrets{}
	var auth any
	switch typ {
	case db.CredentialStaticBearer:
		if cred.MCPServerURL, err = checkEndpointURL(in.MCPServerURL, "auth.mcp_server_url"); err != nil {
			return nil, err
		}
		if secrets[credentials.FieldToken], err = a.sealSecret(in.Token, cred.ID, credentials.FieldToken, "auth.token", true); err != nil {
			return nil, err
		}
		auth = credentials.StaticBearer{Type: typ, MCPServerURL: cred.MCPServerURL}
	case db.CredentialMCPOAuth:
		if cred.MCPServerURL, err = checkEndpointURL(in.MCPServerURL, "auth.mcp_server_url"); err != nil {
			return nil, err
		}
		if secrets[credentials.FieldAccessToken], err = a.sealSecret(in.AccessToken, cred.ID, credentials.FieldAccessToken, "auth.access_token", true); err != nil {
			return nil, err
		}
		out := credentials.MCPOAuth{Type: typ, MCPServerURL: cred.MCPServerURL}
		if in.ExpiresAt.Set && !in.ExpiresAt.Null {
			t := in.ExpiresAt.Value.UTC()
			out.ExpiresAt = &t
		}
		if in.Refresh.Set && !in.Refresh.Null {
			if out.Refresh, err = a.parseRefresh(&in.Refresh.Value, cred.ID, secrets); err != nil {
				return nil, err
			}
		}
		auth = out
	case db.CredentialEnvironmentVariable:
		if in.SecretName == nil || *in.SecretName == "" {
			return nil, apierror.Invalid("auth.secret_name: is required")
		}
		if !secretNamePattern.MatchString(*in.SecretName) {
			return nil, apierror.Invalid("auth.secret_name: must be an environment variable name (letters, digits and _, not starting with a digit, at most 128)")
		}
		if secrets[credentials.FieldSecretValue], err = a.sealSecret(in.SecretValue, cred.ID, credentials.FieldSecretValue, "auth.secret_value", false); err != nil {
			return nil, err
		}
		if in.Networking == nil {
			return nil, apierror.Invalid("auth.networking: is required ({\"type\": \"unrestricted\"} or {\"type\": \"limited\", \"allowed_hosts\": [...]})")
		}
		nw, err := parseNetworking(in.Networking, "auth.networking")
		if err != nil {
			return nil, err
		}
		loc := injectionLocation{Header: true}
		if in.InjectionLocation != nil {
			loc = injectionLocation{Body: in.InjectionLocation.Body != nil && *in.InjectionLocation.Body,
				Header: in.InjectionLocation.Header != nil && *in.InjectionLocation.Header}
			if !loc.Body && !loc.Header {
				return nil, apierror.Invalid("auth.injection_location: at least one of body and header must be true")
			}
		}
		auth = envVarAuth{Type: typ, SecretName: *in.SecretName, InjectionLocation: loc, Networking: nw}
	}
	cred.Auth, err = json.Marshal(auth)
	if err != nil {
		return nil, err
	}
	return secrets, nil
}

// parseRefresh validates a new refresh configuration, sealing its secrets
// into secrets.
func (a *API) parseRefresh(in *oauthRefreshIn, credID string, secrets db.Secrets) (*credentials.Refresh, error) {
	const p = "auth.refresh"
	if in.ClientID == nil || *in.ClientID == "" {
		return nil, apierror.Invalid("%s.client_id: is required", p)
	}
	if err := agentspec.CheckLen(p+".client_id", *in.ClientID, 1, 512); err != nil {
		return nil, err
	}
	endpoint, err := checkEndpointURL(in.TokenEndpoint, p+".token_endpoint")
	if err != nil {
		return nil, err
	}
	if secrets[credentials.FieldRefreshToken], err = a.sealSecret(in.RefreshToken, credID, credentials.FieldRefreshToken, p+".refresh_token", true); err != nil {
		return nil, err
	}
	if err := checkOptLen(in.Resource, p+".resource", 2048); err != nil {
		return nil, err
	}
	if err := checkOptLen(in.Scope, p+".scope", 2048); err != nil {
		return nil, err
	}
	if in.TokenEndpointAuth == nil {
		return nil, apierror.Invalid("%s.token_endpoint_auth: is required ({\"type\": \"none\"}, client_secret_basic or client_secret_post)", p)
	}
	ta := in.TokenEndpointAuth
	switch ta.Type {
	case "none":
		if ta.ClientSecret != nil {
			return nil, apierror.Invalid("%s.token_endpoint_auth.client_secret: is not taken by type none", p)
		}
	case "client_secret_basic", "client_secret_post":
		if secrets[credentials.FieldClientSecret], err = a.sealSecret(ta.ClientSecret, credID, credentials.FieldClientSecret, p+".token_endpoint_auth.client_secret", true); err != nil {
			return nil, err
		}
	case "":
		return nil, apierror.Invalid("%s.token_endpoint_auth.type: is required (none, client_secret_basic or client_secret_post)", p)
	default:
		return nil, apierror.Invalid("%s.token_endpoint_auth.type: must be none, client_secret_basic or client_secret_post, got %q", p, ta.Type)
	}
	return &credentials.Refresh{ClientID: *in.ClientID, TokenEndpoint: endpoint, TokenEndpointAuth: credentials.TokenEndpointAuth{Type: ta.Type},
		Resource: in.Resource, Scope: in.Scope}, nil
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
			auth, s, err := a.updateCredentialAuth(cur, stored, in.Auth.Value)
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

// updateCredentialAuth applies an auth update to a credential: the type
// cannot change; secrets sent replace the stored ones.
func (a *API) updateCredentialAuth(cur *db.Credential, stored db.Secrets, raw json.RawMessage) (json.RawMessage, db.Secrets, error) {
	if err := jsonx.Object(raw, "auth"); err != nil {
		return nil, nil, err
	}
	typ, err := jsonx.TypeOf(raw)
	if err != nil {
		return nil, nil, apierror.Invalid("auth.%v", err)
	}
	if typ != cur.AuthType {
		return nil, nil, apierror.Invalid("auth.type: must be %s, the credential's type (a credential's type cannot change), got %q", cur.AuthType, typ)
	}
	if err := checkMembers(raw, typ, []string{"mcp_server_url", "secret_name"}); err != nil {
		return nil, nil, err
	}
	var in credentialAuthIn
	if err := jsonx.Decode(raw, &in, "auth"); err != nil {
		return nil, nil, err
	}
	secrets := db.Secrets{}
	seal := func(v *string, field, p string, header bool) error {
		if v == nil {
			return nil
		}
		sealed, err := a.sealSecret(v, cur.ID, field, p, header)
		if err == nil {
			secrets[field] = sealed
		}
		return err
	}
	var auth any
	switch typ {
	case db.CredentialStaticBearer:
		if err := seal(in.Token, credentials.FieldToken, "auth.token", true); err != nil {
			return nil, nil, err
		}
		return cur.Auth, secrets, nil
	case db.CredentialMCPOAuth:
		var out credentials.MCPOAuth
		if err := json.Unmarshal(cur.Auth, &out); err != nil {
			return nil, nil, fmt.Errorf("decode auth of credential %s: %w", cur.ID, err)
		}
		if err := seal(in.AccessToken, credentials.FieldAccessToken, "auth.access_token", true); err != nil {
			return nil, nil, err
		}
		if in.ExpiresAt.Set {
			out.ExpiresAt = nil
			if !in.ExpiresAt.Null {
				t := in.ExpiresAt.Value.UTC()
				out.ExpiresAt = &t
			}
		}
		if in.Refresh.Set && !in.Refresh.Null {
			r := in.Refresh.Value
			const p = "auth.refresh"
			if out.Refresh == nil {
				return nil, nil, apierror.Invalid("%s: the credential has no refresh configuration; create a new credential to add one", p)
			}
			if r.ClientID != nil || r.TokenEndpoint != nil || r.Resource != nil {
				return nil, nil, apierror.Invalid("%s: only refresh_token, scope and token_endpoint_auth can be updated", p)
			}
			if err := seal(r.RefreshToken, credentials.FieldRefreshToken, p+".refresh_token", true); err != nil {
				return nil, nil, err
			}
			if r.Scope != nil {
				if err := checkOptLen(r.Scope, p+".scope", 2048); err != nil {
					return nil, nil, err
				}
				out.Refresh.Scope = r.Scope
			}
			if ta := r.TokenEndpointAuth; ta != nil {
				if ta.Type != "client_secret_basic" && ta.Type != "client_secret_post" {
					return nil, nil, apierror.Invalid("%s.token_endpoint_auth.type: must be client_secret_basic or client_secret_post, got %q", p, ta.Type)
				}
				if _, ok := stored[credentials.FieldClientSecret]; !ok {
					return nil, nil, apierror.Invalid("%s.token_endpoint_auth: the credential uses token endpoint auth %s, which takes no client secret", p, out.Refresh.TokenEndpointAuth.Type)
				}
				// The stored auth type stays, even if the other one is sent.
				if err := seal(ta.ClientSecret, credentials.FieldClientSecret, p+".token_endpoint_auth.client_secret", true); err != nil {
					return nil, nil, err
				}
			}
		}
		auth = out
	case db.CredentialEnvironmentVariable:
		var out envVarAuth
		if err := json.Unmarshal(cur.Auth, &out); err != nil {
			return nil, nil, fmt.Errorf("decode auth of credential %s: %w", cur.ID, err)
		}
		if err := seal(in.SecretValue, credentials.FieldSecretValue, "auth.secret_value", false); err != nil {
			return nil, nil, err
		}
		if l := in.InjectionLocation; l != nil {
			if l.Body != nil {
				out.InjectionLocation.Body = *l.Body
			}
			if l.Header != nil {
				out.InjectionLocation.Header = *l.Header
			}
			if !out.InjectionLocation.Body && !out.InjectionLocation.Header {
				return nil, nil, apierror.Invalid("auth.injection_location: at least one of body and header must stay true")
			}
		}
		if in.Networking != nil {
			if out.Networking, err = parseNetworking(in.Networking, "auth.networking"); err != nil {
				return nil, nil, err
			}
		}
		auth = out
	}
	b, err := json.Marshal(auth)
	return b, secrets, err
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
func (a *API) checkSessionVaults(c echo.Context, vaultIDs []string, provider, p string) ([]string, error) {
	if len(vaultIDs) > MaxSessionVaults {
		return nil, apierror.Invalid("%s: at most %d vaults are allowed, got %d", p, MaxSessionVaults, len(vaultIDs))
	}
	out := make([]string, 0, len(vaultIDs))
	if len(vaultIDs) == 0 {
		return out, nil
	}
	ctx := c.Request().Context()
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
