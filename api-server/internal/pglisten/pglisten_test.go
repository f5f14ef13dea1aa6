package pglisten_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/api-server/internal/pglisten"
	"github.com/mangohq/mango/db/dbtest"
)

// wait bounds every wait for a signal; a test that reaches it fails.
const wait = 10 * time.Second

// recorder is a Handler that reports every call on calls: "gap" or the
// payload of a notification.
type recorder struct{ calls chan string }

func newRecorder() *recorder { return &recorder{calls: make(chan string, 100)} }

func (r *recorder) Notify(payload string) { r.calls <- payload }
func (r *recorder) Gap()                  { r.calls <- "gap" }

// next returns the recorder's next call, failing the test if none comes.
func (r *recorder) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case c := <-r.calls:
		return c
	case <-time.After(wait):
		t.Fatalf("no call within %v while waiting for %s", wait, what)
		return ""
	}
}

// expect fails unless the recorder's next call is want.
func (r *recorder) expect(t *testing.T, want string) {
	t.Helper()
	if got := r.next(t, want); got != want {
		t.Fatalf("handler got %q, want %q", got, want)
	}
}

// none fails if the recorder has a call pending.
func (r *recorder) none(t *testing.T) {
	t.Helper()
	select {
	case c := <-r.calls:
		t.Fatalf("handler got unexpected %q", c)
	default:
	}
}

// trackedConns records the network connections a Listener dials, so that a
// test can wait for them to be closed.
type trackedConns struct {
	mu     sync.Mutex
	closed []chan struct{}
}

type trackedConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (tc *trackedConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &trackedConn{Conn: conn, closed: make(chan struct{})}
	tc.mu.Lock()
	tc.closed = append(tc.closed, c.closed)
	tc.mu.Unlock()
	return c, nil
}

// open counts the dialed connections not closed yet.
func (tc *trackedConns) open() int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	n := 0
	for _, closed := range tc.closed {
		select {
		case <-closed:
		default:
			n++
		}
	}
	return n
}

// fixture is a Listener on a fresh database, with a pool to NOTIFY and
// inspect the server through.
type fixture struct {
	pool     *pgxpool.Pool
	cfg      *pgx.ConnConfig
	appName  string
	conns    *trackedConns
	listener *pglisten.Listener
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	url := dbtest.URL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse database URL: %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	f := &fixture{pool: pool, cfg: cfg, appName: "pglisten_test_" + hex.EncodeToString(b), conns: &trackedConns{}}
	cfg.RuntimeParams["application_name"] = f.appName
	cfg.DialFunc = f.conns.dial
	f.listener = pglisten.New(cfg, nil)
	return f
}

// run starts the listener; the returned function stops it and returns what
// Run returned.
func (f *fixture) run(t *testing.T) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.listener.Run(ctx) }()
	stopped := false
	var err error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(wait):
				t.Fatalf("Run did not return within %v of the context's end", wait)
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func (f *fixture) notify(t *testing.T, channel, payload string) {
	t.Helper()
	if _, err := f.pool.Exec(context.Background(), "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		t.Fatalf("notify %s: %v", channel, err)
	}
}

func TestDispatchesEachChannelToItsHandler(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	events, previews := newRecorder(), newRecorder()
	f.listener.Handle("test_events", events)
	f.listener.Handle("test_previews", previews)
	f.run(t)
	events.expect(t, "gap")
	previews.expect(t, "gap")

	f.notify(t, "test_events", "e1")
	f.notify(t, "test_previews", "p1")
	f.notify(t, "test_events", "e2")
	f.notify(t, "test_other", "nobody listens")
	events.expect(t, "e1")
	events.expect(t, "e2")
	previews.expect(t, "p1")
	// A notification after the others proves those were all dispatched.
	f.notify(t, "test_previews", "p2")
	previews.expect(t, "p2")
	events.none(t)
	previews.none(t)

	// Both channels were served over one connection.
	var backends int
	if err := f.pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
		f.appName).Scan(&backends); err != nil || backends != 1 {
		t.Fatalf("listener backends = %d, %v; want exactly 1 for both channels", backends, err)
	}
	if open := f.conns.open(); open != 1 {
		t.Fatalf("listener holds %d open connections, want 1 for both channels", open)
	}
}

func TestReconnectsAfterTheBackendIsKilledAndReportsTheGap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	events, previews := newRecorder(), newRecorder()
	f.listener.Handle("test_events", events)
	f.listener.Handle("test_previews", previews)
	f.run(t)
	events.expect(t, "gap")
	previews.expect(t, "gap")

	var killed int
	err := f.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) AS t",
		f.appName).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminate the listening backend: killed %d, %v; want exactly 1", killed, err)
	}
	// Every handler hears of the gap before anything of the new connection.
	events.expect(t, "gap")
	previews.expect(t, "gap")
	f.notify(t, "test_events", "after")
	f.notify(t, "test_previews", "after")
	events.expect(t, "after")
	previews.expect(t, "after")
}

func TestStopsCleanlyWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	events := newRecorder()
	f.listener.Handle("test_events", events)
	stop := f.run(t)
	events.expect(t, "gap")
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v at the context's end, want nil", err)
	}
	f.conns.mu.Lock()
	conns := f.conns.closed
	f.conns.mu.Unlock()
	if len(conns) == 0 {
		t.Fatal("the listener dialed no connection")
	}
	for i, closed := range conns {
		select {
		case <-closed:
		case <-time.After(wait):
			t.Fatalf("connection %d still open %v after Run returned, want every connection closed", i, wait)
		}
	}
	f.notify(t, "test_events", "after stop")
	events.none(t)
}

// TestRetriesWithBackoff has the listener dial a server that refuses every
// connection: attempts follow one another at least MinBackoff, then twice
// that, apart, and Run still ends with its context.
func TestRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	attempts := make(chan time.Time, 10)
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		attempts <- time.Now()
		return nil, errors.New("refused by the test")
	}
	l := pglisten.New(cfg, nil)
	l.Handle("test_events", newRecorder())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var at []time.Time
	for len(at) < 3 {
		select {
		case a := <-attempts:
			at = append(at, a)
		case <-time.After(wait):
			t.Fatalf("%d connection attempts within %v, want 3", len(at), wait)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v at the context's end, want nil", err)
		}
	case <-time.After(wait):
		t.Fatalf("Run did not return within %v of the context's end", wait)
	}
	if d := at[1].Sub(at[0]); d < pglisten.MinBackoff {
		t.Errorf("second attempt %v after the first, want at least %v", d, pglisten.MinBackoff)
	}
	if d := at[2].Sub(at[1]); d < 2*pglisten.MinBackoff {
		t.Errorf("third attempt %v after the second, want at least %v", d, 2*pglisten.MinBackoff)
	}
}

func TestRunWithoutHandlersFails(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig("postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	if err := pglisten.New(cfg, nil).Run(context.Background()); err == nil {
		t.Fatal("Run with no channel registered returned nil, want an error")
	}
}
