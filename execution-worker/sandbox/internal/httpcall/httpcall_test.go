package httpcall_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox/internal/httpcall"
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
