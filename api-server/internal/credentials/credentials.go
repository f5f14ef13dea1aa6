// Package credentials works with the credentials of vaults once they are
// stored: it opens their sealed secrets, finds the one a session sends to
// an MCP server, and refreshes mcp_oauth access tokens (RFC 6749 section
// 6), storing the rotated tokens back under the credential's row lock so
// that concurrent refreshes, from any number of api-server replicas, never
// lose the newer refresh token.
package credentials

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/db"
)

// Secret fields of credentials, as stored (db.Secrets keys). They are
// write-only: sealed on input, never returned.
const (
	FieldToken        = "token"
	FieldAccessToken  = "access_token"
	FieldRefreshToken = "refresh_token"
	FieldClientSecret = "client_secret"
	FieldSecretValue  = "secret_value"
)

// The stored (and returned) non-secret auth of each credential type, in
// its wire form.
type (
	// StaticBearer is a static_bearer credential's auth.
	StaticBearer struct {
		Type         string `json:"type"`
		MCPServerURL string `json:"mcp_server_url"`
	}
	// TokenEndpointAuth is how the client authenticates to the token
	// endpoint: none, client_secret_basic or client_secret_post.
	TokenEndpointAuth struct {
		Type string `json:"type"`
	}
	// Refresh is an mcp_oauth credential's refresh configuration.
	Refresh struct {
		ClientID          string            `json:"client_id"`
		TokenEndpoint     string            `json:"token_endpoint"`
		TokenEndpointAuth TokenEndpointAuth `json:"token_endpoint_auth"`
		Resource          *string           `json:"resource"`
		Scope             *string           `json:"scope"`
	}
	// MCPOAuth is an mcp_oauth credential's auth.
	MCPOAuth struct {
		Type         string     `json:"type"`
		MCPServerURL string     `json:"mcp_server_url"`
		ExpiresAt    *time.Time `json:"expires_at"`
		Refresh      *Refresh   `json:"refresh"`
	}
)

// ErrAuthFailed is what every *AuthError matches with errors.Is.
var ErrAuthFailed = errors.New("MCP authentication failed")

// AuthError reports that no usable token can be had for an MCP server.
// Its message names the credential and the reason, never a secret.
type AuthError struct {
	CredentialID string
	// Reason is the public account of the failure: what a worker and a
	// client may be told.
	Reason string
	// Cause is the internal error behind Reason (nil: none), for logs;
	// it holds no secret.
	Cause error
}

func (e *AuthError) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("credential %s: %s: %v", e.CredentialID, e.Reason, e.Cause)
	}
	return fmt.Sprintf("credential %s: %s", e.CredentialID, e.Reason)
}

// Unwrap returns the internal cause.
func (e *AuthError) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, ErrAuthFailed) true.
func (e *AuthError) Is(target error) bool { return target == ErrAuthFailed }

// Service resolves and refreshes credentials.
type Service struct {
	Store   *db.Store
	Secrets *envelope.Keyring
	// HTTP calls token endpoints (a guarded client: package netguard).
	HTTP *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Skew is how long before its expiry an access token is refreshed;
	// 0 means DefaultSkew.
	Skew time.Duration
}

// DefaultSkew is the default Service.Skew.
const DefaultSkew = time.Minute

// MaxCache bounds how long a worker keeps a token it was given.
const MaxCache = time.Minute

// RefreshTimeout bounds one call to a token endpoint.
const RefreshTimeout = 10 * time.Second

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) skew() time.Duration {
	if s.Skew > 0 {
		return s.Skew
	}
	return DefaultSkew
}

// Open opens a credential's secrets, by field, from their sealed form.
func (s *Service) Open(credID string, sealed db.Secrets) (map[string]string, error) {
	out := make(map[string]string, len(sealed))
	for field, v := range sealed {
		if s.Secrets.Empty() {
			return nil, fmt.Errorf("open credential %s: no vault keys configured", credID)
		}
		plain, err := s.Secrets.Open(v, db.CredentialSecretPurpose(credID, field))
		if err != nil {
			// The cause names at most a key id, never key material.
			return nil, fmt.Errorf("open the %s of credential %s: %w", field, credID, err)
		}
		out[field] = string(plain)
	}
	return out, nil
}

// Redactor returns a function replacing every secret value in a text.
func Redactor(secrets map[string]string) func(string) string {
	return func(s string) string {
		for _, v := range secrets {
			if v != "" {
				s = strings.ReplaceAll(s, v, "[redacted]")
			}
		}
		return s
	}
}

// NormalizeURL is the form in which MCP server URLs are compared: scheme
// and host in lower case, no default port, no trailing slash, no
// fragment.
func NormalizeURL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return strings.TrimRight(strings.TrimSpace(raw), "/")
	}
	u.Scheme = strings.ToLower(u.Scheme)
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	u.Host = host
	if port != "" {
		u.Host += ":" + port
	}
	u.Fragment, u.RawFragment = "", ""
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String()
}

// MCPToken is the token a session sends to an MCP server.
type MCPToken struct {
	// CredentialID is the matching credential; "" when none matches (then
	// nothing is sent).
	CredentialID string
	Token        string
	ExpiresAt    *time.Time
	// CacheFor is how long the caller may keep Token.
	CacheFor time.Duration
}

// MCPToken returns the token the session sends to the MCP server at
// serverURL: that of the first live credential of the session's vaults,
// in their order, whose mcp_server_url matches. An mcp_oauth access token
// that expires within the skew, or whose SHA-256 is stale (the server
// just refused it), is refreshed first. A refresh that fails, or a
// refused token that cannot be refreshed, is an *AuthError.
func (s *Service) MCPToken(ctx context.Context, sessionID, serverURL string, stale []byte) (MCPToken, error) {
	sess, err := s.Store.SessionGet(ctx, sessionID)
	if err != nil {
		return MCPToken{}, err
	}
	cred, err := s.match(ctx, sess.VaultIDs, serverURL)
	if err != nil || cred == nil {
		return MCPToken{}, err
	}
	sealed, err := s.Store.CredentialSecrets(ctx, cred.ID)
	if err != nil {
		return MCPToken{}, err
	}
	secrets, err := s.Open(cred.ID, sealed)
	if err != nil {
		return MCPToken{}, err
	}
	out := MCPToken{CredentialID: cred.ID, CacheFor: MaxCache}
	switch cred.AuthType {
	case db.CredentialStaticBearer:
		out.Token = secrets[FieldToken]
		if stale != nil && sameToken(stale, out.Token) {
			return MCPToken{}, &AuthError{CredentialID: cred.ID, Reason: "the MCP server refused its static bearer token"}
		}
		return out, nil
	case db.CredentialMCPOAuth:
	default:
		return MCPToken{}, nil
	}
	var auth MCPOAuth
	if err := json.Unmarshal(cred.Auth, &auth); err != nil {
		return MCPToken{}, fmt.Errorf("decode auth of credential %s: %w", cred.ID, err)
	}
	token := secrets[FieldAccessToken]
	refused := stale != nil && sameToken(stale, token)
	expiring := auth.ExpiresAt != nil && !s.now().Add(s.skew()).Before(*auth.ExpiresAt)
	canRefresh := auth.Refresh != nil && secrets[FieldRefreshToken] != ""
	switch {
	case refused && !canRefresh:
		return MCPToken{}, &AuthError{CredentialID: cred.ID, Reason: "the MCP server refused its access token and it has no refresh token"}
	case (refused || expiring) && canRefresh:
		return s.refresh(ctx, cred, stale)
	}
	out.Token, out.ExpiresAt, out.CacheFor = token, auth.ExpiresAt, s.cacheFor(auth.ExpiresAt)
	return out, nil
}

// cacheFor is how long a token expiring at exp may be kept: until the
// skew before its expiry, at most MaxCache.
func (s *Service) cacheFor(exp *time.Time) time.Duration {
	d := MaxCache
	if exp != nil {
		d = min(d, exp.Sub(s.now().Add(s.skew())))
	}
	return max(d, 0)
}

func sameToken(sum []byte, token string) bool {
	h := sha256.Sum256([]byte(token))
	return bytes.Equal(sum, h[:])
}

// match returns the first live credential of the vaults, in order, for
// the MCP server (nil when none).
func (s *Service) match(ctx context.Context, vaultIDs []string, serverURL string) (*db.Credential, error) {
	if len(vaultIDs) == 0 {
		return nil, nil
	}
	creds, err := s.Store.CredentialsOfVaults(ctx, vaultIDs)
	if err != nil {
		return nil, err
	}
	want := NormalizeURL(serverURL)
	for _, vid := range vaultIDs {
		for _, c := range creds {
			if c.VaultID == vid && c.MCPServerURL != "" && NormalizeURL(c.MCPServerURL) == want {
				return c, nil
			}
		}
	}
	return nil, nil
}

// refresh exchanges the credential's refresh token with the row locked,
// deciding again on what is stored once the lock is held: when another
// refresh or an update stored newer tokens meanwhile (the access token is
// no longer the stale one nor expiring), those are returned instead.
func (s *Service) refresh(ctx context.Context, cred *db.Credential, stale []byte) (MCPToken, error) {
	var out MCPToken
	var failure error
	var failedState time.Time
	_, err := s.Store.CredentialUpdate(ctx, cred.VaultID, cred.ID, func(cur *db.Credential, stored db.Secrets) (*db.Credential, db.Secrets, error) {
		secrets, err := s.Open(cur.ID, stored)
		if err != nil {
			return nil, nil, err
		}
		var auth MCPOAuth
		if err := json.Unmarshal(cur.Auth, &auth); err != nil {
			return nil, nil, fmt.Errorf("decode auth of credential %s: %w", cur.ID, err)
		}
		out = MCPToken{CredentialID: cur.ID, Token: secrets[FieldAccessToken], ExpiresAt: auth.ExpiresAt, CacheFor: s.cacheFor(auth.ExpiresAt)}
		refused := stale != nil && sameToken(stale, out.Token)
		expiring := auth.ExpiresAt != nil && !s.now().Add(s.skew()).Before(*auth.ExpiresAt)
		if !refused && !expiring {
			return cur, nil, nil
		}
		if auth.Refresh == nil || secrets[FieldRefreshToken] == "" {
			failure = &AuthError{CredentialID: cur.ID, Reason: "the access token needs a refresh and the credential has no refresh token"}
			failedState = cur.UpdatedAt
			return cur, nil, nil
		}
		t, err := Exchange(ctx, s.HTTP, auth.Refresh, secrets, Redactor(secrets))
		if err != nil {
			failure = &AuthError{CredentialID: cur.ID, Reason: refusal(auth.Refresh.TokenEndpoint, err), Cause: err}
			failedState = cur.UpdatedAt
			return cur, nil, nil
		}
		next, sealed, err := s.rotated(cur, auth, t)
		if err != nil {
			return nil, nil, err
		}
		exp := s.expiry(t)
		out = MCPToken{CredentialID: cur.ID, Token: t.AccessToken, ExpiresAt: exp, CacheFor: s.cacheFor(exp)}
		return next, sealed, nil
	})
	if err != nil {
		return MCPToken{}, err
	}
	if failure != nil {
		// The client learns of it by webhook; the notification is best
		// effort: the next failing refresh of the same state writes it.
		_ = s.Store.CredentialRefreshFailed(ctx, cred.ID, failedState, s.now())
		return MCPToken{}, failure
	}
	return out, nil
}

// refusal describes a failed refresh, err from Exchange: the endpoint's
// status and OAuth error code, never its body (it may echo secrets).
func refusal(endpoint string, err error) string {
	var refused *RefusedError
	if !errors.As(err, &refused) {
		return fmt.Sprintf("refreshing the access token failed: the token endpoint %s could not be reached", endpoint)
	}
	r := refused.Response
	var body struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal([]byte(r.Body), &body)
	if body.Error != "" && len(body.Error) <= 64 && !strings.ContainsAny(body.Error, " \n\"") {
		return fmt.Sprintf("refreshing the access token failed: the token endpoint %s answered %d %s", endpoint, r.StatusCode, body.Error)
	}
	return fmt.Sprintf("refreshing the access token failed: the token endpoint %s answered %d", endpoint, r.StatusCode)
}

// expiry is when the access token of a refresh expires (nil: unknown).
func (s *Service) expiry(t *Tokens) *time.Time {
	if t.ExpiresIn == nil {
		return nil
	}
	exp := s.now().Add(time.Duration(*t.ExpiresIn) * time.Second).UTC()
	return &exp
}

// rotated is the credential after a refresh that returned t, and the
// secrets to store, sealed.
func (s *Service) rotated(cur *db.Credential, auth MCPOAuth, t *Tokens) (*db.Credential, db.Secrets, error) {
	auth.ExpiresAt = s.expiry(t)
	secrets := db.Secrets{}
	var err error
	if secrets[FieldAccessToken], err = s.Secrets.Seal([]byte(t.AccessToken), db.CredentialSecretPurpose(cur.ID, FieldAccessToken)); err != nil {
		return nil, nil, fmt.Errorf("seal rotated access token: %w", err)
	}
	if t.RefreshToken != "" {
		if secrets[FieldRefreshToken], err = s.Secrets.Seal([]byte(t.RefreshToken), db.CredentialSecretPurpose(cur.ID, FieldRefreshToken)); err != nil {
			return nil, nil, fmt.Errorf("seal rotated refresh token: %w", err)
		}
	}
	next := *cur
	if next.Auth, err = json.Marshal(auth); err != nil {
		return nil, nil, err
	}
	next.UpdatedAt = s.now()
	return &next, secrets, nil
}

// StoreRotated stores the tokens of a refresh made with the refresh token
// sealed as usedSealed, unless the stored refresh token changed since:
// then a concurrent refresh or an update stored newer tokens, which win.
func (s *Service) StoreRotated(ctx context.Context, cred *db.Credential, usedSealed []byte, t *Tokens) error {
	_, err := s.Store.CredentialUpdate(ctx, cred.VaultID, cred.ID, func(cur *db.Credential, stored db.Secrets) (*db.Credential, db.Secrets, error) {
		if !bytes.Equal(stored[FieldRefreshToken], usedSealed) {
			return cur, nil, nil
		}
		var auth MCPOAuth
		if err := json.Unmarshal(cur.Auth, &auth); err != nil {
			return nil, nil, fmt.Errorf("decode auth of credential %s: %w", cur.ID, err)
		}
		return s.rotated(cur, auth, t)
	})
	return err
}
