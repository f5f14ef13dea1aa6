package sandboxdaytona

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
)

// maxErrorBody bounds how much of an error response is kept.
const maxErrorBody = 4 << 10

// maxJSONBody bounds a JSON response (an exec result carries up to twice
// MaxOutput, base64-encoded).
const maxJSONBody = 1 << 30

// statusOf returns the HTTP status of a non-2xx answer in err, or 0.
var statusOf = httpcall.StatusOf

// request is one HTTP call.
type request struct {
	method string
	url    string
	// body returns a fresh body for every attempt (nil: no body).
	body       func() (io.Reader, string, error)
	idempotent bool // retried on 5xx, 429 and transport errors
	// length is the body's length when known in advance (0: as the
	// reader tells, or chunked).
	length int64
}

// do runs req with retries and returns the response body (bounded).
func (p *Provider) do(ctx context.Context, req request) ([]byte, error) {
	var data []byte
	err := p.retry(ctx, req, func(ctx context.Context) (time.Duration, error) {
		resp, wait, err := p.send(ctx, req)
		if err != nil {
			return wait, err
		}
		defer func() { _ = resp.Body.Close() }()
		if data, err = io.ReadAll(io.LimitReader(resp.Body, maxJSONBody)); err != nil {
			return 0, fmt.Errorf("daytona: %s %s: read body: %w", req.method, redact(req.url), err)
		}
		return 0, nil
	})
	return data, err
}

// stream runs req with the retries of do and returns the response, its
// body unread (the caller closes it).
func (p *Provider) stream(ctx context.Context, req request) (*http.Response, error) {
	var resp *http.Response
	err := p.retry(ctx, req, func(ctx context.Context) (wait time.Duration, err error) {
		resp, wait, err = p.send(ctx, req)
		return wait, err
	})
	return resp, err
}

// retry runs attempt until it succeeds or req may not be sent again.
func (p *Provider) retry(ctx context.Context, req request, attempt func(context.Context) (time.Duration, error)) error {
	policy := httpcall.Policy{Base: p.cfg.RetryBase, Max: p.cfg.RetryMax, Retries: p.cfg.Retries}
	_, _, err := httpcall.Retry(ctx, policy, func(ctx context.Context) (bool, time.Duration, error) {
		wait, err := attempt(ctx)
		return err != nil && httpcall.Transient(err, req.idempotent), wait, err
	})
	return err
}

// send makes one attempt of req and returns a 2xx response with its body
// unread, or an *httpcall.StatusError (with the server's Retry-After).
func (p *Provider) send(ctx context.Context, req request) (*http.Response, time.Duration, error) {
	hr, err := httpcall.NewRequest(ctx, req.method, req.url, req.body, req.length)
	if err != nil {
		return nil, 0, err
	}
	hr.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	hr.Header.Set("Accept", "application/json")
	resp, err := p.cfg.HTTPClient.Do(hr)
	if err != nil {
		return nil, 0, fmt.Errorf("daytona: %s %s: %w", req.method, redact(req.url), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		wait, err := httpcall.ReadStatusError(resp, maxErrorBody, httpcall.StatusError{
			Service: "daytona", Method: req.method, Target: redact(req.url), MessageKeys: []string{"message", "error"},
		})
		return nil, wait, err
	}
	return resp, 0, nil
}

// redact drops the query of a URL from error messages (paths in the
// sandbox are not secret, but keep messages short).
func redact(u string) string {
	u, _, _ = strings.Cut(u, "?")
	return u
}

// decode unmarshals a JSON response, reporting a protocol error clearly.
func decode(what string, data []byte, v any) error { return httpcall.Decode("daytona", what, data, v) }

// errMalformed marks a response that does not follow the protocol; it is
// never retried.
var errMalformed = httpcall.ErrMalformed
