package credspec_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/credentials"
	"github.com/mangohq/mango/api-server/internal/credspec"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/db"
)

const testKeys = "v1:dmFsaWRhdGUta2V5LTAxMjM0NTY3ODlhYmNkZWYwMTI="

func keyring(t *testing.T) *envelope.Keyring {
	t.Helper()
	k, err := envelope.Parse(testKeys)
	if err != nil {
		t.Fatalf("parse test keys: %v", err)
	}
	return k
}

// wantPublic checks that err is a public error with the status and a
// message containing want, and that it does not carry the planted secret.
func wantPublic(t *testing.T, err error, status int, want string) {
	t.Helper()
	var pub *apierror.Error
	if !errors.As(err, &pub) {
		t.Fatalf("want a public error %d %q, got %v", status, want, err)
	}
	if pub.Status != status || !strings.Contains(pub.Message, want) {
		t.Fatalf("want %d with %q, got %d %q", status, want, pub.Status, pub.Message)
	}
	if strings.Contains(pub.Message, "PLANTED") {
		t.Fatalf("error message carries a secret: %q", pub.Message)
	}
}

// open opens a sealed secret of cred with keys.
func open(t *testing.T, keys *envelope.Keyring, credID, field string, secrets db.Secrets) string {
	t.Helper()
	sealed, ok := secrets[field]
	if !ok {
		t.Fatalf("want secret %s sealed, got fields %v", field, keysOf(secrets))
	}
	plain, err := keys.Open(sealed, db.CredentialSecretPurpose(credID, field))
	if err != nil {
		t.Fatalf("open secret %s: %v", field, err)
	}
	return string(plain)
}

func keysOf(s db.Secrets) []string {
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	return out
}

func TestParse(t *testing.T) {
	t.Parallel()
	keys := keyring(t)
	cases := []struct {
		name     string
		auth     string
		wantAuth string
		wantURL  string
		secrets  map[string]string
	}{
		{name: "static bearer",
			auth:     `{"type":"static_bearer","mcp_server_url":"https://mcp.example.com/mcp","token":"PLANTED_token"}`,
			wantAuth: `{"type":"static_bearer","mcp_server_url":"https://mcp.example.com/mcp"}`,
			wantURL:  "https://mcp.example.com/mcp",
			secrets:  map[string]string{credentials.FieldToken: "PLANTED_token"}},
		{name: "mcp oauth with refresh",
			auth: `{"type":"mcp_oauth","mcp_server_url":"http://127.0.0.1:9/mcp","access_token":"PLANTED_access","expires_at":"2026-01-02T04:04:05+01:00",
				"refresh":{"client_id":"c1","refresh_token":"PLANTED_refresh","token_endpoint":"https://auth.example.com/token","token_endpoint_auth":{"type":"client_secret_post","client_secret":"PLANTED_cs"},"scope":"read"}}`,
			wantAuth: `{"type":"mcp_oauth","mcp_server_url":"http://127.0.0.1:9/mcp","expires_at":"2026-01-02T03:04:05Z","refresh":{"client_id":"c1","token_endpoint":"https://auth.example.com/token","token_endpoint_auth":{"type":"client_secret_post"},"resource":null,"scope":"read"}}`,
			wantURL:  "http://127.0.0.1:9/mcp",
			secrets: map[string]string{credentials.FieldAccessToken: "PLANTED_access", credentials.FieldRefreshToken: "PLANTED_refresh",
				credentials.FieldClientSecret: "PLANTED_cs"}},
		{name: "environment variable, header by default",
			auth:     `{"type":"environment_variable","secret_name":"API_KEY","secret_value":"PLANTED value","networking":{"type":"limited","allowed_hosts":["*.example.com:443"]}}`,
			wantAuth: `{"type":"environment_variable","secret_name":"API_KEY","injection_location":{"body":false,"header":true},"networking":{"type":"limited","allowed_hosts":["*.example.com:443"]}}`,
			secrets:  map[string]string{credentials.FieldSecretValue: "PLANTED value"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cred := &db.Credential{ID: "vcrd_test"}
			secrets, err := credspec.Parse(json.RawMessage(tc.auth), cred, keys)
			if err != nil {
				t.Fatalf("want the auth accepted, got %v", err)
			}
			var typ struct{ Type string }
			_ = json.Unmarshal([]byte(tc.auth), &typ)
			if cred.AuthType != typ.Type || cred.MCPServerURL != tc.wantURL || string(cred.Auth) != tc.wantAuth {
				t.Fatalf("want type %s, url %q, auth %s; got %s, %q, %s", typ.Type, tc.wantURL, tc.wantAuth, cred.AuthType, cred.MCPServerURL, cred.Auth)
			}
			if len(secrets) != len(tc.secrets) {
				t.Fatalf("want secrets %v sealed, got %v", tc.secrets, keysOf(secrets))
			}
			for field, want := range tc.secrets {
				if got := open(t, keys, cred.ID, field, secrets); got != want {
					t.Fatalf("want secret %s %q, got %q", field, want, got)
				}
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	keys := keyring(t)
	const bearer = `"type":"static_bearer","mcp_server_url":"https://mcp.example.com"`
	const env = `"type":"environment_variable","secret_name":"K","secret_value":"PLANTED"`
	const oauth = `"type":"mcp_oauth","mcp_server_url":"https://mcp.example.com","access_token":"PLANTED_a"`
	const refresh = `"client_id":"c","refresh_token":"PLANTED_r","token_endpoint":"https://a.example.com/t"`
	cases := []struct {
		name, auth, want string
	}{
		{"no type", `{}`, "auth.type: is required (static_bearer, mcp_oauth or environment_variable)"},
		{"unknown type", `{"type":"basic"}`, `auth.type: must be static_bearer, mcp_oauth or environment_variable, got "basic"`},
		{"member of another type", `{` + bearer + `,"token":"PLANTED","secret_name":"X"}`, "auth.secret_name: is not a field of static_bearer credentials (fields: type, mcp_server_url, token)"},
		{"no url", `{"type":"static_bearer","token":"PLANTED"}`, "auth.mcp_server_url: is required"},
		{"http to a remote host", `{"type":"static_bearer","mcp_server_url":"http://mcp.example.com","token":"PLANTED"}`, "auth.mcp_server_url: must use https (http is accepted for loopback hosts only)"},
		{"user info", `{"type":"static_bearer","mcp_server_url":"https://u:p@mcp.example.com","token":"PLANTED"}`, "auth.mcp_server_url: must not carry user information"},
		{"fragment", `{"type":"static_bearer","mcp_server_url":"https://mcp.example.com#f","token":"PLANTED"}`, "auth.mcp_server_url: must not have a fragment"},
		{"scheme", `{"type":"static_bearer","mcp_server_url":"ftp://mcp.example.com","token":"PLANTED"}`, `auth.mcp_server_url: must be an https URL, got scheme "ftp"`},
		{"no token", `{` + bearer + `}`, "auth.token: is required"},
		{"token with a space", `{` + bearer + `,"token":"PLANTED token"}`, "auth.token: must not contain spaces or control characters"},
		{"token too long", `{` + bearer + `,"token":"PLANTED` + strings.Repeat("x", credspec.MaxSecretBytes) + `"}`, "auth.token: must be at most 16384 bytes"},
		{"bad secret name", `{"type":"environment_variable","secret_name":"1K","secret_value":"PLANTED","networking":{"type":"unrestricted"}}`, "auth.secret_name: must be an environment variable name"},
		{"no networking", `{` + env + `}`, "auth.networking: is required"},
		{"limited without hosts", `{` + env + `,"networking":{"type":"limited"}}`, "auth.networking.allowed_hosts: is required for limited networking (at least one host)"},
		{"unrestricted with hosts", `{` + env + `,"networking":{"type":"unrestricted","allowed_hosts":["a.com"]}}`, "auth.networking.allowed_hosts: only limited networking takes allowed_hosts"},
		{"bad host", `{` + env + `,"networking":{"type":"limited","allowed_hosts":["a b"]}}`, `auth.networking.allowed_hosts[0]: must be a host name (optionally *.-prefixed, with an optional port), got "a b"`},
		{"no injection location", `{` + env + `,"networking":{"type":"unrestricted"},"injection_location":{"body":false}}`, "auth.injection_location: at least one of body and header must be true"},
		{"refresh without client id", `{` + oauth + `,"refresh":{"refresh_token":"PLANTED_r"}}`, "auth.refresh.client_id: is required"},
		{"refresh without endpoint auth", `{` + oauth + `,"refresh":{` + refresh + `}}`, "auth.refresh.token_endpoint_auth: is required"},
		{"none with a client secret", `{` + oauth + `,"refresh":{` + refresh + `,"token_endpoint_auth":{"type":"none","client_secret":"PLANTED_c"}}}`, "auth.refresh.token_endpoint_auth.client_secret: is not taken by type none"},
		{"unknown endpoint auth", `{` + oauth + `,"refresh":{` + refresh + `,"token_endpoint_auth":{"type":"jwt"}}}`, `auth.refresh.token_endpoint_auth.type: must be none, client_secret_basic or client_secret_post, got "jwt"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := credspec.Parse(json.RawMessage(tc.auth), &db.Credential{ID: "vcrd_test"}, keys)
			wantPublic(t, err, http.StatusBadRequest, tc.want)
		})
	}
}

// TestParseNotAnObject: auth must be a JSON object.
func TestParseNotAnObject(t *testing.T) {
	t.Parallel()
	_, err := credspec.Parse(json.RawMessage(`[]`), &db.Credential{ID: "vcrd_test"}, keyring(t))
	if err == nil || err.Error() != "auth: expected a JSON object" {
		t.Fatalf("want %q, got %v", "auth: expected a JSON object", err)
	}
}

// TestParseWithoutKeys: a server without an encryption key refuses
// secrets with 422, naming the field.
func TestParseWithoutKeys(t *testing.T) {
	t.Parallel()
	_, err := credspec.Parse(json.RawMessage(`{"type":"static_bearer","mcp_server_url":"https://mcp.example.com","token":"PLANTED"}`),
		&db.Credential{ID: "vcrd_test"}, nil)
	wantPublic(t, err, http.StatusUnprocessableEntity, "auth.token: this server cannot store credentials: it has no encryption key configured")
}

// created parses auth as a new credential, for Update.
func created(t *testing.T, keys *envelope.Keyring, auth string) (*db.Credential, db.Secrets) {
	t.Helper()
	cred := &db.Credential{ID: "vcrd_test"}
	secrets, err := credspec.Parse(json.RawMessage(auth), cred, keys)
	if err != nil {
		t.Fatalf("create %s: %v", auth, err)
	}
	return cred, secrets
}

const (
	oauthNoRefresh = `{"type":"mcp_oauth","mcp_server_url":"https://mcp.example.com","access_token":"PLANTED_a","expires_at":"2026-01-02T03:04:05Z"}`
	oauthPublic    = `{"type":"mcp_oauth","mcp_server_url":"https://mcp.example.com","access_token":"PLANTED_a",
		"refresh":{"client_id":"c","refresh_token":"PLANTED_r","token_endpoint":"https://a.example.com/t","token_endpoint_auth":{"type":"none"}}}`
	oauthSecret = `{"type":"mcp_oauth","mcp_server_url":"https://mcp.example.com","access_token":"PLANTED_a",
		"refresh":{"client_id":"c","refresh_token":"PLANTED_r","token_endpoint":"https://a.example.com/t","token_endpoint_auth":{"type":"client_secret_basic","client_secret":"PLANTED_c"}}}`
	envCred = `{"type":"environment_variable","secret_name":"K","secret_value":"PLANTED","networking":{"type":"unrestricted"}}`
)

func TestUpdate(t *testing.T) {
	t.Parallel()
	keys := keyring(t)
	cases := []struct {
		name, create, update, wantAuth string
		secrets                        map[string]string
	}{
		{name: "static bearer token", create: `{"type":"static_bearer","mcp_server_url":"https://mcp.example.com","token":"PLANTED_1"}`,
			update:   `{"type":"static_bearer","token":"PLANTED_2"}`,
			wantAuth: `{"type":"static_bearer","mcp_server_url":"https://mcp.example.com"}`,
			secrets:  map[string]string{credentials.FieldToken: "PLANTED_2"}},
		{name: "oauth expiry cleared", create: oauthNoRefresh, update: `{"type":"mcp_oauth","expires_at":null}`,
			wantAuth: `{"type":"mcp_oauth","mcp_server_url":"https://mcp.example.com","expires_at":null,"refresh":null}`, secrets: map[string]string{}},
		{name: "oauth refresh token, scope and client secret", create: oauthSecret,
			update:   `{"type":"mcp_oauth","access_token":"PLANTED_a2","refresh":{"refresh_token":"PLANTED_r2","scope":"s","token_endpoint_auth":{"type":"client_secret_post","client_secret":"PLANTED_c2"}}}`,
			wantAuth: `{"type":"mcp_oauth","mcp_server_url":"https://mcp.example.com","expires_at":null,"refresh":{"client_id":"c","token_endpoint":"https://a.example.com/t","token_endpoint_auth":{"type":"client_secret_basic"},"resource":null,"scope":"s"}}`,
			secrets: map[string]string{credentials.FieldAccessToken: "PLANTED_a2", credentials.FieldRefreshToken: "PLANTED_r2",
				credentials.FieldClientSecret: "PLANTED_c2"}},
		{name: "environment variable location and networking", create: envCred,
			update:   `{"type":"environment_variable","secret_value":"PLANTED_2","injection_location":{"body":true},"networking":{"type":"limited","allowed_hosts":["a.example.com"]}}`,
			wantAuth: `{"type":"environment_variable","secret_name":"K","injection_location":{"body":true,"header":true},"networking":{"type":"limited","allowed_hosts":["a.example.com"]}}`,
			secrets:  map[string]string{credentials.FieldSecretValue: "PLANTED_2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cur, stored := created(t, keys, tc.create)
			auth, secrets, err := credspec.Update(cur, stored, json.RawMessage(tc.update), keys)
			if err != nil {
				t.Fatalf("want the update accepted, got %v", err)
			}
			if string(auth) != tc.wantAuth {
				t.Fatalf("want auth %s, got %s", tc.wantAuth, auth)
			}
			if len(secrets) != len(tc.secrets) {
				t.Fatalf("want secrets %v sealed, got %v", tc.secrets, keysOf(secrets))
			}
			for field, want := range tc.secrets {
				if got := open(t, keys, cur.ID, field, secrets); got != want {
					t.Fatalf("want secret %s %q, got %q", field, want, got)
				}
			}
		})
	}
}

func TestUpdateRefuses(t *testing.T) {
	t.Parallel()
	keys := keyring(t)
	cases := []struct {
		name, create, update, want string
	}{
		{"type change", envCred, `{"type":"static_bearer"}`, `auth.type: must be environment_variable, the credential's type (a credential's type cannot change), got "static_bearer"`},
		{"server url", oauthNoRefresh, `{"type":"mcp_oauth","mcp_server_url":"https://other.example.com"}`, "auth.mcp_server_url: cannot be changed after create"},
		{"secret name", envCred, `{"type":"environment_variable","secret_name":"L"}`, "auth.secret_name: cannot be changed after create"},
		{"empty token", oauthNoRefresh, `{"type":"mcp_oauth","access_token":""}`, "auth.access_token: is required"},
		{"no refresh configuration", oauthNoRefresh, `{"type":"mcp_oauth","refresh":{"refresh_token":"PLANTED_r"}}`, "auth.refresh: the credential has no refresh configuration; create a new credential to add one"},
		{"refresh client id", oauthPublic, `{"type":"mcp_oauth","refresh":{"client_id":"d"}}`, "auth.refresh: only refresh_token, scope and token_endpoint_auth can be updated"},
		{"endpoint auth none", oauthSecret, `{"type":"mcp_oauth","refresh":{"token_endpoint_auth":{"type":"none"}}}`, `auth.refresh.token_endpoint_auth.type: must be client_secret_basic or client_secret_post, got "none"`},
		{"client secret of a public client", oauthPublic, `{"type":"mcp_oauth","refresh":{"token_endpoint_auth":{"type":"client_secret_basic","client_secret":"PLANTED_c"}}}`, "auth.refresh.token_endpoint_auth: the credential uses token endpoint auth none, which takes no client secret"},
		{"no injection location left", envCred, `{"type":"environment_variable","injection_location":{"header":false}}`, "auth.injection_location: at least one of body and header must stay true"},
		{"bad networking", envCred, `{"type":"environment_variable","networking":{"type":"open"}}`, `auth.networking.type: must be unrestricted or limited, got "open"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cur, stored := created(t, keys, tc.create)
			_, _, err := credspec.Update(cur, stored, json.RawMessage(tc.update), keys)
			wantPublic(t, err, http.StatusBadRequest, tc.want)
		})
	}
}
