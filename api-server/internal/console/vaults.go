package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Vaults and their credentials. A credential's secrets are write-only:
// the API never returns them, and the console never shows one either, not
// even back in a form refused with an error (credentialForm has no field
// for them).

// vaultRoutes registers the vault pages.
func (c *Console) vaultRoutes() {
	m := c.mux
	m.Handle("GET "+Prefix+"/vaults", c.signedIn(c.listOf("/v1/vaults", "vaults")))
	m.Handle("GET "+Prefix+"/vaults/new", c.signedIn(c.vaultNewForm))
	m.Handle("POST "+Prefix+"/vaults", c.signedIn(c.vaultCreate))
	m.Handle("GET "+Prefix+"/vaults/{id}", c.signedIn(c.vaultPage))
	m.Handle("POST "+Prefix+"/vaults/{id}/archive", c.signedIn(c.call(http.MethodPost, "/v1/vaults/{id}/archive", Prefix+"/vaults/{id}")))
	m.Handle("POST "+Prefix+"/vaults/{id}/delete", c.signedIn(c.call(http.MethodDelete, "/v1/vaults/{id}", Prefix+"/vaults")))
	m.Handle("GET "+Prefix+"/vaults/{id}/credentials/new", c.signedIn(c.credentialNewForm))
	m.Handle("POST "+Prefix+"/vaults/{id}/credentials", c.signedIn(c.credentialCreate))
	m.Handle("POST "+Prefix+"/vaults/{id}/credentials/{cid}/secret", c.signedIn(c.credentialReplaceSecret))
	m.Handle("POST "+Prefix+"/vaults/{id}/credentials/{cid}/archive", c.signedIn(c.call(http.MethodPost, "/v1/vaults/{id}/credentials/{cid}/archive", Prefix+"/vaults/{id}")))
	m.Handle("POST "+Prefix+"/vaults/{id}/credentials/{cid}/delete", c.signedIn(c.call(http.MethodDelete, "/v1/vaults/{id}/credentials/{cid}", Prefix+"/vaults/{id}")))
}

func vaultURL(id string) string { return Prefix + "/vaults/" + url.PathEscape(id) }

func vaultAPIPath(id string) string { return "/v1/vaults/" + url.PathEscape(id) }

func credentialAPIPath(vaultID, credID string) string {
	return vaultAPIPath(vaultID) + "/credentials/" + url.PathEscape(credID)
}

// vaultForm is the new-vault form, shown again with the values sent and
// what was wrong.
type vaultForm struct {
	DisplayName, Metadata, Error string
}

func (c *Console) vaultNewForm(w http.ResponseWriter, r *http.Request, v *visit) error {
	c.render(w, r, v, http.StatusOK, "vault_new", vaultForm{})
	return nil
}

// vaultCreate creates a vault and opens it; a refused form is shown again.
func (c *Console) vaultCreate(w http.ResponseWriter, r *http.Request, v *visit) error {
	f := vaultForm{DisplayName: strings.TrimSpace(r.PostFormValue("display_name")), Metadata: r.PostFormValue("metadata")}
	body := map[string]any{"display_name": f.DisplayName}
	md, err := keyValueLines("metadata", f.Metadata)
	var created map[string]any
	if err == nil {
		if len(md) > 0 {
			body["metadata"] = md
		}
		err = v.api.post(r.Context(), "/v1/vaults", body, &created)
	}
	if err != nil {
		status, msg, ok := formFault(err)
		if !ok {
			return err
		}
		f.Error = msg
		c.render(w, r, v, status, "vault_new", f)
		return nil
	}
	http.Redirect(w, r, vaultURL(str(created["id"])), http.StatusSeeOther)
	return nil
}

// formFault is the status and message of an error the visitor can fix in
// the form they sent: a value the console refused, or an API answer 4xx
// other than 401 (signed out). ok is false for any other error.
func formFault(err error) (status int, msg string, ok bool) {
	var bad badInput
	var ae *apiError
	switch {
	case errors.As(err, &bad):
		return http.StatusBadRequest, bad.Error(), true
	case errors.As(err, &ae) && ae.Status/100 == 4 && ae.Status != http.StatusUnauthorized:
		return ae.Status, ae.Message, true
	}
	return 0, "", false
}

// keyValueLines reads metadata written one key=value pair per line (blank
// lines skipped); field names the form field in errors.
func keyValueLines(field, text string) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, badInput(fmt.Sprintf("%s, line %d: %q is not key=value; write one key=value pair per line", field, i+1, line))
		}
		if _, dup := out[k]; dup {
			return nil, badInput(fmt.Sprintf("%s, line %d: key %q is already on an earlier line; give each key once", field, i+1, k))
		}
		out[k] = strings.TrimSpace(val)
	}
	return out, nil
}

// vaultPage is a vault with its credentials.
type vaultPage struct {
	Vault       map[string]any
	Credentials []map[string]any
	Kinds       []credentialKind
	Archived    bool   // archived credentials are shown too
	NextPage    string // cursor of the next page of credentials, or ""
}

// vaultPage shows a vault, its credentials (their non-secret fields, as
// the API returns them) and what can be done with them.
func (c *Console) vaultPage(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	q, archived := listQuery(r, 100)
	p := vaultPage{Kinds: credentialKinds, Archived: archived}
	if err := v.api.get(r.Context(), vaultAPIPath(id), nil, &p.Vault); err != nil {
		return err
	}
	var l list[map[string]any]
	if err := v.api.get(r.Context(), vaultAPIPath(id)+"/credentials", q, &l); err != nil {
		return err
	}
	p.Credentials = l.Data
	p.NextPage = l.NextPage
	c.render(w, r, v, http.StatusOK, "vault", p)
	return nil
}

// credentialKind is a type of credential the API takes.
type credentialKind struct {
	Type, Name, About string
}

// credentialKinds are the credential types, in the order the console
// offers them.
var credentialKinds = []credentialKind{
	{Type: "static_bearer", Name: "Static bearer token",
		About: "A token sent as Authorization: Bearer to one MCP server."},
	{Type: "mcp_oauth", Name: "MCP OAuth",
		About: "An OAuth access token for one MCP server; with a refresh configuration the API refreshes it before it expires and when the server refuses it."},
	{Type: "environment_variable", Name: "Environment variable",
		About: "A secret for outbound requests from the sandbox, named by an environment variable. It is stored, but sessions that use a vault holding one are refused until a sandbox provider has an egress gateway to substitute it."},
}

func credentialKindOf(typ string) (credentialKind, error) {
	if typ == "" {
		return credentialKinds[0], nil
	}
	var names []string
	for _, k := range credentialKinds {
		if k.Type == typ {
			return k, nil
		}
		names = append(names, k.Type)
	}
	return credentialKind{}, badInput(fmt.Sprintf("type: %q is not a credential type; expected one of %s", typ, strings.Join(names, ", ")))
}

// credentialForm is the add-credential form. It holds the non-secret
// values only, so a form shown again after an error cannot carry a secret
// back to the browser: the secret inputs come back empty.
type credentialForm struct {
	Vault map[string]any
	Kinds []credentialKind
	Kind  credentialKind
	Error string

	DisplayName, Metadata string
	// static_bearer and mcp_oauth
	MCPServerURL string
	// mcp_oauth
	ExpiresAt, ClientID, TokenEndpoint, EndpointAuth, Resource, Scope string
	// environment_variable
	SecretName, Networking, AllowedHosts string
	InjectHeader, InjectBody             bool
}

// credentialFormOf reads the non-secret fields of a posted form.
func credentialFormOf(r *http.Request) (credentialForm, error) {
	k, err := credentialKindOf(r.PostFormValue("type"))
	if err != nil {
		return credentialForm{}, err
	}
	fv := func(name string) string { return strings.TrimSpace(r.PostFormValue(name)) }
	return credentialForm{Kinds: credentialKinds, Kind: k, DisplayName: fv("display_name"), Metadata: r.PostFormValue("metadata"),
		MCPServerURL: fv("mcp_server_url"), ExpiresAt: fv("expires_at"), ClientID: fv("client_id"), TokenEndpoint: fv("token_endpoint"),
		EndpointAuth: fv("token_endpoint_auth"), Resource: fv("resource"), Scope: fv("scope"),
		SecretName: fv("secret_name"), Networking: fv("networking"), AllowedHosts: r.PostFormValue("allowed_hosts"),
		InjectHeader: r.PostFormValue("inject_header") == "1", InjectBody: r.PostFormValue("inject_body") == "1"}, nil
}

// credentialNewForm shows the form to add a credential of one type
// (?type=, static_bearer by default) to a vault.
func (c *Console) credentialNewForm(w http.ResponseWriter, r *http.Request, v *visit) error {
	k, err := credentialKindOf(r.FormValue("type"))
	if err != nil {
		return err
	}
	f := credentialForm{Kinds: credentialKinds, Kind: k, EndpointAuth: "none", Networking: "unrestricted", InjectHeader: true}
	if err := v.api.get(r.Context(), vaultAPIPath(r.PathValue("id")), nil, &f.Vault); err != nil {
		return err
	}
	c.render(w, r, v, http.StatusOK, "vault_credential_new", f)
	return nil
}

// credentialCreate adds a credential to a vault and goes back to the
// vault. A refused form is shown again with the API's message, its
// non-secret values kept and its secret inputs empty.
func (c *Console) credentialCreate(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	f, err := credentialFormOf(r)
	if err != nil {
		return err
	}
	body, err := credentialBody(r, &f)
	if err == nil {
		err = v.api.post(r.Context(), vaultAPIPath(id)+"/credentials", body, nil)
	}
	if err == nil {
		http.Redirect(w, r, vaultURL(id), http.StatusSeeOther)
		return nil
	}
	status, msg, ok := formFault(err)
	if !ok {
		return err
	}
	f.Error = msg
	if err := v.api.get(r.Context(), vaultAPIPath(id), nil, &f.Vault); err != nil {
		return err
	}
	c.render(w, r, v, status, "vault_credential_new", f)
	return nil
}

// credentialBody is the API request that creates the credential of form
// f, its secrets read from r.
func credentialBody(r *http.Request, f *credentialForm) (map[string]any, error) {
	body := map[string]any{}
	if f.DisplayName != "" {
		body["display_name"] = f.DisplayName
	}
	md, err := keyValueLines("metadata", f.Metadata)
	if err != nil {
		return nil, err
	}
	if len(md) > 0 {
		body["metadata"] = md
	}
	// Tokens go in HTTP headers, where spaces are refused: pasted ones
	// lose their surrounding whitespace.
	token := func(name string) string { return strings.TrimSpace(r.PostFormValue(name)) }
	auth := map[string]any{"type": f.Kind.Type}
	switch f.Kind.Type {
	case "static_bearer":
		auth["mcp_server_url"], auth["token"] = f.MCPServerURL, token("token")
	case "mcp_oauth":
		auth["mcp_server_url"], auth["access_token"] = f.MCPServerURL, token("access_token")
		if f.ExpiresAt != "" {
			at, err := formTime("expires_at", f.ExpiresAt)
			if err != nil {
				return nil, err
			}
			auth["expires_at"] = at
		}
		if refresh := oauthRefresh(f, token("refresh_token"), token("client_secret")); refresh != nil {
			auth["refresh"] = refresh
		}
	case "environment_variable":
		auth["secret_name"], auth["secret_value"] = f.SecretName, r.PostFormValue("secret_value")
		networking := map[string]any{"type": f.Networking}
		if f.Networking == "limited" {
			networking["allowed_hosts"] = strings.Fields(f.AllowedHosts)
		}
		auth["networking"] = networking
		auth["injection_location"] = map[string]any{"header": f.InjectHeader, "body": f.InjectBody}
	}
	body["auth"] = auth
	return body, nil
}

// oauthRefresh is the refresh configuration of an mcp_oauth form, or nil
// when none of its fields was filled in.
func oauthRefresh(f *credentialForm, refreshToken, clientSecret string) map[string]any {
	if f.ClientID == "" && f.TokenEndpoint == "" && f.Resource == "" && f.Scope == "" && refreshToken == "" && clientSecret == "" {
		return nil
	}
	endpointAuth := map[string]any{"type": f.EndpointAuth}
	if clientSecret != "" {
		endpointAuth["client_secret"] = clientSecret
	}
	refresh := map[string]any{"client_id": f.ClientID, "token_endpoint": f.TokenEndpoint, "refresh_token": refreshToken,
		"token_endpoint_auth": endpointAuth}
	if f.Resource != "" {
		refresh["resource"] = f.Resource
	}
	if f.Scope != "" {
		refresh["scope"] = f.Scope
	}
	return refresh
}

// formTime reads a date and time input (UTC) as RFC 3339.
func formTime(field, v string) (string, error) {
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC().Format(time.RFC3339), nil
		}
	}
	return "", badInput(fmt.Sprintf("%s: %q is not a date and time; expected YYYY-MM-DDTHH:MM (UTC)", field, v))
}

// credentialReplaceSecret replaces a credential's secret (a rotated
// token): the token, the access token (with its new expiry, or none) or
// the secret value, by the credential's type.
func (c *Console) credentialReplaceSecret(w http.ResponseWriter, r *http.Request, v *visit) error {
	vaultID, credID := r.PathValue("id"), r.PathValue("cid")
	secret := r.PostFormValue("secret")
	if strings.TrimSpace(secret) == "" {
		return badInput("secret: enter the new secret; it replaces the stored one")
	}
	auth := map[string]any{"type": r.PostFormValue("type")}
	switch auth["type"] {
	case "static_bearer":
		auth["token"] = strings.TrimSpace(secret)
	case "mcp_oauth":
		auth["access_token"], auth["expires_at"] = strings.TrimSpace(secret), nil
		if e := strings.TrimSpace(r.PostFormValue("expires_at")); e != "" {
			at, err := formTime("expires_at", e)
			if err != nil {
				return err
			}
			auth["expires_at"] = at
		}
	case "environment_variable":
		auth["secret_value"] = secret
	default:
		return badInput(fmt.Sprintf("type: %q is not a credential type; expected static_bearer, mcp_oauth or environment_variable", auth["type"]))
	}
	if err := v.api.post(r.Context(), credentialAPIPath(vaultID, credID), map[string]any{"auth": auth}, nil); err != nil {
		return err
	}
	done(w, r, vaultURL(vaultID))
	return nil
}
