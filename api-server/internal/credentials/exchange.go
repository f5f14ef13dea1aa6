package credentials

import (
	"bytes"
	"context"
	"encoding/json"
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

// Exchange exchanges the refresh token in secrets at the configuration's
// token endpoint (RFC 6749 section 6), authenticating the client as
// configured. It returns the new tokens, or nil and the endpoint's
// redacted rejection (nil when there was no usable answer).
func Exchange(ctx context.Context, client *http.Client, r *Refresh, secrets map[string]string, redact func(string) string) (*Tokens, *HTTPResponse) {
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
	ctx, cancel := context.WithTimeout(ctx, RefreshTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, nil
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if r.TokenEndpointAuth.Type == "client_secret_basic" {
		req.SetBasicAuth(url.QueryEscape(r.ClientID), url.QueryEscape(secrets[FieldClientSecret]))
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, ReadResponse(resp, redact)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, nil
	}
	var t Tokens
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&t); err != nil || t.AccessToken == "" {
		// Never echo the body: a malformed answer may still hold tokens.
		return nil, &HTTPResponse{StatusCode: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
			Body: "(the token endpoint's answer has no access_token)"}
	}
	return &t, nil
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
