package sandboxopensandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox/internal/httpcall"
)

// apiError is a non-2xx answer of the lifecycle server or of execd.
type apiError struct {
	Status  int
	Code    string
	Message string
	Op      string
}

func (e *apiError) Error() string {
	msg := e.Message
	if e.Code != "" {
		msg = e.Code + ": " + msg
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.Status, strings.TrimSpace(msg))
}

func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

func codeOf(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

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
// exponential backoff (honouring Retry-After). It returns the response of
// the final attempt when it is a 2xx, else an *apiError.
func (p *Provider) do(ctx context.Context, op string, r request) (*http.Response, error) {
	delay := p.cfg.RetryBase
	for attempt := 1; ; attempt++ {
		var body io.Reader
		ctype := ""
		if r.body != nil {
			b, ct, err := r.body()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			body, ctype = b, ct
		}
		req, err := http.NewRequestWithContext(ctx, r.method, r.url, body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if r.length > 0 {
			req.ContentLength = r.length
		}
		for k, vs := range r.header {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := p.cfg.HTTPClient.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return resp, nil
		}
		aerr := readAPIError(op, resp)
		retryable := resp.StatusCode == http.StatusTooManyRequests ||
			(resp.StatusCode >= 500 && !r.onlyRetry429)
		if !r.idempotent || !retryable || attempt >= p.cfg.MaxAttempts {
			return nil, aerr
		}
		wait := delay
		if ra := httpcall.RetryAfter(resp.Header.Get("Retry-After")); ra > 0 {
			wait = min(ra, 30*time.Second)
		}
		delay = min(delay*2, p.cfg.RetryMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func readAPIError(op string, resp *http.Response) error {
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &apiError{Status: resp.StatusCode, Op: op}
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
