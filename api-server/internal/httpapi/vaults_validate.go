package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/credentials"
	"github.com/mangohq/mango/db"
)

// validateTimeout bounds each outbound call of mcp_oauth_validate.
const validateTimeout = 10 * time.Second

type mcpProbe struct {
	Method       string                    `json:"method"`
	HTTPResponse *credentials.HTTPResponse `json:"http_response"`
}

type refreshProbe struct {
	Status       string                    `json:"status"`
	HTTPResponse *credentials.HTTPResponse `json:"http_response"`
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

// credentialService is the service refreshing and storing credentials.
func (a *API) credentialService() *credentials.Service {
	return &credentials.Service{Store: a.deps.Store, Secrets: a.deps.Secrets, HTTP: a.deps.Outbound, Now: a.deps.Now}
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
	var auth credentials.MCPOAuth
	if err := json.Unmarshal(cred.Auth, &auth); err != nil {
		return fmt.Errorf("decode auth of credential %s: %w", credID, err)
	}
	sealed, err := a.deps.Store.CredentialSecrets(ctx, credID)
	if err != nil {
		return err
	}
	secrets, err := a.credentialService().Open(credID, sealed)
	if err != nil {
		return err
	}
	redact := credentials.Redactor(secrets)
	out := &credentialValidation{Type: "vault_credential_validation", CredentialID: credID, VaultID: vaultID,
		HasRefreshToken: auth.Refresh != nil && secrets[credentials.FieldRefreshToken] != "", ValidatedAt: a.now()}
	token := secrets[credentials.FieldAccessToken]
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
	rotated, err := credentials.Exchange(ctx, a.deps.Outbound, auth.Refresh, secrets, redact)
	if err != nil {
		out.Refresh = &refreshProbe{Status: "failed"}
		var refused *credentials.RefusedError
		if errors.As(err, &refused) {
			out.Refresh.HTTPResponse = refused.Response
		} else {
			a.deps.Logger.WarnContext(ctx, "validate credential: refresh failed", "credential_id", credID, "err", err)
		}
		return c.JSON(http.StatusOK, out)
	}
	if err := a.credentialService().StoreRotated(ctx, cred, sealed[credentials.FieldRefreshToken], rotated); err != nil {
		return err
	}
	out.Refresh = &refreshProbe{Status: "succeeded"}
	out.Status = "unknown"
	return c.JSON(http.StatusOK, out)
}

// probeMCP sends an MCP initialize request with the token. It returns the
// HTTP status (0: no response) and, for an error status, the response.
func (a *API) probeMCP(ctx context.Context, serverURL, token string, redact func(string) string) (int, *credentials.HTTPResponse) {
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
	resp, err := a.deps.Outbound.Do(req)
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
				if r, err := a.deps.Outbound.Do(del); err == nil {
					drain(r.Body)
					_ = r.Body.Close()
				}
			}
		}
		return resp.StatusCode, nil
	}
	return resp.StatusCode, credentials.ReadResponse(resp, redact)
}
