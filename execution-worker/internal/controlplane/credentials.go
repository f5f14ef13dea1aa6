package controlplane

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/mangohq/mango/execution-worker/mcp"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// maxCachedCredentials bounds the tokens MCPCredentials keeps; beyond
// it, expired entries are dropped, then the cache is emptied.
const maxCachedCredentials = 4096

// MCPCredentials supplies the bearer tokens sessions send to their MCP
// servers (mcp.Credentials) from the ControlPlane's Credentials service.
// A token is kept in memory for as long as the api-server allows (at most
// a minute, less when it expires sooner) and never written anywhere.
type MCPCredentials struct {
	client pb.CredentialsClient
	now    func() time.Time

	mu    sync.Mutex
	cache map[credentialKey]cachedToken
}

type credentialKey struct{ session, url string }

type cachedToken struct {
	token string // "" when no credential covers the server
	until time.Time
}

// NewMCPCredentials returns the credential source over client.
func NewMCPCredentials(client pb.CredentialsClient) *MCPCredentials {
	return &MCPCredentials{client: client, now: time.Now, cache: map[credentialKey]cachedToken{}}
}

// Token implements mcp.Credentials. With stale (a token the server just
// refused), the api-server is asked to refresh it, bypassing the cache.
// A refresh that failed is an error wrapping mcp.ErrAuthFailed.
func (m *MCPCredentials) Token(ctx context.Context, sessionID, url, stale string) (string, error) {
	key := credentialKey{sessionID, url}
	if stale == "" {
		if tok, ok := m.cached(key); ok {
			return tok, nil
		}
	}
	req := &pb.GetMCPCredentialRequest{SessionId: sessionID, McpServerUrl: url}
	if stale != "" {
		sum := sha256.Sum256([]byte(stale))
		req.StaleTokenSha256 = sum[:]
	}
	resp, err := m.client.GetMCPCredential(ctx, req)
	if err != nil {
		return "", fmt.Errorf("get the credential for MCP server %s: %w", url, err)
	}
	if reason := resp.GetAuthFailure(); reason != "" {
		m.forget(key)
		return "", &authFailure{credential: resp.GetCredentialId(), reason: reason}
	}
	m.remember(key, resp.GetToken(), time.Duration(resp.GetCacheSeconds())*time.Second)
	return resp.GetToken(), nil
}

// authFailure is the api-server's reason why a credential gave no token.
type authFailure struct{ credential, reason string }

func (e *authFailure) Error() string { return "credential " + e.credential + ": " + e.reason }

// Is makes errors.Is(err, mcp.ErrAuthFailed) true.
func (e *authFailure) Is(target error) bool { return target == mcp.ErrAuthFailed }

func (m *MCPCredentials) cached(key credentialKey) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.cache[key]
	if !ok || !m.now().Before(c.until) {
		return "", false
	}
	return c.token, true
}

func (m *MCPCredentials) remember(key credentialKey, token string, d time.Duration) {
	if d <= 0 {
		m.forget(key)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if len(m.cache) >= maxCachedCredentials {
		for k, c := range m.cache {
			if !now.Before(c.until) {
				delete(m.cache, k)
			}
		}
		if len(m.cache) >= maxCachedCredentials {
			clear(m.cache)
		}
	}
	m.cache[key] = cachedToken{token: token, until: now.Add(d)}
}

func (m *MCPCredentials) forget(key credentialKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.cache, key)
}
