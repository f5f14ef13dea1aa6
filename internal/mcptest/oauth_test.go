package mcptest_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/internal/mcptest"
)

// TestOAuthTokenEndpointRotates: a refresh token works once (with either
// client authentication method); reusing it, or a revoked one, is
// invalid_grant; wrong client credentials are invalid_client.
func TestOAuthTokenEndpointRotates(t *testing.T) {
	t.Parallel()
	srv := mcptest.NewOAuth(t)
	_, rt := srv.Issue(time.Hour)
	type answer struct {
		Status       int
		Error        string `json:"error"`
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		TokenType    string `json:"token_type"`
		ExpiresIn    int    `json:"expires_in"`
	}
	refresh := func(token string, basic bool, secret string) answer {
		t.Helper()
		form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {token}}
		if !basic {
			form.Set("client_id", srv.ClientID)
			form.Set("client_secret", secret)
		}
		req, err := http.NewRequest(http.MethodPost, srv.TokenURL, strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if basic {
			req.SetBasicAuth(srv.ClientID, secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		a := answer{Status: resp.StatusCode}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatalf("token endpoint answered %d with a body that is not JSON: %v", resp.StatusCode, err)
		}
		return a
	}
	first := refresh(rt, true, srv.ClientSecret)
	if first.Status != http.StatusOK || first.AccessToken == "" || first.RefreshToken == "" || first.RefreshToken == rt ||
		first.TokenType != "Bearer" || first.ExpiresIn != 3600 {
		t.Fatalf("refresh (client_secret_basic) = %+v, want 200 with a new pair, Bearer, expires_in 3600", first)
	}
	if again := refresh(rt, true, srv.ClientSecret); again.Status != http.StatusBadRequest || again.Error != "invalid_grant" {
		t.Errorf("reused refresh token = %+v, want 400 invalid_grant", again)
	}
	if bad := refresh(first.RefreshToken, false, "wrong"); bad.Status != http.StatusUnauthorized || bad.Error != "invalid_client" {
		t.Errorf("wrong client secret = %+v, want 401 invalid_client", bad)
	}
	second := refresh(first.RefreshToken, false, srv.ClientSecret)
	if second.Status != http.StatusOK || second.RefreshToken == first.RefreshToken {
		t.Fatalf("refresh (client_secret_post) = %+v, want 200 with a new pair", second)
	}
	srv.RevokeRefreshTokens()
	if revoked := refresh(second.RefreshToken, true, srv.ClientSecret); revoked.Status != http.StatusBadRequest || revoked.Error != "invalid_grant" {
		t.Errorf("revoked refresh token = %+v, want 400 invalid_grant", revoked)
	}
	if n := srv.Refreshes(); n != 2 {
		t.Errorf("Refreshes() = %d, want 2", n)
	}
}
