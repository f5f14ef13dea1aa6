package webhooks

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// guard bounds every wait of these tests; it is a failure deadline, never
// a pause: the waits end on signals.
const guard = 30 * time.Second

// memRow is one delivery of memStore.
type memRow struct {
	d          Delivery
	next       time.Time
	leaseUntil time.Time
	done       bool // delivered or given up
	skips      int
}

// memStore is an in-memory Store: rows due by next, then insertion order.
type memStore struct {
	mu      sync.Mutex
	rows    []*memRow
	claims  chan int     // the size of every ClaimDue answer
	records chan Attempt // every Record
	pending []Attempt    // records read by waitRecord for later calls (test goroutine only)
}

func newMemStore() *memStore {
	return &memStore{claims: make(chan int, 1024), records: make(chan Attempt, 1024)}
}

// add inserts d, due at d.CreatedAt.
func (s *memStore) add(ds ...Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ds {
		s.rows = append(s.rows, &memRow{d: d, next: d.CreatedAt})
	}
}

func (s *memStore) ClaimDue(_ context.Context, now time.Time, limit int, lease time.Duration) ([]Delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	due := slices.Clone(s.rows)
	slices.SortStableFunc(due, func(a, b *memRow) int { return a.next.Compare(b.next) })
	var out []Delivery
	for _, r := range due {
		if len(out) == limit {
			break
		}
		if r.done || r.next.After(now) || r.leaseUntil.After(now) {
			continue
		}
		r.leaseUntil = now.Add(lease)
		out = append(out, r.d)
	}
	select {
	case s.claims <- len(out):
	default: // only the first claims are awaited
	}
	return out, nil
}

func (s *memStore) Record(_ context.Context, a Attempt) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows {
		if r.d.EventID != a.EventID || r.d.EndpointID != a.EndpointID {
			continue
		}
		r.leaseUntil = time.Time{}
		switch {
		case a.Skipped:
			r.skips++
			r.next = *a.NextAt
		case a.Delivered || a.GaveUp:
			r.d.Attempt++
			r.done = true
		default:
			r.d.Attempt++
			r.next = *a.NextAt
		}
	}
	s.records <- a
	return nil
}

// row returns a copy of the row of event at endpoint.
func (s *memStore) row(t *testing.T, event, endpoint string) memRow {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows {
		if r.d.EventID == event && r.d.EndpointID == endpoint {
			return *r
		}
	}
	t.Fatalf("no row for event %s at endpoint %s", event, endpoint)
	return memRow{}
}

// waitRecord returns the next Record of event at endpoint, keeping others
// for later calls.
func (s *memStore) waitRecord(t *testing.T, event, endpoint string) Attempt {
	t.Helper()
	match := func(a Attempt) bool { return a.EventID == event && a.EndpointID == endpoint }
	if i := slices.IndexFunc(s.pending, match); i >= 0 {
		a := s.pending[i]
		s.pending = slices.Delete(s.pending, i, i+1)
		return a
	}
	deadline := time.After(guard)
	for {
		select {
		case a := <-s.records:
			if match(a) {
				return a
			}
			s.pending = append(s.pending, a)
		case <-deadline:
			t.Fatalf("no attempt of event %s at endpoint %s recorded within %s", event, endpoint, guard)
		}
	}
}

// clock is a settable Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// request is what an endpoint received.
type request struct {
	header http.Header
	body   []byte
}

// endpoint is an httptest server on 127.0.0.1 answering with answer and
// sending every request it reads on the returned channel.
func endpoint(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, chan request) {
	t.Helper()
	got := make(chan request, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- request{header: r.Header.Clone(), body: body}
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// run starts r.Run; cleanup stops it and checks that it returned nil.
func run(t *testing.T, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	if r.Logger == nil {
		r.Logger = quiet(t)
	}
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after its context ended, want nil", err)
			}
		case <-time.After(guard):
			t.Errorf("Run did not return within %s of its context ending", guard)
		}
	})
}

// recv returns the next request of got.
func recv(t *testing.T, got chan request) request {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(guard):
		t.Fatalf("endpoint received no request within %s", guard)
		return request{}
	}
}

// quiet returns a logger writing to t's output, shown on failure or -v.
func quiet(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// delivery returns a delivery of idledBody to url.
func delivery(t *testing.T, event, ep, url, secret string, created time.Time) Delivery {
	t.Helper()
	body := strings.Replace(idledBody, "wevt_01", event, 1)
	return Delivery{EventID: event, EndpointID: ep, URL: url, Secret: secret, Body: []byte(body), CreatedAt: created}
}

// checkClean fails t when an attempt's error carries the secret or body.
func checkClean(t *testing.T, a Attempt, d Delivery) {
	t.Helper()
	key := strings.TrimPrefix(d.Secret, SecretPrefix)
	if strings.Contains(a.Error, key) || strings.Contains(a.Error, string(d.Body)) {
		t.Errorf("attempt error %q contains the secret or the body", a.Error)
	}
}

func TestRelayDeliversOnceSigned(t *testing.T) {
	t.Parallel()
	srv, got := endpoint(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(make([]byte, 1<<20)) // more than the relay reads
	})
	secret := newSecret(t)
	store := newMemStore()
	d := delivery(t, "wevt_a", "ep_a", srv.URL, secret, time.Now())
	store.add(d)
	run(t, &Relay{Store: store, Poll: 10 * time.Millisecond})

	a := store.waitRecord(t, "wevt_a", "ep_a")
	if !a.Delivered || a.StatusCode != http.StatusOK || a.Error != "" || a.NextAt != nil || a.GaveUp || a.Skipped {
		t.Fatalf("attempt %+v, want delivered with 200, no error, no next attempt", a)
	}
	req := recv(t, got)
	ev, err := unwrap(req.body, req.header, secret)
	if err != nil {
		t.Fatalf("SDK Unwrap of the delivered request: %v, want success", err)
	}
	if ev.ID != "wevt_a" || req.header.Get(HeaderID) != "wevt_a" {
		t.Fatalf("delivered event id %q, webhook-id %q, want wevt_a for both", ev.ID, req.header.Get(HeaderID))
	}
	if row := store.row(t, "wevt_a", "ep_a"); !row.done || row.d.Attempt != 1 {
		t.Fatalf("row done=%v attempts=%d, want done after 1 attempt", row.done, row.d.Attempt)
	}
	select {
	case req := <-got:
		t.Fatalf("endpoint received a second request (webhook-id %q), want one", req.header.Get(HeaderID))
	default:
	}
}

func TestRelayRetriesSameID(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv, got := endpoint(t, func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	secret := newSecret(t)
	clk := &clock{t: time.Now()}
	store := newMemStore()
	d := delivery(t, "wevt_r", "ep_r", srv.URL, secret, clk.Now())
	store.add(d)
	r := &Relay{Store: store, Now: clk.Now, Poll: 10 * time.Millisecond}
	run(t, r)

	first := store.waitRecord(t, "wevt_r", "ep_r")
	if first.Delivered || first.StatusCode != 500 || !strings.Contains(first.Error, "500") || first.NextAt == nil {
		t.Fatalf("first attempt %+v, want a failure with status 500 and a next attempt", first)
	}
	checkClean(t, first, d)
	if wait := first.NextAt.Sub(clk.Now()); wait < BackoffBase*3/4 || wait > BackoffBase {
		t.Fatalf("first retry %s after the failure, want within [%s, %s]", wait, BackoffBase*3/4, BackoffBase)
	}
	clk.Advance(BackoffBase)
	r.Wake()
	second := store.waitRecord(t, "wevt_r", "ep_r")
	if !second.Delivered || second.StatusCode != 200 || second.NextAt != nil {
		t.Fatalf("second attempt %+v, want delivered with 200", second)
	}
	r1, r2 := recv(t, got), recv(t, got)
	if id1, id2 := r1.header.Get(HeaderID), r2.header.Get(HeaderID); id1 != "wevt_r" || id2 != id1 {
		t.Fatalf("webhook-ids %q then %q, want wevt_r both times", id1, id2)
	}
	if string(r1.body) != string(r2.body) {
		t.Fatalf("bodies differ between attempts: %s then %s", r1.body, r2.body)
	}
	for _, req := range []request{r1, r2} {
		if _, err := unwrap(req.body, req.header, secret); err != nil {
			t.Fatalf("SDK Unwrap of an attempt: %v, want success", err)
		}
	}
	if row := store.row(t, "wevt_r", "ep_r"); !row.done || row.d.Attempt != 2 {
		t.Fatalf("row done=%v attempts=%d, want done after 2 attempts", row.done, row.d.Attempt)
	}
}

// TestRelayIsolatesHangingEndpoint: endpoint A hangs until released; B's
// delivery, claimed after five of A's, is delivered while A still hangs,
// and A never has more than PerEndpoint requests in flight.
func TestRelayIsolatesHangingEndpoint(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 8) // one per request of A's counted in inA
	var inA, maxA atomic.Int32
	srvA, _ := endpoint(t, func(_ http.ResponseWriter, _ *http.Request) {
		n := inA.Add(1)
		defer inA.Add(-1)
		for m := maxA.Load(); n > m && !maxA.CompareAndSwap(m, n); m = maxA.Load() {
		}
		entered <- struct{}{}
		<-release
	})
	srvB, _ := endpoint(t, func(http.ResponseWriter, *http.Request) {})
	secret := newSecret(t)
	clk := &clock{t: time.Now()} // frozen: skipped deliveries are not due again
	store := newMemStore()
	for _, id := range []string{"wevt_1", "wevt_2", "wevt_3", "wevt_4", "wevt_5"} {
		store.add(delivery(t, id, "ep_a", srvA.URL, secret, clk.Now()))
	}
	store.add(delivery(t, "wevt_b", "ep_b", srvB.URL, secret, clk.Now()))
	r := &Relay{Store: store, Now: clk.Now, PerEndpoint: 2, MaxInFlight: 3, Timeout: time.Hour, Poll: 10 * time.Millisecond}
	run(t, r)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before Run's cleanup

	for range 2 { // both of A's slots hang
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("A's two requests did not arrive")
		}
	}
	b := store.waitRecord(t, "wevt_b", "ep_b")
	if !b.Delivered {
		t.Fatalf("B's attempt %+v while A hangs, want delivered", b)
	}
	if n := inA.Load(); n != 2 {
		t.Fatalf("A has %d requests in flight when B is delivered, want 2 (still hanging)", n)
	}
	for _, id := range []string{"wevt_3", "wevt_4", "wevt_5"} {
		row := store.row(t, id, "ep_a")
		if row.skips == 0 || row.d.Attempt != 0 || row.done {
			t.Fatalf("A's %s: skips=%d attempts=%d done=%v, want skipped, no attempt counted", id, row.skips, row.d.Attempt, row.done)
		}
	}
	once.Do(func() { close(release) })
	for _, id := range []string{"wevt_1", "wevt_2"} {
		if a := store.waitRecord(t, id, "ep_a"); !a.Delivered {
			t.Fatalf("A's %s after release: %+v, want delivered", id, a)
		}
	}
	if m := maxA.Load(); m > 2 {
		t.Fatalf("A had %d requests in flight at once, want at most PerEndpoint 2", m)
	}
}

// TestRelayWake: with an hour's Poll, only Wake can make the relay claim a
// delivery added after its first claim.
func TestRelayWake(t *testing.T) {
	t.Parallel()
	srv, _ := endpoint(t, func(http.ResponseWriter, *http.Request) {})
	store := newMemStore()
	r := &Relay{Store: store, Poll: time.Hour}
	run(t, r)
	select {
	case <-store.claims: // Run's first claim, on start
	case <-time.After(guard):
		t.Fatalf("Run made no claim on start within %s", guard)
	}
	store.add(delivery(t, "wevt_w", "ep_w", srv.URL, newSecret(t), time.Now()))
	r.Wake()
	if a := store.waitRecord(t, "wevt_w", "ep_w"); !a.Delivered {
		t.Fatalf("attempt after Wake %+v, want delivered", a)
	}
}

// TestRelayFailures: answers and non-answers that are not 2xx are retried,
// recorded without the secret or body.
func TestRelayFailures(t *testing.T) {
	t.Parallel()
	var followed atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/target", http.StatusFound)
	})
	mux.HandleFunc("/target", func(http.ResponseWriter, *http.Request) { followed.Store(true) })
	stop := make(chan struct{})
	mux.HandleFunc("/hang", func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // before srv.Close
	closed := httptest.NewServer(mux)
	closed.Close()

	secret := newSecret(t)
	store := newMemStore()
	now := time.Now()
	cases := []struct {
		ep, url, want string
		status        int
	}{
		{"ep_redirect", srv.URL + "/redirect", "redirects are not followed", http.StatusFound},
		{"ep_hang", srv.URL + "/hang", "timeout", 0},
		{"ep_refused", closed.URL, "no answer", 0},
		{"ep_secret", srv.URL, "malformed webhook secret", 0},
	}
	for _, c := range cases {
		d := delivery(t, "wevt_f", c.ep, c.url, secret, now)
		if c.ep == "ep_secret" {
			d.Secret = "whsec_!" + strings.TrimPrefix(secret, SecretPrefix)
		}
		store.add(d)
	}
	run(t, &Relay{Store: store, Timeout: 200 * time.Millisecond, Poll: 10 * time.Millisecond})
	for _, c := range cases {
		a := store.waitRecord(t, "wevt_f", c.ep)
		if a.Delivered || a.StatusCode != c.status || !strings.Contains(a.Error, c.want) || a.NextAt == nil || a.GaveUp {
			t.Errorf("%s: attempt %+v, want a retried failure with status %d and error containing %q", c.ep, a, c.status, c.want)
		}
		checkClean(t, a, delivery(t, "wevt_f", c.ep, c.url, secret, now))
	}
	if followed.Load() {
		t.Errorf("the redirect was followed, want a 3xx recorded as a failure")
	}
}

func TestRelayGivesUpAfterWindow(t *testing.T) {
	t.Parallel()
	srv, _ := endpoint(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	clk := &clock{t: time.Now()}
	store := newMemStore()
	store.add(delivery(t, "wevt_old", "ep_g", srv.URL, newSecret(t), clk.Now().Add(-DefaultRetryWindow)))
	run(t, &Relay{Store: store, Now: clk.Now, Poll: 10 * time.Millisecond})
	a := store.waitRecord(t, "wevt_old", "ep_g")
	if !a.GaveUp || a.NextAt != nil || a.Delivered || a.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("attempt %+v of a delivery past its retry window, want gave up after 503 with no next attempt", a)
	}
}

func TestRelayNeedsStore(t *testing.T) {
	t.Parallel()
	if err := (&Relay{}).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "Store") {
		t.Fatalf("Run without a Store returned %v, want an error naming Store", err)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	var prev time.Duration
	for n := 1; n <= 64; n++ {
		nominal := backoff(n, 0)
		if n == 1 && nominal != BackoffBase {
			t.Fatalf("delay after the first failure %s, want %s", nominal, BackoffBase)
		}
		if nominal < prev || nominal > BackoffMax {
			t.Fatalf("nominal delay after failure %d is %s after %s, want non-decreasing and at most %s", n, nominal, prev, BackoffMax)
		}
		if n < 10 && nominal != prev*2 && n > 1 {
			t.Fatalf("nominal delay after failure %d is %s, want double %s", n, nominal, prev)
		}
		lowest := backoff(n, 0.9999)
		if lowest < nominal*3/4 || lowest > nominal {
			t.Fatalf("jittered delay after failure %d is %s, want within [%s, %s]", n, lowest, nominal*3/4, nominal)
		}
		// Below the cap, every jittered delay exceeds the previous nominal one.
		if nominal < BackoffMax && n > 1 && lowest <= prev {
			t.Fatalf("jittered delay after failure %d is %s, want above the previous %s", n, lowest, prev)
		}
		if got := Backoff(n); got < nominal*3/4 || got > nominal {
			t.Fatalf("Backoff(%d) = %s, want within [%s, %s]", n, got, nominal*3/4, nominal)
		}
		prev = nominal
	}
	if got := backoff(1<<30, 0); got != BackoffMax {
		t.Fatalf("delay after 2^30 failures %s, want the cap %s", got, BackoffMax)
	}
}

// TestScheduleWindow walks a delivery that always fails through its retry
// window with an injected clock.
func TestScheduleWindow(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := Delivery{CreatedAt: created}
	deadline := created.Add(DefaultRetryWindow)

	if next, gaveUp := schedule(d, true, created, DefaultRetryWindow, time.Minute); next != nil || gaveUp {
		t.Fatalf("schedule of a delivered attempt: next %v gaveUp %v, want neither", next, gaveUp)
	}
	now, attempts := created, 0
	for {
		attempts++
		next, gaveUp := schedule(d, false, now, DefaultRetryWindow, Backoff(attempts))
		if gaveUp {
			if next != nil || now.Before(deadline) {
				t.Fatalf("gave up at %s with next %v, want only at the window's end %s, with no next", now, next, deadline)
			}
			break
		}
		if next == nil || !next.After(now) || next.Sub(now) > BackoffMax || next.After(deadline) {
			t.Fatalf("after attempt %d at %s: next %v, want later, within %s, not after %s", attempts, now, next, BackoffMax, deadline)
		}
		now = *next
	}
	// 11 attempts reach the hour cap 1.1-1.4h in (5s doubling to 2560s,
	// less jitter); the remaining ~22.8h hold 23-31 attempts 45-60 min
	// apart, then the last one comes at the window's end.
	if attempts < 34 || attempts > 43 {
		t.Fatalf("%d attempts in the retry window, want 34-43", attempts)
	}
}
