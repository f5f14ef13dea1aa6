package e2bproto

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// APIError is a non-success HTTP answer.
type APIError struct {
	Op      string
	Status  int
	Message string
}

func (e *APIError) Error() string {
	msg := strings.TrimSpace(e.Message)
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	if msg == "" {
		return fmt.Sprintf("%s: HTTP %d", e.Op, e.Status)
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.Status, msg)
}

func statusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

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

// backoff returns the delay before retry attempt (0-based), with jitter.
func (c *Config) backoff(attempt int) time.Duration {
	d := c.RetryBase << attempt
	if d <= 0 || d > c.RetryMax {
		d = c.RetryMax
	}
	// Up to 20% jitter, never above the cap.
	j := time.Duration(rand.Int64N(int64(d)/5 + 1))
	return min(d+j, c.RetryMax)
}

// retryAfter parses a Retry-After header (seconds or HTTP date).
func retryAfter(h string) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(h); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(0, time.Until(t)), true
	}
	return 0, false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// send performs the request built by build, retrying per class with capped
// exponential backoff (honouring Retry-After up to RetryAfterMax). A
// non-2xx final answer is returned as *APIError with the body consumed.
func (c *Config) send(ctx context.Context, op string, class retryClass, build func(context.Context) (*http.Request, error)) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		req, err := build(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		resp, err := c.HTTPClient.Do(req)
		last := attempt+1 >= c.RetryAttempts
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if class != retrySafe || last {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			if err := sleepCtx(ctx, c.backoff(attempt)); err != nil {
				return nil, err
			}
			continue
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return resp, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		apiErr := &APIError{Op: op, Status: resp.StatusCode, Message: errorMessage(body)}
		if last || !retryableStatus(class, resp.StatusCode) {
			return nil, apiErr
		}
		delay := c.backoff(attempt)
		if ra, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
			delay = min(ra, c.RetryAfterMax)
		}
		if err := sleepCtx(ctx, delay); err != nil {
			return nil, err
		}
	}
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
	var payload []byte
	if in != nil {
		var err error
		if payload, err = json.Marshal(in); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	}
	resp, err := c.send(ctx, op, class, func(ctx context.Context) (*http.Request, error) {
		var body io.Reader
		if payload != nil {
			body = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.APIURL+path, body)
		if err != nil {
			return nil, err
		}
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
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
