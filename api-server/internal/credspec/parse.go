package credspec

import (
	"encoding/json"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/credentials"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/db"
)

// Parse validates the auth of a new credential, fills cred's type, server
// URL and stored auth (cred.ID must be set: it binds the sealed secrets),
// and returns its secrets sealed with keys. Errors are public
// (*apierror.Error) except a failure to seal.
func Parse(raw json.RawMessage, cred *db.Credential, keys *envelope.Keyring) (db.Secrets, error) {
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
	s := &sealer{keys: keys, credID: cred.ID, secrets: db.Secrets{}}
	var auth any
	switch typ {
	case db.CredentialStaticBearer:
		auth, err = parseStaticBearer(&in, cred, s)
	case db.CredentialMCPOAuth:
		auth, err = parseMCPOAuth(&in, cred, s)
	case db.CredentialEnvironmentVariable:
		auth, err = parseEnvVar(&in, cred, s)
	}
	if err != nil {
		return nil, err
	}
	cred.Auth, err = json.Marshal(auth)
	if err != nil {
		return nil, err
	}
	return s.secrets, nil
}

func parseStaticBearer(in *credentialAuthIn, cred *db.Credential, s *sealer) (any, error) {
	var err error
	if cred.MCPServerURL, err = checkEndpointURL(in.MCPServerURL, "auth.mcp_server_url"); err != nil {
		return nil, err
	}
	if err := s.seal(in.Token, credentials.FieldToken, "auth.token", true); err != nil {
		return nil, err
	}
	return credentials.StaticBearer{Type: cred.AuthType, MCPServerURL: cred.MCPServerURL}, nil
}

func parseMCPOAuth(in *credentialAuthIn, cred *db.Credential, s *sealer) (any, error) {
	var err error
	if cred.MCPServerURL, err = checkEndpointURL(in.MCPServerURL, "auth.mcp_server_url"); err != nil {
		return nil, err
	}
	if err := s.seal(in.AccessToken, credentials.FieldAccessToken, "auth.access_token", true); err != nil {
		return nil, err
	}
	out := credentials.MCPOAuth{Type: cred.AuthType, MCPServerURL: cred.MCPServerURL}
	if in.ExpiresAt.Set && !in.ExpiresAt.Null {
		t := in.ExpiresAt.Value.UTC()
		out.ExpiresAt = &t
	}
	if in.Refresh.Set && !in.Refresh.Null {
		if out.Refresh, err = parseRefresh(&in.Refresh.Value, s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func parseEnvVar(in *credentialAuthIn, cred *db.Credential, s *sealer) (any, error) {
	if in.SecretName == nil || *in.SecretName == "" {
		return nil, apierror.Invalid("auth.secret_name: is required")
	}
	if !secretNamePattern.MatchString(*in.SecretName) {
		return nil, apierror.Invalid("auth.secret_name: must be an environment variable name (letters, digits and _, not starting with a digit, at most 128)")
	}
	if err := s.seal(in.SecretValue, credentials.FieldSecretValue, "auth.secret_value", false); err != nil {
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
	return envVarAuth{Type: cred.AuthType, SecretName: *in.SecretName, InjectionLocation: loc, Networking: nw}, nil
}

// parseRefresh validates a new refresh configuration, sealing its secrets.
func parseRefresh(in *oauthRefreshIn, s *sealer) (*credentials.Refresh, error) {
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
	if err := s.seal(in.RefreshToken, credentials.FieldRefreshToken, p+".refresh_token", true); err != nil {
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
		if err := s.seal(ta.ClientSecret, credentials.FieldClientSecret, p+".token_endpoint_auth.client_secret", true); err != nil {
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
