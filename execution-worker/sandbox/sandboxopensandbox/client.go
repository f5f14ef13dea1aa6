package sandboxopensandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
)

// statusOf and codeOf read the non-2xx answer (an *httpcall.OpError) in
// an error.
var (
	statusOf = httpcall.StatusOf
	codeOf   = httpcall.CodeOf
)

// request is one HTTP call.
type request struct {
	method, url string
	header      http.Header
	// body returns a fresh body for every attempt (nil: no body).
	body         func() (io.Reader, string, error)
	idempotent   bool // retried on 5xx and 429
	onlyRetry429 bool
	// length is the body's length when known in advance (0: as the
	// reader tells, or chunked).
	length int64
}

// do sends r, retrying idempotent calls on 5xx and 429 with capped
// exponential backoff (honouring Retry-After up to [httpcall.MaxWait]). It
// returns the response of the final attempt when it is a 2xx, else an
// *httpcall.OpError, which counts the attempts when the retries ran out.
func (p *Provider) do(ctx context.Context, op string, r request) (*http.Response, error) {
	policy := httpcall.Policy{
		Base: p.cfg.RetryBase, Max: p.cfg.RetryMax, Retries: p.cfg.MaxAttempts - 1,
		// RetryMax alone caps the backoff; attempt caps Retry-After.
		MaxWait: max(p.cfg.RetryMax, httpcall.MaxWait),
	}
	var resp *http.Response
	attempts, gaveUp, err := httpcall.Retry(ctx, policy, func(ctx context.Context) (again bool, wait time.Duration, err error) {
		resp, again, wait, err = p.attempt(ctx, op, r)
		return again, wait, err
	})
	var ae *httpcall.OpError
	if gaveUp && attempts > 1 && errors.As(err, &ae) {
		ae.Attempts = attempts
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// attempt sends r once. A non-2xx answer is an *httpcall.OpError; again reports
// that r may retry it, after wait when the server said so.
func (p *Provider) attempt(ctx context.Context, op string, r request) (resp *http.Response, again bool, wait time.Duration, err error) {
	req, err := httpcall.NewRequest(ctx, r.method, r.url, r.body, r.length)
	if err != nil {
		return nil, false, 0, fmt.Errorf("%s: %w", op, err)
	}
	for k, vs := range r.header {
		req.Header[k] = append(req.Header[k], vs...)
	}
	resp, err = p.cfg.HTTPClient.Do(req)
	if err != nil {
		// Not retried; a cancelled ctx makes Retry return ctx.Err().
		return nil, false, 0, fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, false, 0, nil
	}
	retryable := resp.StatusCode == http.StatusTooManyRequests ||
		(resp.StatusCode >= 500 && !r.onlyRetry429)
	wait = min(httpcall.RetryAfter(resp.Header), httpcall.MaxWait)
	return nil, r.idempotent && retryable, wait, readAPIError(op, resp)
}

func readAPIError(op string, resp *http.Response) error {
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &httpcall.OpError{Status: resp.StatusCode, Op: op}
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &body) == nil && (body.Code != "" || body.Message != "") {
		e.Code, e.Message = body.Code, body.Message
	} else {
		e.Message = string(data)
	}
	return e
}

// lifecycle calls the lifecycle API and decodes a JSON answer into out
// (when non-nil).
func (p *Provider) lifecycle(ctx context.Context, op, method, path string, in, out any, idempotent bool) error {
	r := request{method: method, url: p.base + "/v1" + path, header: p.authHeader(), idempotent: idempotent}
	if in != nil {
		r.body = httpcall.JSONBody(in)
	}
	if method == http.MethodPost && !idempotent {
		// A 429 was not processed: resending it cannot duplicate anything.
		r.idempotent, r.onlyRetry429 = true, true
	}
	resp, err := p.do(ctx, op, r)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s: decode response: %w", op, err)
	}
	return nil
}

func (p *Provider) authHeader() http.Header {
	h := http.Header{}
	h.Set("Accept", "application/json")
	if p.cfg.APIKey != "" {
		h.Set("OPEN-SANDBOX-API-KEY", p.cfg.APIKey)
	}
	return h
}
