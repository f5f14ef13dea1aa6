package sandboxe2b_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxe2b/e2bfake"
)

// listFaults answers the control plane's list requests itself, as told,
// and passes every other request to the fake.
type listFaults struct {
	mu      sync.Mutex
	created bool
	lists   int
	// hideFirst answers the first list with no sandbox (a concurrent
	// creator's is not listed yet); failAfterCreate answers the lists
	// after a create with a 500.
	hideFirst, failAfterCreate bool
}

func (l *listFaults) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.URL.Path == "/v2/sandboxes" {
		l.mu.Lock()
		l.lists++
		hide := l.hideFirst && l.lists == 1
		fail := l.failAfterCreate && l.created
		l.mu.Unlock()
		switch {
		case hide:
			return answer(r, http.StatusOK, `[]`), nil
		case fail:
			return answer(r, http.StatusInternalServerError, `{"code":500,"message":"injected"}`), nil
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost && r.URL.Path == "/sandboxes" && resp.StatusCode < 300 {
		l.mu.Lock()
		l.created = true
		l.mu.Unlock()
	}
	return resp, err
}

func answer(r *http.Request, status int, body string) *http.Response {
	return &http.Response{StatusCode: status, Request: r, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
}

// TestCreateReportsUnkilledSandbox: when Create must remove the sandbox it
// just created (the list after it failed, or another creator won the
// race) and the control plane refuses the delete, Create fails with an
// error naming that sandbox, which is still running (and billed), instead
// of dropping the delete's error.
func TestCreateReportsUnkilledSandbox(t *testing.T) {
	tests := []struct {
		name   string
		faults *listFaults
		want   string
	}{
		{"list after create fails", &listFaults{failAfterCreate: true}, "500"},
		{"lost the race", &listFaults{hideFirst: true}, "lost the race"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			const key = "sesn_kill"
			var before []string
			if tt.faults.hideFirst {
				// The winner of the race, created first by another client.
				if _, _, err := newProvider(t, fakeConfig(f)).Create(t.Context(), key, sandbox.Spec{}); err != nil {
					t.Fatal(err)
				}
				before = f.IDs()
			}
			cfg := fakeConfig(f)
			cfg.HTTPClient = &http.Client{Transport: tt.faults}
			f.Fail(e2bfake.RouteKill, http.StatusInternalServerError, 100, "")
			_, _, err := newProvider(t, cfg).Create(t.Context(), key, sandbox.Spec{})
			var leaked []string
			for _, id := range f.IDs() {
				if !slices.Contains(before, id) {
					leaked = append(leaked, id)
				}
			}
			if len(leaked) != 1 {
				t.Fatalf("fake holds %d new sandboxes %v, want the 1 whose delete was refused", len(leaked), leaked)
			}
			if err == nil || !strings.Contains(err.Error(), leaked[0]) || !strings.Contains(err.Error(), tt.want) ||
				!strings.Contains(err.Error(), "injected fault") {
				t.Fatalf("Create = %v; want an error naming the sandbox %s left running, %q and the refused delete", err, leaked[0], tt.want)
			}
		})
	}
}
