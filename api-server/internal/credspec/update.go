package credspec

import (
	"encoding/json"
	"fmt"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/credentials"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/db"
)

// Update applies an auth update to the credential cur, whose sealed
// secrets are stored: the type cannot change, nor mcp_server_url or
// secret_name; secrets sent replace the stored ones. It returns the new
// stored auth and the secrets sent, sealed with keys. Errors are public
// (*apierror.Error) except a failure to seal or to decode cur.
func Update(cur *db.Credential, stored db.Secrets, raw json.RawMessage, keys *envelope.Keyring) (json.RawMessage, db.Secrets, error) {
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
	s := &sealer{keys: keys, credID: cur.ID, secrets: db.Secrets{}}
	var auth any
	switch typ {
	case db.CredentialStaticBearer:
		if err := s.replace(in.Token, credentials.FieldToken, "auth.token", true); err != nil {
			return nil, nil, err
		}
		return cur.Auth, s.secrets, nil
	case db.CredentialMCPOAuth:
		auth, err = updateMCPOAuth(&in, cur, stored, s)
	case db.CredentialEnvironmentVariable:
		auth, err = updateEnvVar(&in, cur, s)
	}
	if err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(auth)
	return b, s.secrets, err
}

func updateMCPOAuth(in *credentialAuthIn, cur *db.Credential, stored db.Secrets, s *sealer) (any, error) {
	var out credentials.MCPOAuth
	if err := json.Unmarshal(cur.Auth, &out); err != nil {
		return nil, fmt.Errorf("decode auth of credential %s: %w", cur.ID, err)
	}
	if err := s.replace(in.AccessToken, credentials.FieldAccessToken, "auth.access_token", true); err != nil {
		return nil, err
	}
	if in.ExpiresAt.Set {
		out.ExpiresAt = nil
		if !in.ExpiresAt.Null {
			t := in.ExpiresAt.Value.UTC()
			out.ExpiresAt = &t
		}
	}
	if in.Refresh.Set && !in.Refresh.Null {
		if err := updateRefresh(&in.Refresh.Value, out.Refresh, stored, s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// updateRefresh applies r to the stored refresh configuration out (nil:
// the credential has none).
func updateRefresh(r *oauthRefreshIn, out *credentials.Refresh, stored db.Secrets, s *sealer) error {
	const p = "auth.refresh"
	if out == nil {
		return apierror.Invalid("%s: the credential has no refresh configuration; create a new credential to add one", p)
	}
	if r.ClientID != nil || r.TokenEndpoint != nil || r.Resource != nil {
		return apierror.Invalid("%s: only refresh_token, scope and token_endpoint_auth can be updated", p)
	}
	if err := s.replace(r.RefreshToken, credentials.FieldRefreshToken, p+".refresh_token", true); err != nil {
		return err
	}
	if r.Scope != nil {
		if err := checkOptLen(r.Scope, p+".scope", 2048); err != nil {
			return err
		}
		out.Scope = r.Scope
	}
	ta := r.TokenEndpointAuth
	if ta == nil {
		return nil
	}
	if ta.Type != "client_secret_basic" && ta.Type != "client_secret_post" {
		return apierror.Invalid("%s.token_endpoint_auth.type: must be client_secret_basic or client_secret_post, got %q", p, ta.Type)
	}
	if _, ok := stored[credentials.FieldClientSecret]; !ok {
		return apierror.Invalid("%s.token_endpoint_auth: the credential uses token endpoint auth %s, which takes no client secret", p, out.TokenEndpointAuth.Type)
	}
	// The stored auth type stays, even if the other one is sent.
	return s.replace(ta.ClientSecret, credentials.FieldClientSecret, p+".token_endpoint_auth.client_secret", true)
}

func updateEnvVar(in *credentialAuthIn, cur *db.Credential, s *sealer) (any, error) {
	var out envVarAuth
	if err := json.Unmarshal(cur.Auth, &out); err != nil {
		return nil, fmt.Errorf("decode auth of credential %s: %w", cur.ID, err)
	}
	if err := s.replace(in.SecretValue, credentials.FieldSecretValue, "auth.secret_value", false); err != nil {
		return nil, err
	}
	if l := in.InjectionLocation; l != nil {
		if l.Body != nil {
			out.InjectionLocation.Body = *l.Body
		}
		if l.Header != nil {
			out.InjectionLocation.Header = *l.Header
		}
		if !out.InjectionLocation.Body && !out.InjectionLocation.Header {
			return nil, apierror.Invalid("auth.injection_location: at least one of body and header must stay true")
		}
	}
	if in.Networking != nil {
		var err error
		if out.Networking, err = parseNetworking(in.Networking, "auth.networking"); err != nil {
			return nil, err
		}
	}
	return out, nil
}
