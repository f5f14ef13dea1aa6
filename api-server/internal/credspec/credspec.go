// Package credspec validates the auth of vault credentials and seals their
// secrets: static_bearer and mcp_oauth credentials for MCP servers, and
// environment_variable credentials. Parse reads the auth of a new
// credential, Update applies an auth update to a stored one; both return
// the secrets sealed, never in clear, and their messages never contain a
// secret.
package credspec

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/db"
)

// MaxSecretBytes bounds a credential's secret field.
const MaxSecretBytes = 16 << 10

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

// credentialFields lists the members a credential type accepts, for errors.
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

// sealer checks and seals the secret fields of one credential into
// secrets.
type sealer struct {
	keys    *envelope.Keyring
	credID  string
	secrets db.Secrets
}

// seal checks and seals one secret field, which is required; p is its
// JSON path, header whether it is sent in an HTTP header. Messages never
// contain the value.
func (s *sealer) seal(v *string, field, p string, header bool) error {
	if v == nil || *v == "" {
		return apierror.Invalid("%s: is required", p)
	}
	if len(*v) > MaxSecretBytes {
		return apierror.Invalid("%s: must be at most %d bytes", p, MaxSecretBytes)
	}
	if !utf8.ValidString(*v) {
		return apierror.Invalid("%s: must be valid UTF-8", p)
	}
	if header {
		for _, r := range *v {
			if unicode.IsControl(r) || r == ' ' {
				return apierror.Invalid("%s: must not contain spaces or control characters", p)
			}
		}
	}
	if s.keys.Empty() {
		return &apierror.Error{Status: http.StatusUnprocessableEntity, Type: apierror.InvalidRequest,
			Message: p + ": this server cannot store credentials: it has no encryption key configured"}
	}
	sealed, err := s.keys.Seal([]byte(*v), db.CredentialSecretPurpose(s.credID, field))
	if err != nil {
		return fmt.Errorf("seal credential secret: %w", err)
	}
	s.secrets[field] = sealed
	return nil
}

// replace seals a secret field sent in an update (v not nil), which
// replaces the stored one.
func (s *sealer) replace(v *string, field, p string, header bool) error {
	if v == nil {
		return nil
	}
	return s.seal(v, field, p, header)
}
