package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/proto/netguard"
)

// validateTimeout bounds each outbound call of mcp_oauth_validate.
const validateTimeout = 10 * time.Second

// maxProbeBody bounds the part of an error response returned to clients.
const maxProbeBody = 4 << 10

// probeHTTPResponse is an error response of the MCP server or the token
// endpoint, with the credential's secrets redacted.
type probeHTTPResponse struct {
	StatusCode    int    `json:"status_code"`
	ContentType   string `json:"content_type"`
	Body          string `json:"body"`
	BodyTruncated bool   `json:"body_truncated"`
}

type mcpProbe struct {
	Method       string             `json:"method"`
	HTTPResponse *probeHTTPResponse `json:"http_response"`
}

type refreshProbe struct {
	Status       string             `json:"status"`
	HTTPResponse *probeHTTPResponse `json:"http_response"`
}

// credentialValidation is the wire form of a validation probe.
type credentialValidation struct {
	Type            string        `json:"type"`
	CredentialID    string        `json:"credential_id"`
	VaultID         string        `json:"vault_id"`
	HasRefreshToken bool          `json:"has_refresh_token"`
	MCPProbe        *mcpProbe     `json:"mcp_probe"`
	Refresh         *refreshProbe `json:"refresh"`
	Status          string        `json:"status"`
	ValidatedAt     time.Time     `json:"validated_at"`
}

// outbound is the client for calls to credential endpoints: a guarded
// default refusing loopback, private and link-local addresses (checked
// on the resolved address, so DNS rebinding does not get around it)
// unless Deps.Outbound replaces it.
func (a *API) outbound() *http.Client {
	if a.deps.Outbound != nil {
		return a.deps.Outbound
	}
	// Validations are rare: no connection is kept for reuse.
	t := netguard.Transport(a.deps.AllowPrivate)
	t.DisableKeepAlives = true
	t.TLSHandshakeTimeout = validateTimeout
	return &http.Client{Timeout: validateTimeout, Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// credentialValidate probes an mcp_oauth credential against its MCP server
// (an initialize request with the access token). On a 401 with a refresh
// configuration it exchanges the refresh token and stores the rotated
// tokens; the new access token is not tested (status unknown).
func (a *API) credentialValidate(c echo.Context) error {
	vaultID, credID, err := credentialIDs(c)
	if err != nil {
		return err
	}
	if _, err := a.readJSONBody(c, true); err != nil {
		return err
	}
	ctx := c.Request().Context()
	cred, err := a.deps.Store.CredentialGet(ctx, vaultID, credID)
	if err != nil {
		return credentialError(vaultID, credID, err)
	}
	if cred.AuthType != db.CredentialMCPOAuth {
		return apierror.Invalid("credential %q is a %s credential; only mcp_oauth credentials can be validated", credID, cred.AuthType)
	}
	if cred.ArchivedAt != nil {
		return apierror.Conflictf("credential %q is archived", credID)
	}
	var auth mcpOAuthAuth
	if err := json.Unmarshal(cred.Auth, &auth); err != nil {
		return fmt.Errorf("decode auth of credential %s: %w", credID, err)
	}
	sealed, err := a.deps.Store.CredentialSecrets(ctx, credID)
	if err != nil {
		return err
	}
	secrets := map[string]string{}
	for field, s := range sealed {
		if a.deps.Secrets.Empty() {
			return fmt.Errorf("open credential %s: no vault keys configured", credID)
		}
		v, err := a.deps.Secrets.Open(s, db.CredentialSecretPurpose(credID, field))
		if err != nil {
			return fmt.Errorf("open the %s of credential %s: %w", field, credID, err)
		}
		secrets[field] = string(v)
	}
	redact := func(s string) string {
		for _, v := range secrets {
			if v != "" {
				s = strings.ReplaceAll(s, v, "[redacted]")
			}
		}
		return s
	}
	out := &credentialValidation{Type: "vault_credential_validation", CredentialID: credID, VaultID: vaultID,
		HasRefreshToken: auth.Refresh != nil && secrets[fieldRefreshToken] != "", ValidatedAt: a.now()}
	token := secrets[fieldAccessToken]
	if token == "" {
		out.Status = "invalid"
		return c.JSON(http.StatusOK, out)
	}
	status, resp := a.probeMCP(ctx, auth.MCPServerURL, token, redact)
	switch {
	case status >= 200 && status < 300:
		out.Status = "valid"
		return c.JSON(http.StatusOK, out)
	case status == 0:
		out.Status = "unknown"
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		out.Status = "invalid"
	default:
		out.Status = "unknown"
	}
	out.MCPProbe = &mcpProbe{Method: "initialize", HTTPResponse: resp}
	if status != http.StatusUnauthorized || !out.HasRefreshToken {
		return c.JSON(http.StatusOK, out)
	}
	rotated, failure := a.refreshToken(ctx, auth.Refresh, secrets, redact)
	if rotated == nil {
		out.Refresh = &refreshProbe{Status: "failed", HTTPResponse: failure}
		return c.JSON(http.StatusOK, out)
	}
	if err := a.storeRotated(ctx, cred, sealed[fieldRefreshToken], rotated); err != nil {
		return err
	}
	out.Refresh = &refreshProbe{Status: "succeeded"}
	out.Status = "unknown"
	return c.JSON(http.StatusOK, out)
}

// probeMCP sends an MCP initialize request with the token. It returns the
// HTTP status (0: no response) and, for an error status, the response.
func (a *API) probeMCP(ctx context.Context, serverURL, token string, redact func(string) string) (int, *probeHTTPResponse) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mango","version":"1"}}}`
	ctx, cancel := context.WithTimeout(ctx, validateTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, serverURL, strings.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := a.outbound().Do(req)
	if err != nil {
		return 0, nil
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		drain(resp.Body)
		// Close the MCP session the probe opened, if any.
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
			if del, err := http.NewRequestWithContext(ctx, http.MethodDelete, serverURL, nil); err == nil {
				del.Header.Set("Authorization", "Bearer "+token)
				del.Header.Set("Mcp-Session-Id", sid)
				if r, err := a.outbound().Do(del); err == nil {
					drain(r.Body)
					_ = r.Body.Close()
				}
			}
		}
		return resp.StatusCode, nil
	}
	return resp.StatusCode, readProbeResponse(resp, redact)
}

func readProbeResponse(resp *http.Response, redact func(string) string) *probeHTTPResponse {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody+1))
	truncated := len(b) > maxProbeBody
	if truncated {
		b = b[:maxProbeBody]
	}
	return &probeHTTPResponse{StatusCode: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
		Body: redact(strings.ToValidUTF8(string(b), "")), BodyTruncated: truncated}
}

// rotatedTokens is a token endpoint's answer to a refresh.
type rotatedTokens struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    *int64 `json:"expires_in"`
}

// refreshToken exchanges the refresh token (RFC 6749 section 6). It
// returns the new tokens, or nil and the endpoint's redacted rejection
// (nil when there was no usable answer).
func (a *API) refreshToken(ctx context.Context, r *oauthRefresh, secrets map[string]string, redact func(string) string) (*rotatedTokens, *probeHTTPResponse) {
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {secrets[fieldRefreshToken]}}
	if r.Scope != nil {
		form.Set("scope", *r.Scope)
	}
	if r.Resource != nil {
		form.Set("resource", *r.Resource)
	}
	if r.TokenEndpointAuth.Type != "client_secret_basic" {
		form.Set("client_id", r.ClientID)
	}
	if r.TokenEndpointAuth.Type == "client_secret_post" {
		form.Set("client_secret", secrets[fieldClientSecret])
	}
	ctx, cancel := context.WithTimeout(ctx, validateTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, nil
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if r.TokenEndpointAuth.Type == "client_secret_basic" {
		req.SetBasicAuth(url.QueryEscape(r.ClientID), url.QueryEscape(secrets[fieldClientSecret]))
	}
	resp, err := a.outbound().Do(req)
	if err != nil {
		return nil, nil
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, readProbeResponse(resp, redact)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, nil
	}
	var t rotatedTokens
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&t); err != nil || t.AccessToken == "" {
		// Never echo the body: a malformed answer may still hold tokens.
		return nil, &probeHTTPResponse{StatusCode: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
			Body: "(the token endpoint's answer has no access_token)"}
	}
	return &t, nil
}

// storeRotated seals and stores the tokens of a refresh, with the new
// expiry, unless the refresh token changed since it was read (usedSealed):
// then a concurrent refresh or an update stored newer tokens, which win.
func (a *API) storeRotated(ctx context.Context, cred *db.Credential, usedSealed []byte, t *rotatedTokens) error {
	now := a.now()
	_, err := a.deps.Store.CredentialUpdate(ctx, cred.VaultID, cred.ID, func(cur *db.Credential, stored db.Secrets) (*db.Credential, db.Secrets, error) {
		if !bytes.Equal(stored[fieldRefreshToken], usedSealed) {
			return cur, nil, nil
		}
		var auth mcpOAuthAuth
		if err := json.Unmarshal(cur.Auth, &auth); err != nil {
			return nil, nil, fmt.Errorf("decode auth of credential %s: %w", cur.ID, err)
		}
		auth.ExpiresAt = nil
		if t.ExpiresIn != nil {
			exp := now.Add(time.Duration(*t.ExpiresIn) * time.Second).UTC()
			auth.ExpiresAt = &exp
		}
		secrets := db.Secrets{}
		var err error
		if secrets[fieldAccessToken], err = a.deps.Secrets.Seal([]byte(t.AccessToken), db.CredentialSecretPurpose(cur.ID, fieldAccessToken)); err != nil {
			return nil, nil, fmt.Errorf("seal rotated access token: %w", err)
		}
		if t.RefreshToken != "" {
			if secrets[fieldRefreshToken], err = a.deps.Secrets.Seal([]byte(t.RefreshToken), db.CredentialSecretPurpose(cur.ID, fieldRefreshToken)); err != nil {
				return nil, nil, fmt.Errorf("seal rotated refresh token: %w", err)
			}
		}
		next := *cur
		if next.Auth, err = json.Marshal(auth); err != nil {
			return nil, nil, err
		}
		next.UpdatedAt = now
		return &next, secrets, nil
	})
	return err
}
