package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
)

// Shape of the soak.
const (
	soakActive       = 32   // sessions doing one-tool turns back to back
	soakIdleSessions = 50   // sessions nobody writes to during the run
	soakIdleStreams  = 1000 // SSE streams on the idle sessions, spread evenly
)

// TestSoak runs, for MANGO_SOAK (a duration: 60s inside make test, 5m in
// make test-soak), soakIdleStreams idle SSE streams plus soakActive
// sessions doing one-bash-tool turns back to back, each watched by a
// stream, against real processes with the configuration an operator gets.
// It checks that no turn fails, that every stream of an active session
// received exactly the session's events (its ids equal the session's list,
// in order), that every idle stream is still open and delivers a final
// event, and that the api-server's and the worker's resident memory stay
// flat after warm-up: the least-squares slope of RSS over the second half
// of the run is reported, and growth over that half must stay small.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("MANGO_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("the soak runs with MANGO_SOAK=<duration> (make test-soak: 5m; make test: 60s)")
	}
	sys := startSystem(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newSoak(t, ctx, sys)

	// The idle streams, opened first: raw HTTP, as a dashboard's would be.
	idleIDs, idle := s.openIdleStreams(t)
	// The active sessions, each watched by a stream recording ids.
	act := s.openActive(t)
	// Memory, sampled every second.
	mem := s.sampleMemory()

	run := s.startTurns(act, time.Now().Add(d))
	// Halfway through, a few new sessions start under the load: their
	// first turns must not wait behind the busy sessions (they did, for a
	// minute, while the worker polled only its sticky queue).
	time.Sleep(d / 2)
	late := s.lateFirstTurns(t)
	run.wg.Wait()
	samples := mem.stop()
	checkSoakTurns(t, act, run, late, d)

	// Every active stream saw exactly the session's events.
	for _, a := range act {
		want := listIDs(t, sys.cli, a.id)
		if got := a.seen.waitIDs(len(want), 30*time.Second); !slices.Equal(got, want) {
			t.Errorf("session %s: the stream delivered %d events, the session lists %d; first difference at %d", a.id, len(got), len(want), firstDiff(got, want))
		}
	}
	s.checkIdleStreams(t, idleIDs, idle)
	checkSoakMemory(t, samples)
}

// soak is what TestSoak's steps share: the running system, the agent and
// environment its sessions use, and the HTTP client of its raw streams.
type soak struct {
	sys          *system
	ctx          context.Context
	agent, env   string
	hc           *http.Client
	base, apiKey string
}

// soakSession is an active session of the soak, watched by a stream.
type soakSession struct {
	id    string
	seen  *rawStream
	turns int
	err   error
}

// newSoak creates the soak's agent and environment.
func newSoak(t *testing.T, ctx context.Context, sys *system) *soak {
	t.Helper()
	agent, err := sys.cli.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "soak",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := sys.cli.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "soak-" + randHex(4)})
	if err != nil {
		t.Fatal(err)
	}
	return &soak{sys: sys, ctx: ctx, agent: agent.ID, env: env.ID, base: sys.apiURL, apiKey: sys.apiKey,
		hc: &http.Client{Transport: &http.Transport{MaxConnsPerHost: soakIdleStreams + 64, MaxIdleConnsPerHost: soakIdleStreams + 64}}}
}

// newSession creates a session of the soak's agent and returns its id.
func (s *soak) newSession(t *testing.T) string {
	t.Helper()
	sess, err := s.sys.cli.Beta.Sessions.New(s.ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(s.agent)}, EnvironmentID: s.env})
	if err != nil {
		t.Fatal(err)
	}
	return sess.ID
}

// openIdleStreams creates soakIdleSessions sessions and opens
// soakIdleStreams streams spread evenly on them.
func (s *soak) openIdleStreams(t *testing.T) ([]string, []*rawStream) {
	t.Helper()
	idleIDs := make([]string, soakIdleSessions)
	for i := range idleIDs {
		idleIDs[i] = s.newSession(t)
	}
	idle := make([]*rawStream, soakIdleStreams)
	for i := range idle {
		var err error
		if idle[i], err = openRawStream(s.ctx, s.hc, s.base, s.apiKey, idleIDs[i%soakIdleSessions]); err != nil {
			t.Fatalf("idle stream %d: %v", i, err)
		}
	}
	return idleIDs, idle
}

// openActive creates soakActive sessions, each with its stream.
func (s *soak) openActive(t *testing.T) []*soakSession {
	t.Helper()
	act := make([]*soakSession, soakActive)
	for i := range act {
		a := &soakSession{id: s.newSession(t)}
		var err error
		if a.seen, err = openRawStream(s.ctx, s.hc, s.base, s.apiKey, a.id); err != nil {
			t.Fatalf("stream of session %s: %v", a.id, err)
		}
		act[i] = a
	}
	return act
}

// soakMemory samples, every second, the api-server's and the worker's RSS
// and the worker's transcript cache.
type soakMemory struct {
	samples  []rssSample
	sampling sync.WaitGroup
	done     chan struct{}
}

// sampleMemory starts sampling; stop ends it.
func (s *soak) sampleMemory() *soakMemory {
	m := &soakMemory{done: make(chan struct{})}
	metricsClient := &http.Client{Timeout: 5 * time.Second}
	m.sampling.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		start := time.Now()
		for {
			api, apiErr := rss(s.sys.api.pid())
			worker, workerErr := rss(s.sys.local.pid())
			cache, cacheErr := gauge(metricsClient, s.sys.localMetrics, "mango_worker_transcript_cache_bytes")
			if apiErr == nil && workerErr == nil && cacheErr == nil {
				m.samples = append(m.samples, rssSample{at: time.Since(start), api: api, worker: worker, cache: cache})
			}
			select {
			case <-m.done:
				return
			case <-tick.C:
			}
		}
	})
	return m
}

// stop ends the sampling and returns the samples.
func (m *soakMemory) stop() []rssSample {
	close(m.done)
	m.sampling.Wait()
	return m.samples
}

// soakRun is the active sessions' turns: wg ends when they have all
// stopped; turns and lat count and time the turns that succeeded.
type soakRun struct {
	wg    sync.WaitGroup
	turns atomic.Int64
	latMu sync.Mutex
	lat   []time.Duration
}

// startTurns starts, on every active session, turns back to back until
// deadline or the session's first failure.
func (s *soak) startTurns(act []*soakSession, deadline time.Time) *soakRun {
	run := &soakRun{}
	for _, a := range act {
		run.wg.Go(func() {
			for a.err == nil && time.Now().Before(deadline) {
				start := time.Now()
				if a.err = soakTurn(s.ctx, s.sys.cli, a.id, a.seen); a.err == nil {
					a.turns++
					run.turns.Add(1)
					run.latMu.Lock()
					run.lat = append(run.lat, time.Since(start))
					run.latMu.Unlock()
				}
			}
		})
	}
	return run
}

// lateFirstTurns starts a few new sessions and returns how long each one's
// first turn took.
func (s *soak) lateFirstTurns(t *testing.T) []time.Duration {
	t.Helper()
	late := make([]time.Duration, 4)
	var lateWG sync.WaitGroup
	for i := range late {
		id := s.newSession(t)
		seen, err := openRawStream(s.ctx, s.hc, s.base, s.apiKey, id)
		if err != nil {
			t.Fatalf("stream of late session %s: %v", id, err)
		}
		lateWG.Go(func() {
			start := time.Now()
			if err := soakTurn(s.ctx, s.sys.cli, id, seen); err != nil {
				t.Errorf("late session %s: first turn: %v", id, err)
			}
			late[i] = time.Since(start)
		})
	}
	lateWG.Wait()
	return late
}

// checkSoakTurns checks that no turn failed and that the late sessions'
// first turns did not starve.
func checkSoakTurns(t *testing.T, act []*soakSession, run *soakRun, late []time.Duration, d time.Duration) {
	t.Helper()
	for _, a := range act {
		if a.err != nil {
			t.Errorf("session %s: turn %d: %v", a.id, a.turns+1, a.err)
		}
	}
	turns, lat := run.turns.Load(), run.lat
	t.Logf("%d turns in %v (%.1f turns/s) on %d sessions beside %d idle streams", turns, d, float64(turns)/d.Seconds(), soakActive, soakIdleStreams)
	slices.Sort(lat)
	if len(lat) > 0 {
		median := lat[len(lat)/2]
		slowest := slices.Max(late)
		t.Logf("turn median %v; first turns of sessions started under load %v", median, late)
		if slowest > 10*median+5*time.Second {
			t.Errorf("a session started under load waited %v for its first turn, over 10x the median turn (%v) + 5s: new sessions starve", slowest, median)
		}
	}
}

// checkIdleStreams: every idle stream is alive: one more event each
// reaches it.
func (s *soak) checkIdleStreams(t *testing.T, idleIDs []string, idle []*rawStream) {
	t.Helper()
	for _, id := range idleIDs {
		if _, err := s.sys.cli.Beta.Sessions.Events.Send(s.ctx, id, anthropic.BetaSessionEventSendParams{
			Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserInterrupt: &anthropic.BetaManagedAgentsUserInterruptEventParams{}}}}); err != nil {
			t.Fatalf("session %s: %v", id, err)
		}
	}
	for i, stream := range idle {
		if err := stream.waitFor("user.interrupt", 1, 30*time.Second); err != nil {
			t.Errorf("idle stream %d of session %s: %v", i, stream.sessionID, err)
		}
	}
}

// checkSoakMemory: memory after warm-up, the second half of the run, stays
// flat, and the worker's transcript cache within its bound.
func checkSoakMemory(t *testing.T, samples []rssSample) {
	t.Helper()
	half := samples[len(samples)/2:]
	if len(half) < 10 {
		t.Fatalf("only %d memory samples in the second half of the run", len(half))
	}
	if last := half[len(half)-1].cache; last <= 0 || last > 64<<20 {
		t.Errorf("worker transcript cache = %.1f MB at the end; want some, at most its 64 MiB bound", last/(1<<20))
	} else {
		t.Logf("worker transcript cache: %.1f MB at the end", last/(1<<20))
	}
	for _, p := range []struct {
		name string
		of   func(rssSample) float64
	}{
		{"api-server", func(s rssSample) float64 { return float64(s.api) }},
		// The worker keeps recent sessions' transcripts, which grow with
		// every turn, up to a bound: that growth is not a leak. Go's heap
		// may reach twice its live data (GOGC=100), so twice the cache's
		// size is set aside.
		{"worker beside its transcript cache", func(s rssSample) float64 { return float64(s.worker) - 2*s.cache }},
	} {
		slope, mean := fitSlope(half, p.of)
		growth := slope * (half[len(half)-1].at - half[0].at).Seconds()
		t.Logf("%s RSS after warm-up: mean %.1f MB, slope %+.1f KB/min (%+.1f MB over the %v measured)",
			p.name, mean/(1<<20), slope*60/1024, growth/(1<<20), (half[len(half)-1].at - half[0].at).Round(time.Second))
		// A leak of a few KB per turn shows as megabytes here; GC cycles
		// alone move RSS by a few percent.
		if growth > 0.15*mean {
			t.Errorf("%s RSS grew %.1f MB (%.0f%% of its mean %.1f MB) over the second half of the run: not flat", p.name, growth/(1<<20), 100*growth/mean, mean/(1<<20))
		}
	}
}

// soakTurn runs one one-bash-tool turn on a session and waits for its idle.
func soakTurn(ctx context.Context, cli anthropic.Client, id string, seen *rawStream) error {
	idles := seen.count("session.status_idle")
	if _, err := cli.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{
				Text: `#tool bash {"command":"true"}`}}}}}}}); err != nil {
		return err
	}
	if err := seen.waitFor("session.status_idle", idles+1, 60*time.Second); err != nil {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		return fmt.Errorf("%w (the stream delivered %d events: %v)", err, len(seen.ids), seen.types)
	}
	return nil
}

// listIDs lists a session's event ids, oldest first.
func listIDs(t *testing.T, cli anthropic.Client, id string) []string {
	t.Helper()
	var out []string
	iter := cli.Beta.Sessions.Events.ListAutoPaging(context.Background(), id, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(100)})
	for iter.Next() {
		out = append(out, iter.Current().ID)
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("list events of %s: %v", id, err)
	}
	return out
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// rawStream is an SSE stream read line by line, as a dashboard would: it
// records the ids of the events and counts them by type.
type rawStream struct {
	sessionID string
	mu        sync.Mutex
	ids       []string
	types     map[string]int
	ended     error
	ch        chan struct{} // closed and replaced on every line
}

// openRawStream opens a stream of a session and returns once the server
// has subscribed it (its ": connected" comment): every event committed
// from then on reaches it.
func openRawStream(ctx context.Context, hc *http.Client, base, key, sessionID string) (*rawStream, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/sessions/"+sessionID+"/events/stream", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", key)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, ": connected") {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("first line %q (%v), want the \": connected\" comment", line, err)
	}
	s := &rawStream{sessionID: sessionID, types: map[string]int{}, ch: make(chan struct{})}
	go func() {
		defer func() { _ = resp.Body.Close() }()
		for {
			line, err := r.ReadString('\n')
			s.mu.Lock()
			if err != nil {
				s.ended = err
			} else if typ, ok := strings.CutPrefix(line, "event: "); ok {
				s.types[strings.TrimSpace(typ)]++
			} else if id, ok := strings.CutPrefix(line, "id: "); ok {
				s.ids = append(s.ids, strings.TrimSpace(id))
			}
			close(s.ch)
			s.ch = make(chan struct{})
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s, nil
}

func (s *rawStream) count(typ string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.types[typ]
}

// waitFor waits until the stream has delivered n events of type typ.
func (s *rawStream) waitFor(typ string, n int, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		got, ended, ch := s.types[typ], s.ended, s.ch
		s.mu.Unlock()
		switch {
		case got >= n:
			return nil
		case ended != nil:
			return fmt.Errorf("stream ended after %d %s: %v", got, typ, ended)
		}
		select {
		case <-ch:
		case <-deadline:
			return fmt.Errorf("%d %s within %v, want %d", got, typ, timeout, n)
		}
	}
}

// waitIDs returns the ids delivered once there are n, or when timeout
// passes.
func (s *rawStream) waitIDs(n int, timeout time.Duration) []string {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		ids, ch := slices.Clone(s.ids), s.ch
		s.mu.Unlock()
		if len(ids) >= n {
			return ids
		}
		select {
		case <-ch:
		case <-deadline:
			return ids
		}
	}
}

type rssSample struct {
	at          time.Duration
	api, worker int64
	cache       float64 // the worker's transcript cache, bytes
}

// gauge reads one unlabelled gauge from a Prometheus /metrics page.
func gauge(hc *http.Client, url, name string) (float64, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}

// rss reads a process's resident set size from /proc.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// fitSlope is the least-squares slope (per second) and the mean of of(s)
// over samples.
func fitSlope(samples []rssSample, of func(rssSample) float64) (slope, mean float64) {
	var sx, sy, sxx, sxy float64
	n := float64(len(samples))
	for _, s := range samples {
		x, y := s.at.Seconds(), of(s)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx), sy / n
}
