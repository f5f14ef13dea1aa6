package sandboxdaytona

import (
	"context"
	"encoding/json"
	"errors"
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
	policy := httpcall.Policy{Base: p.cfg.RetryBase, Max: p.cfg.RetryMax, Retries: p.cfg.Retries}
	_, _, err := httpcall.Retry(ctx, policy, func(ctx context.Context) (bool, time.Duration, error) {
		var wait time.Duration
		var err error
		if data, wait, err = p.once(ctx, req); err == nil {
			return false, 0, nil
		}
		st := statusOf(err)
		return st == http.StatusTooManyRequests ||
			(req.idempotent && (st >= 500 || st == 0 && !errors.Is(err, errMalformed))), wait, err
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}

// errMalformed marks a response that does not follow the protocol; it is
// never retried.
var errMalformed = errors.New("malformed response")

func (p *Provider) once(ctx context.Context, req request) ([]byte, time.Duration, error) {
	resp, wait, err := p.send(ctx, req)
	if err != nil {
		return nil, wait, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody))
	if err != nil {
		return nil, 0, fmt.Errorf("daytona: %s %s: read body: %w", req.method, redact(req.url), err)
	}
	return data, 0, nil
}

// stream runs req with the retries of do and returns the response, its
// body unread (the caller closes it).
func (p *Provider) stream(ctx context.Context, req request) (*http.Response, error) {
	var resp *http.Response
	policy := httpcall.Policy{Base: p.cfg.RetryBase, Max: p.cfg.RetryMax, Retries: p.cfg.Retries}
	_, _, err := httpcall.Retry(ctx, policy, func(ctx context.Context) (bool, time.Duration, error) {
		var wait time.Duration
		var err error
		if resp, wait, err = p.send(ctx, req); err == nil {
			return false, 0, nil
		}
		st := statusOf(err)
		return st == http.StatusTooManyRequests ||
			(req.idempotent && (st >= 500 || st == 0 && !errors.Is(err, errMalformed))), wait, err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// send makes one attempt of req and returns a 2xx response with its body
// unread, or an *httpcall.StatusError (with the server's Retry-After).
func (p *Provider) send(ctx context.Context, req request) (*http.Response, time.Duration, error) {
	var body io.Reader
	ctype := ""
	if req.body != nil {
		var err error
		if body, ctype, err = req.body(); err != nil {
			return nil, 0, err
		}
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, req.url, body)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if req.length > 0 {
		hr.ContentLength = req.length
	}
	hr.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	hr.Header.Set("Accept", "application/json")
	if ctype != "" {
		hr.Header.Set("Content-Type", ctype)
	}
	resp, err := p.cfg.HTTPClient.Do(hr)
	if err != nil {
		return nil, 0, fmt.Errorf("daytona: %s %s: %w", req.method, redact(req.url), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, httpcall.RetryAfter(resp.Header), &httpcall.StatusError{
			Service: "daytona", Method: req.method, Target: redact(req.url), Status: resp.StatusCode, Body: string(b),
			MessageKeys: []string{"message", "error"},
		}
	}
	return resp, 0, nil
}

// redact drops the query of a URL from error messages (paths in the
// sandbox are not secret, but keep messages short).
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// decode unmarshals a JSON response, reporting a protocol error clearly.
func decode(what string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		snippet := data
		if len(snippet) > 64 {
			snippet = snippet[:64]
		}
		return fmt.Errorf("daytona: %s: %w: %v (body starts %q)", what, errMalformed, err, snippet)
	}
	return nil
}
