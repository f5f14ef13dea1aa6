package e2bproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
)

// statusOf returns the status of the non-2xx answer (an
// *httpcall.OpError) in err, or 0.
var statusOf = httpcall.StatusOf

// retryClass says which answers a call may retry.
type retryClass int

const (
	noRetry retryClass = iota
	// retrySafe: idempotent calls retry transport errors, 429 and 5xx.
	retrySafe
	// retryUnprocessed: non-idempotent calls retry only answers that say
	// the request was not processed (429, 503).
	retryUnprocessed
)

func retryableStatus(class retryClass, status int) bool {
	switch class {
	case retrySafe:
		return status == http.StatusTooManyRequests || status >= 500 && status != http.StatusNotImplemented
	case retryUnprocessed:
		return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
	}
	return false
}

// retryWaits returns the waits between the tries of one call: RetryBase
// doubling up to RetryMax, each with up to 20% jitter above it; [next]
// keeps them within RetryMax. (The library jitters both ways: 1/11 either
// side of 1.1 times a wait is that wait to 1.2 times it.)
func (c *Config) retryWaits() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: c.RetryBase * 11 / 10, RandomizationFactor: 1.0 / 11,
		Multiplier: 2, MaxInterval: c.RetryMax * 11 / 10}
}

// next is the wait before the next try of a call with waits b.
func (c *Config) next(b *backoff.ExponentialBackOff) time.Duration {
	return min(b.NextBackOff(), c.RetryMax)
}

// send performs the request built by build, retrying per class with capped
// exponential backoff (honouring Retry-After up to RetryAfterMax). A
// non-2xx final answer is returned as *httpcall.OpError with the body consumed;
// either error counts the attempts when the retries ran out.
func (c *Config) send(ctx context.Context, op string, class retryClass, build func(context.Context) (*http.Request, error)) (*http.Response, error) {
	// attempt supplies every wait (jittered backoff or Retry-After), so
	// the policy has no backoff of its own and no cap below the config's.
	policy := httpcall.Policy{Retries: max(0, c.RetryAttempts-1), MaxWait: max(c.RetryMax, c.RetryAfterMax)}
	var resp *http.Response
	waits := c.retryWaits()
	attempts, gaveUp, err := httpcall.Retry(ctx, policy, func(ctx context.Context) (again bool, wait time.Duration, err error) {
		resp, again, wait, err = c.attempt(ctx, op, class, build, waits)
		return again, wait, err
	})
	if gaveUp && attempts > 1 {
		var ae *httpcall.OpError
		if errors.As(err, &ae) {
			ae.Attempts = attempts
		} else {
			err = fmt.Errorf("giving up after %d attempts: %w", attempts, err)
		}
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// attempt sends the request built by build once; a failure waits the next
// of waits unless the answer says how long. A non-2xx answer is an *httpcall.OpError; again reports
// that class may retry the failure after wait.
func (c *Config) attempt(ctx context.Context, op string, class retryClass, build func(context.Context) (*http.Request, error), waits *backoff.ExponentialBackOff) (resp *http.Response, again bool, wait time.Duration, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, 0, err
	}
	req, err := build(ctx)
	if err != nil {
		return nil, false, 0, fmt.Errorf("%s: %w", op, err)
	}
	resp, err = c.HTTPClient.Do(req)
	if err != nil {
		// A cancelled ctx makes Retry return ctx.Err().
		return nil, class == retrySafe, c.next(waits), fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, false, 0, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	wait = c.next(waits)
	if ra, ok := httpcall.RetryAfterHeader(resp.Header, time.Now()); ok {
		wait = min(ra, c.RetryAfterMax)
	}
	return nil, retryableStatus(class, resp.StatusCode), wait, &httpcall.OpError{Op: op, Status: resp.StatusCode, Message: errorMessage(body)}
}

// errorMessage extracts message from an {code, message} error body.
func errorMessage(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		return e.Message
	}
	return string(body)
}

// apiJSON calls the control plane with an optional JSON body and decodes
// the answer into out (when non-nil).
func (c *Config) apiJSON(ctx context.Context, op string, class retryClass, method, path string, in, out any) (http.Header, error) {
	var body func() (io.Reader, string, error)
	if in != nil {
		body = httpcall.JSONBody(in)
	}
	resp, err := c.send(ctx, op, class, func(ctx context.Context) (*http.Request, error) {
		req, err := httpcall.NewRequest(ctx, method, c.APIURL+path, body, 0)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		c.authorize(req)
		return req, nil
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 32<<20)).Decode(out); err != nil {
			return nil, fmt.Errorf("%s: decode answer: %w", op, err)
		}
	}
	return resp.Header, nil
}

func (c *Config) authorize(req *http.Request) {
	if c.APIKey == "" {
		return
	}
	switch c.Auth {
	case AuthBearer:
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	default:
		req.Header.Set("X-API-Key", c.APIKey)
	}
}
