package e2bproto

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
)

// answering returns a server that answers the first len(statuses)
// requests with those statuses (and Retry-After when retryAfter is set),
// then 200, and the count of requests it saw.
func answering(t *testing.T, retryAfter string, statuses ...int) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		if i < len(statuses) {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.WriteHeader(statuses[i])
			_, _ = w.Write([]byte(`{"message":"busy"}`))
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func getter(url string) func(context.Context) (*http.Request, error) {
	return func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	}
}

func TestSendRetries(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel) // after the parallel subtests, unlike a defer
	fast := Config{RetryAttempts: 3, RetryBase: time.Millisecond, RetryMax: 2 * time.Millisecond}.withDefaults()

	t.Run("Retry-After 0 retries at once", func(t *testing.T) {
		t.Parallel()
		// An hour of backoff would outlast ctx: the zero hint must win.
		slow := Config{RetryAttempts: 3, RetryBase: time.Hour, RetryMax: time.Hour}.withDefaults()
		srv, n := answering(t, "0", 503, 503)
		resp, err := slow.send(ctx, "get thing", retrySafe, getter(srv.URL))
		if err != nil {
			t.Fatalf("send through two 503s with Retry-After: 0 = %v, want success", err)
		}
		_ = resp.Body.Close()
		if got := n.Load(); got != 3 {
			t.Errorf("requests = %d, want 3", got)
		}
	})
	for _, tc := range []struct {
		name       string
		class      retryClass
		retryAfter string
		statuses   []int
		// requests is how many the server sees; status (0: success) and
		// attempts describe the error.
		requests, status, attempts int
	}{
		{"persistent 5xx gives up", retrySafe, "", []int{500, 500, 500, 500}, 3, 500, 3},
		{"unprocessed class does not retry 500", retryUnprocessed, "", []int{500}, 1, 500, 0},
		{"unprocessed class retries 503", retryUnprocessed, "", []int{503}, 2, 0, 0},
		{"noRetry sends once", noRetry, "0", []int{429}, 1, 429, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, n := answering(t, tc.retryAfter, tc.statuses...)
			resp, err := fast.send(ctx, "get thing", tc.class, getter(srv.URL))
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("send = %v, want success", err)
				}
				_ = resp.Body.Close()
			} else {
				var ae *httpcall.OpError
				if !errors.As(err, &ae) || ae.Status != tc.status || ae.Attempts != tc.attempts {
					t.Fatalf("send = %v, want an OpError with status %d and %d attempts counted", err, tc.status, tc.attempts)
				}
			}
			if got := int(n.Load()); got != tc.requests {
				t.Errorf("requests = %d, want %d", got, tc.requests)
			}
		})
	}
	t.Run("give-up message", func(t *testing.T) {
		t.Parallel()
		srv, _ := answering(t, "", 500, 500, 500)
		_, err := fast.send(ctx, "get thing", retrySafe, getter(srv.URL))
		if err == nil || !strings.Contains(err.Error(), "get thing: HTTP 500, giving up after 3 attempts: busy") {
			t.Errorf("error = %v, want the operation, status, attempts and message", err)
		}
	})
	t.Run("transport errors give up", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close() // nothing listens any more
		_, err := fast.send(ctx, "get thing", retrySafe, getter(url))
		if err == nil || !strings.Contains(err.Error(), "giving up after 3 attempts: get thing: ") {
			t.Errorf("send to a closed server = %v, want the operation and the attempts named", err)
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		t.Parallel()
		srv, n := answering(t, "")
		done, stop := context.WithCancel(ctx)
		stop()
		if _, err := fast.send(done, "get thing", retrySafe, getter(srv.URL)); !errors.Is(err, context.Canceled) {
			t.Errorf("send with a cancelled context = %v, want context.Canceled", err)
		}
		if got := n.Load(); got != 0 {
			t.Errorf("requests = %d, want none", got)
		}
	})
}
