package httpcall_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
)

func TestRetry(t *testing.T) {
	p := httpcall.Policy{Base: time.Millisecond, Max: 4 * time.Millisecond, Retries: 2}
	boom := errors.New("boom")
	calls := 0
	n, gaveUp, err := httpcall.Retry(context.Background(), p, func(context.Context) (bool, time.Duration, error) {
		calls++
		return true, 0, boom
	})
	if !errors.Is(err, boom) || !gaveUp || n != 3 || calls != 3 {
		t.Errorf("always failing = %d attempts, gave up %v, %v; want 3, true, boom", n, gaveUp, err)
	}
	calls = 0
	n, gaveUp, err = httpcall.Retry(context.Background(), p, func(context.Context) (bool, time.Duration, error) {
		calls++
		if calls < 2 {
			return true, time.Millisecond, boom
		}
		return false, 0, nil
	})
	if err != nil || gaveUp || n != 2 {
		t.Errorf("second try succeeds = %d, %v, %v", n, gaveUp, err)
	}
	n, gaveUp, err = httpcall.Retry(context.Background(), p, func(context.Context) (bool, time.Duration, error) { return false, 0, boom })
	if !errors.Is(err, boom) || gaveUp || n != 1 {
		t.Errorf("permanent failure = %d, %v, %v; want one attempt, not given up", n, gaveUp, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := httpcall.Retry(ctx, p, func(context.Context) (bool, time.Duration, error) { return true, time.Hour, boom }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled = %v", err)
	}
}

func TestRetryMaxWait(t *testing.T) {
	// A policy's own cap bounds both the backoff and the server's hint: an
	// hour of either would outlast the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := httpcall.Policy{Base: time.Hour, Max: time.Hour, Retries: 2, MaxWait: time.Millisecond}
	boom := errors.New("boom")
	calls := 0
	n, gaveUp, err := httpcall.Retry(ctx, p, func(context.Context) (bool, time.Duration, error) {
		calls++
		if calls == 2 {
			return true, time.Hour, boom
		}
		return true, 0, boom
	})
	if !errors.Is(err, boom) || !gaveUp || n != 3 {
		t.Errorf("capped waits = %d attempts, gave up %v, %v; want 3, true, boom", n, gaveUp, err)
	}
	// Base 0: fn supplies every wait, and a zero wait retries at once.
	n, gaveUp, err = httpcall.Retry(ctx, httpcall.Policy{Retries: 3}, func(context.Context) (bool, time.Duration, error) {
		return true, 0, boom
	})
	if !errors.Is(err, boom) || !gaveUp || n != 4 {
		t.Errorf("zero waits = %d attempts, gave up %v, %v; want 4, true, boom", n, gaveUp, err)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	for _, tt := range []struct {
		ms, after string
		want      time.Duration
		ok        bool
	}{
		{after: "3", want: 3 * time.Second, ok: true},
		{after: " 2 ", want: 2 * time.Second, ok: true},
		{after: "1.5", want: 1500 * time.Millisecond, ok: true},
		{after: "0", want: 0, ok: true},
		{after: date(time.Hour), want: time.Hour, ok: true},
		{after: date(-time.Hour), want: 0, ok: true}, // past: no wait, but asked
		{after: "1e30", want: math.MaxInt64, ok: true},
		{ms: "1500", after: "2", want: 1500 * time.Millisecond, ok: true},
		{ms: "2.5", want: 2500 * time.Microsecond, ok: true},
		{ms: "0", after: "2", want: 2 * time.Second, ok: true}, // no positive wait: Retry-After decides
		{ms: "soon", after: "2", want: 2 * time.Second, ok: true},
		{ms: "0"},
		{after: ""},
		{after: "soon"},
		{after: "-1"},
		{after: "NaN"},
		{after: "Inf"},
	} {
		h := http.Header{}
		if tt.ms != "" {
			h.Set("retry-after-ms", tt.ms)
		}
		if tt.after != "" {
			h.Set("Retry-After", tt.after)
		}
		if d, ok := httpcall.RetryAfterHeader(h, now); d != tt.want || ok != tt.ok {
			t.Errorf("RetryAfterHeader(retry-after-ms %q, Retry-After %q) = %v, %v; want %v, %v", tt.ms, tt.after, d, ok, tt.want, tt.ok)
		}
	}
	if d := httpcall.RetryAfter(http.Header{"Retry-After": {time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}}); d < 59*time.Minute || d > time.Hour {
		t.Errorf("RetryAfter(date in an hour) = %v, want about 1h", d)
	}
	if d := httpcall.RetryAfter(http.Header{"Retry-After": {"soon"}}); d != 0 {
		t.Errorf("RetryAfter(soon) = %v, want 0", d)
	}
}

func TestJSONBody(t *testing.T) {
	body := httpcall.JSONBody(map[string]int{"a": 1})
	for range 2 { // a fresh reader each time
		r, ct, err := body()
		if err != nil || ct != "application/json" {
			t.Fatal(ct, err)
		}
		if b, _ := io.ReadAll(r); string(b) != `{"a":1}` {
			t.Errorf("body = %s", b)
		}
	}
}

func TestStreamBody(t *testing.T) {
	body := httpcall.StreamBody(strings.NewReader("once"), "application/octet-stream")
	r, ctype, err := body()
	if err != nil {
		t.Fatalf("first call = %v, want no error", err)
	}
	if data, _ := io.ReadAll(r); string(data) != "once" || ctype != "application/octet-stream" {
		t.Errorf("first call = %q, %q; want %q, application/octet-stream", data, ctype, "once")
	}
	if _, _, err := body(); !errors.Is(err, httpcall.ErrResent) {
		t.Errorf("second call = %v, want ErrResent", err)
	}
}

func TestStatusError(t *testing.T) {
	keys := []string{"detail", "message"}
	for body, want := range map[string]string{
		`{"message":"busy","detail":"queue full"}`: "svc: GET /x: 503 Service Unavailable: queue full",
		`{"Message":"busy"}`:                       "svc: GET /x: 503 Service Unavailable: busy",
		`{"detail":null,"message":7}`:              "svc: GET /x: 503 Service Unavailable: 7",
		"  plain text \n":                          "svc: GET /x: 503 Service Unavailable: plain text",
		`{"other":"x"}`:                            `svc: GET /x: 503 Service Unavailable: {"other":"x"}`,
	} {
		err := fmt.Errorf("wrapped: %w", &httpcall.StatusError{Service: "svc", Method: "GET", Target: "/x", Status: 503, Body: body, MessageKeys: keys})
		if got := strings.TrimPrefix(err.Error(), "wrapped: "); got != want {
			t.Errorf("body %q: error = %q, want %q", body, got, want)
		}
		if s := httpcall.StatusOf(err); s != 503 {
			t.Errorf("StatusOf = %d, want 503", s)
		}
	}
	if s := httpcall.StatusOf(errors.New("boom")); s != 0 {
		t.Errorf("StatusOf(other error) = %d, want 0", s)
	}
}

func TestOpError(t *testing.T) {
	long := strings.Repeat("x", 400)
	for _, tt := range []struct {
		err  httpcall.OpError
		want string
	}{
		{httpcall.OpError{Op: "get thing", Status: 404, Message: " gone \n"}, "get thing: HTTP 404: gone"},
		{httpcall.OpError{Op: "get thing", Status: 404, Code: "SANDBOX_NOT_FOUND", Message: "gone"}, "get thing: HTTP 404: SANDBOX_NOT_FOUND: gone"},
		{httpcall.OpError{Op: "get thing", Status: 500, Message: "busy", Attempts: 3}, "get thing: HTTP 500, giving up after 3 attempts: busy"},
		{httpcall.OpError{Op: "get thing", Status: 502}, "get thing: HTTP 502"},
		{httpcall.OpError{Op: "get thing", Status: 500, Message: long}, "get thing: HTTP 500: " + long[:300] + "..."},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%+v: error = %q, want %q", tt.err, got, tt.want)
		}
	}
	err := fmt.Errorf("wrapped: %w", &httpcall.OpError{Op: "get", Status: 404, Code: "SANDBOX_NOT_FOUND"})
	if s, c := httpcall.StatusOf(err), httpcall.CodeOf(err); s != 404 || c != "SANDBOX_NOT_FOUND" {
		t.Errorf("StatusOf, CodeOf = %d, %q; want 404, SANDBOX_NOT_FOUND", s, c)
	}
	if c := httpcall.CodeOf(errors.New("boom")); c != "" {
		t.Errorf("CodeOf(other error) = %q, want empty", c)
	}
}

func TestTransient(t *testing.T) {
	status := func(code int) error { return &httpcall.StatusError{Service: "s", Status: code} }
	malformed := fmt.Errorf("decode: %w", httpcall.ErrMalformed)
	transport := errors.New("connection reset")
	for _, c := range []struct {
		name       string
		err        error
		idempotent bool
		want       bool
	}{
		{"429", status(429), false, true},
		{"503 idempotent", status(503), true, true},
		{"503 not idempotent", status(503), false, false},
		{"404 idempotent", status(404), true, false},
		{"transport idempotent", transport, true, true},
		{"transport not idempotent", transport, false, false},
		{"malformed idempotent", malformed, true, false},
	} {
		if got := httpcall.Transient(c.err, c.idempotent); got != c.want {
			t.Errorf("%s: Transient = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestDecode(t *testing.T) {
	var v struct{ ID string }
	if err := httpcall.Decode("svc", "get thing", []byte(`{"ID":"a"}`), &v); err != nil || v.ID != "a" {
		t.Fatalf("Decode = %v, %+v", err, v)
	}
	body := `{"ID": ` + strings.Repeat("x", 100)
	err := httpcall.Decode("svc", "get thing", []byte(body), &v)
	if !errors.Is(err, httpcall.ErrMalformed) {
		t.Fatalf("Decode of a bad body = %v, want ErrMalformed", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "svc: get thing: malformed response: ") || !strings.Contains(msg, fmt.Sprintf("(body starts %q)", body[:64])) {
		t.Errorf("message %q: want service, what and the body's first 64 bytes", msg)
	}
}

func TestNewRequest(t *testing.T) {
	body := httpcall.JSONBody(map[string]int{"a": 1})
	req, err := httpcall.NewRequest(context.Background(), http.MethodPost, "http://127.0.0.1/x", body, 7)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(req.Body)
	if string(got) != `{"a":1}` || req.ContentLength != 7 || req.Header.Get("Content-Type") != "application/json" {
		t.Errorf("request: body %q, length %d, type %q; want the JSON, 7, application/json", got, req.ContentLength, req.Header.Get("Content-Type"))
	}
	if req, err = httpcall.NewRequest(context.Background(), http.MethodGet, "http://127.0.0.1/x", nil, 0); err != nil || req.Body != nil || req.Header.Get("Content-Type") != "" {
		t.Errorf("no body: %v, body %v, type %q", err, req.Body, req.Header.Get("Content-Type"))
	}
	if _, err := httpcall.NewRequest(context.Background(), "BAD METHOD", "http://127.0.0.1/x", nil, 0); !errors.Is(err, httpcall.ErrMalformed) {
		t.Errorf("invalid method: %v, want ErrMalformed", err)
	}
	stream := httpcall.StreamBody(strings.NewReader("x"), "text/plain")
	_, _ = httpcall.NewRequest(context.Background(), http.MethodPut, "http://127.0.0.1/x", stream, 0)
	if _, err := httpcall.NewRequest(context.Background(), http.MethodPut, "http://127.0.0.1/x", stream, 0); !errors.Is(err, httpcall.ErrResent) {
		t.Errorf("second attempt of a streamed body: %v, want ErrResent", err)
	}
}

func TestReadStatusError(t *testing.T) {
	resp := &http.Response{
		StatusCode: http.StatusTooManyRequests,
		Header:     http.Header{"Retry-After": {"3"}},
		Body:       io.NopCloser(strings.NewReader(`{"message": "slow down"}` + strings.Repeat(" ", 100))),
	}
	wait, err := httpcall.ReadStatusError(resp, 24, httpcall.StatusError{Service: "svc", Method: "GET", Target: "/x", MessageKeys: []string{"message"}})
	if wait != 3*time.Second {
		t.Errorf("wait = %v, want the Retry-After 3s", wait)
	}
	if httpcall.StatusOf(err) != http.StatusTooManyRequests || err.Error() != "svc: GET /x: 429 Too Many Requests: slow down" {
		t.Errorf("error = %v (status %d)", err, httpcall.StatusOf(err))
	}
}
