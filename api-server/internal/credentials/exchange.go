package credentials

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/mangohq/mango/internal/netguard"
)

// MaxResponseBody bounds the part of an endpoint's error response kept.
const MaxResponseBody = 4 << 10

// HTTPResponse is an error response of an MCP server or a token endpoint,
// with the credential's secrets redacted.
type HTTPResponse struct {
	StatusCode    int    `json:"status_code"`
	ContentType   string `json:"content_type"`
	Body          string `json:"body"`
	BodyTruncated bool   `json:"body_truncated"`
}

// ReadResponse reads an error response, bounded, with redact applied to
// its body.
func ReadResponse(resp *http.Response, redact func(string) string) *HTTPResponse {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody+1))
	truncated := len(b) > MaxResponseBody
	if truncated {
		b = b[:MaxResponseBody]
	}
	return &HTTPResponse{StatusCode: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
		Body: redact(strings.ToValidUTF8(string(b), "")), BodyTruncated: truncated}
}

// Tokens is a token endpoint's answer to a refresh.
type Tokens struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    *int64 `json:"expires_in"`
}

// RefusedError is a token endpoint's refusal of a refresh: an answer
// other than 200, or a 200 without an access token. Response is the
// answer with the credential's secrets redacted.
type RefusedError struct {
	Response *HTTPResponse
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("token endpoint refused the refresh: status %d", e.Response.StatusCode)
}

// Exchange exchanges the refresh token in secrets at the configuration's
// token endpoint (RFC 6749 section 6), authenticating the client as
// configured. It returns the new tokens; a *RefusedError with the
// endpoint's redacted answer when the endpoint refused; or an error naming
// the step that failed (building the request, sending it, reading the
// answer) when there was no usable answer. No error holds a secret.
func Exchange(ctx context.Context, client *http.Client, r *Refresh, secrets map[string]string, redact func(string) string) (*Tokens, error) {
	ctx, cancel := context.WithTimeout(ctx, RefreshTimeout)
	defer cancel()
	req, err := refreshRequest(ctx, r, secrets)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		// A transport or TLS error names the endpoint's URL, never the
		// form or the headers that carry the secrets.
		return nil, fmt.Errorf("refresh at the token endpoint: send: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, &RefusedError{Response: ReadResponse(resp, redact)}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("refresh at the token endpoint %s: read the answer: %w", r.TokenEndpoint, err)
	}
	var t Tokens
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&t); err != nil || t.AccessToken == "" {
		// Never echo the body: a malformed answer may still hold tokens.
		return nil, &RefusedError{Response: &HTTPResponse{StatusCode: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
			Body: "(the token endpoint's answer has no access_token)"}}
	}
	return &t, nil
}

// refreshRequest builds the refresh request of r with the secrets in its
// form or its basic authorization.
func refreshRequest(ctx context.Context, r *Refresh, secrets map[string]string) (*http.Request, error) {
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {secrets[FieldRefreshToken]}}
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
		form.Set("client_secret", secrets[FieldClientSecret])
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		// The error names the endpoint only: the form is not parsed yet.
		return nil, fmt.Errorf("refresh at the token endpoint: build the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if r.TokenEndpointAuth.Type == "client_secret_basic" {
		req.SetBasicAuth(url.QueryEscape(r.ClientID), url.QueryEscape(secrets[FieldClientSecret]))
	}
	return req, nil
}

// NewHTTPClient returns the client for token endpoints: it refuses
// loopback, private and link-local addresses (checked on the dialled
// address, so DNS rebinding does not get around it) unless allowPrivate,
// does not follow redirects, and keeps no idle connection (refreshes are
// rare).
func NewHTTPClient(allowPrivate bool) *http.Client {
	t := netguard.Transport(allowPrivate)
	t.DisableKeepAlives = true
	t.TLSHandshakeTimeout = RefreshTimeout
	return &http.Client{Timeout: RefreshTimeout, Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
