// Package httpcall holds what the worker's HTTP clients share: the retry
// loop with capped exponential backoff and Retry-After, the one
// Retry-After parser (the remote sandbox adapters and the model client),
// request bodies (JSON, and streams that can be sent once), and the errors
// of a non-2xx answer ([StatusError] names the request, [OpError] the
// operation).
package httpcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// MaxWait caps one wait between attempts, whatever the server asks,
// unless a [Policy] sets its own cap.
const MaxWait = 30 * time.Second

// Defaults of the retry settings of the worker's HTTP clients: the first
// backoff, its cap, and the retries after the first try.
const (
	DefaultBase    = 200 * time.Millisecond
	DefaultMax     = 5 * time.Second
	DefaultRetries = 4
)

// Policy bounds the retries of one call.
type Policy struct {
	// Base is the first backoff; it doubles up to Max. With Base 0, fn
	// supplies every wait, and a zero wait retries at once.
	Base, Max time.Duration
	// Retries is how many times a call is repeated after its first try.
	Retries int
	// MaxWait caps one wait, backoff or hint (0: the package's [MaxWait]).
	MaxWait time.Duration
}

// Retry runs fn until it succeeds, fails for good (again false), or the
// policy's retries are spent. fn returns the server's wait hint (0: none),
// used instead of the backoff. A cancelled ctx ends it with ctx.Err().
// gaveUp reports that err is the last of attempts failed tries.
func Retry(ctx context.Context, p Policy, fn func(context.Context) (again bool, wait time.Duration, err error)) (attempts int, gaveUp bool, err error) {
	ceiling := p.MaxWait
	if ceiling <= 0 {
		ceiling = MaxWait
	}
	b := &hinted{exp: backoff.ExponentialBackOff{InitialInterval: p.Base, Multiplier: 2, MaxInterval: p.Max}, ceiling: ceiling}
	waiting := false // the last try is to be retried: only ctx ends Retry then
	_, err = backoff.Retry(ctx, func() (struct{}, error) {
		attempts++
		waiting = false
		again, wait, err := fn(ctx)
		switch {
		case err == nil:
			return struct{}{}, nil
		case ctx.Err() != nil:
			return struct{}{}, backoff.Permanent(ctx.Err())
		case !again:
			return struct{}{}, backoff.Permanent(err)
		case attempts > p.Retries:
			gaveUp = true
			return struct{}{}, backoff.Permanent(err)
		}
		b.hint, waiting = wait, true
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
	if waiting && err != nil {
		return attempts, false, ctx.Err()
	}
	return attempts, gaveUp, err
}

// hinted is an exponential backoff whose wait the server's hint replaces
// (the backoff still grows), capped at ceiling.
type hinted struct {
	exp     backoff.ExponentialBackOff
	hint    time.Duration
	ceiling time.Duration
}

func (h *hinted) NextBackOff() time.Duration {
	d := h.exp.NextBackOff()
	if h.hint > 0 {
		d = h.hint
	}
	return min(d, h.ceiling)
}

func (h *hinted) Reset() { h.exp.Reset() }

// RetryAfter returns the wait an answer's headers h ask for, read by
// [RetryAfterHeader] at time.Now; 0 when they ask for none.
func RetryAfter(h http.Header) time.Duration {
	d, _ := RetryAfterHeader(h, time.Now())
	return d
}

// RetryAfterHeader returns the wait an answer's headers h ask for at now:
// retry-after-ms (milliseconds) when it asks for a positive wait, else
// Retry-After as seconds (fractions allowed) or an HTTP date. ok is false
// when neither is present and valid, which tells that apart from a server
// asking for no wait ("0", or a date already past).
func RetryAfterHeader(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if d, ok := parseDelay(h.Get("retry-after-ms"), time.Millisecond); ok && d > 0 {
		return d, true
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if d, ok := parseDelay(v, time.Second); ok {
		return d, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// parseDelay parses v as a finite, non-negative number of units; a wait
// too long for a Duration is the longest one.
func parseDelay(v string, unit time.Duration) (time.Duration, bool) {
	n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
		return 0, false
	}
	if d := n * float64(unit); d < math.MaxInt64 {
		return time.Duration(d), true
	}
	return math.MaxInt64, true
}

// JSONBody returns a request body function for v: a fresh reader for every
// attempt, and its content type.
func JSONBody(v any) func() (io.Reader, string, error) {
	return func() (io.Reader, string, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, "", err
		}
		return bytes.NewReader(b), "application/json", nil
	}
}

// ErrMalformed marks an answer that does not follow the protocol: it is
// never retried.
var ErrMalformed = errors.New("malformed response")

// Transient reports whether a call that failed with err may be sent
// again: after a 429 always (the server did not process it), after a 5xx
// or a transport error only when the call is idempotent, and never after a
// malformed answer.
func Transient(err error, idempotent bool) bool {
	st := StatusOf(err)
	return st == http.StatusTooManyRequests || idempotent && (st >= 500 || st == 0 && !errors.Is(err, ErrMalformed))
}

// Decode unmarshals the JSON answer data into v. Its error wraps
// [ErrMalformed], names service and what was asked, and quotes the start
// of the body.
func Decode(service, what string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %s: %w: %v (body starts %q)", service, what, ErrMalformed, err, data[:min(len(data), 64)])
	}
	return nil
}

// NewRequest returns the request of one attempt: body (nil: none) yields
// a fresh reader and its content type for every attempt, and a positive
// length is sent as the Content-Length. An invalid method or URL wraps
// [ErrMalformed]; an error of body is returned as it is.
func NewRequest(ctx context.Context, method, url string, body func() (io.Reader, string, error), length int64) (*http.Request, error) {
	var r io.Reader
	ctype := ""
	if body != nil {
		var err error
		if r, ctype, err = body(); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if length > 0 {
		req.ContentLength = length
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return req, nil
}

// ErrResent reports a second attempt at a streamed body, whose reader was
// already consumed: such a request cannot be retried.
var ErrResent = errors.New("upload body already sent: the upload cannot be retried")

// StreamBody returns a request body function that yields r and its content
// type ctype once; every later call (a retry) fails with [ErrResent].
func StreamBody(r io.Reader, ctype string) func() (io.Reader, string, error) {
	sent := false
	return func() (io.Reader, string, error) {
		if sent {
			return nil, "", ErrResent
		}
		sent = true
		return r, ctype, nil
	}
}
