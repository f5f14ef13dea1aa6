package httpcall_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	if d := httpcall.RetryAfter("3"); d != 3*time.Second {
		t.Errorf("seconds = %v", d)
	}
	if d := httpcall.RetryAfter(time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)); d < 59*time.Minute {
		t.Errorf("date = %v", d)
	}
	for _, v := range []string{"", "soon", "-1", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)} {
		if d := httpcall.RetryAfter(v); d != 0 {
			t.Errorf("RetryAfter(%q) = %v, want 0", v, d)
		}
	}
	for v, want := range map[string]bool{"2": true, "0": true, " 2 ": true, "": false, "soon": false, "-1": false} {
		if _, ok := httpcall.ParseRetryAfter(v); ok != want {
			t.Errorf("ParseRetryAfter(%q) ok = %v, want %v", v, ok, want)
		}
	}
	if d, ok := httpcall.ParseRetryAfter("2"); !ok || d != 2*time.Second {
		t.Errorf("ParseRetryAfter(2) = %v, %v; want 2s, true", d, ok)
	}
	if d, ok := httpcall.ParseRetryAfter(time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)); !ok || d != 0 {
		t.Errorf("ParseRetryAfter(past date) = %v, %v; want 0, true", d, ok)
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
