package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db"
)

// runFanout measures, for each number of streams, one session watched by
// that many SSE streams while messages events are committed to it at rate
// (user.interrupt on the idle session: appended as they come, starting no
// turn, so the figures are the fan-out's and not the agent's):
// the latency from each event's commit (its processed_at) to its arrival
// on each stream (p50, p99, max; every stream must receive every event),
// and the api-server's resident memory per open idle stream
// (process_resident_memory_bytes from /metrics, before the streams open
// and once they idle).
func runFanout(c *client, levels []int, messages int, rate float64) error {
	s, err := c.newBareSession()
	if err != nil {
		return err
	}
	fmt.Printf("%-8s %12s %10s %10s %10s %10s %14s\n", "streams", "deliveries", "p50", "p99", "max", "errors", "RSS/stream")
	for _, n := range levels {
		if err := fanoutLevel(c, s, n, messages, rate); err != nil {
			return err
		}
	}
	return nil
}

// fanoutArrival is one event's arrival on one stream.
type fanoutArrival struct {
	key string
	n   int           // the stream's n-th event of the run
	at  time.Time     // when it arrived
	lat time.Duration // since its processed_at
}

// fanoutStreams collects what the streams of one level received.
type fanoutStreams struct {
	mu         sync.Mutex
	got        []fanoutArrival
	streamErrs []error
}

func fanoutLevel(c *client, sessionID string, streams, messages int, rate float64) error {
	before, err := c.residentBytes()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: streams + 10, MaxIdleConnsPerHost: streams + 10}}
	// With the database at hand, commits are timed by their notification,
	// which PostgreSQL sends as the transaction commits.
	var commits *commitClock
	if url := os.Getenv("MANGO_DATABASE_URL"); url != "" {
		var err error
		if commits, err = listenCommits(ctx, url, sessionID); err != nil {
			return err
		}
	}
	fs := &fanoutStreams{}
	connected := make(chan error, streams)
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() { fs.watch(ctx, c, hc, sessionID, messages, connected) })
	}
	for range streams {
		if err := <-connected; err != nil {
			return err
		}
	}
	// Let the server settle with every stream open and idle.
	time.Sleep(3 * time.Second)
	idle, err := c.residentBytes()
	if err != nil {
		return err
	}
	posts, err := postInterrupts(c, sessionID, messages, rate)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	cancel()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.report(streams, messages, float64(idle-before)/float64(streams)/1024, commits, posts)
	return nil
}

// watch reads one stream until it received messages interrupts, reporting
// on connected whether it opened.
func (fs *fanoutStreams) watch(ctx context.Context, c *client, hc *http.Client, sessionID string, messages int, connected chan<- error) {
	resp, err := c.openStream(ctx, hc, sessionID)
	if err != nil {
		connected <- err
		return
	}
	defer func() { _ = resp.Body.Close() }()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, ": connected") {
		connected <- fmt.Errorf("stream: first line %q, %v", line, err)
		return
	}
	connected <- nil
	seen := 0
	for seen < messages {
		line, err := r.ReadString('\n')
		if err != nil {
			if ctx.Err() == nil {
				fs.mu.Lock()
				fs.streamErrs = append(fs.streamErrs, fmt.Errorf("stream ended after %d of %d events: %v", seen, messages, err))
				fs.mu.Unlock()
			}
			return
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || !strings.Contains(data, `"user.interrupt"`) {
			continue
		}
		now := time.Now()
		var ev struct {
			ID          string    `json:"id"`
			ProcessedAt time.Time `json:"processed_at"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			continue
		}
		fs.mu.Lock()
		fs.got = append(fs.got, fanoutArrival{key: ev.ID, n: seen, at: now, lat: now.Sub(ev.ProcessedAt)})
		fs.mu.Unlock()
		seen++
	}
}

// postInterrupts appends messages interrupts to the session at rate per
// second and returns how long each POST took.
func postInterrupts(c *client, sessionID string, messages int, rate float64) ([]time.Duration, error) {
	interval := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	var posts []time.Duration
	for range messages {
		body := `{"events":[{"type":"user.interrupt"}]}`
		sent := time.Now()
		if _, err := c.do(http.MethodPost, "/v1/sessions/"+sessionID+"/events", []byte(body)); err != nil {
			return nil, err
		}
		posts = append(posts, time.Since(sent))
		next = next.Add(interval)
		time.Sleep(time.Until(next))
	}
	return posts, nil
}

// report prints the level's figures: delivery latencies, errors and memory
// per stream (kbPerStream), commit-to-client times when commits were
// timed, the POSTs, and where the time goes. fs.mu is held.
func (fs *fanoutStreams) report(streams, messages int, kbPerStream float64, commits *commitClock, posts []time.Duration) {
	got := fs.got
	lat := make([]time.Duration, len(got))
	for i := range got {
		lat[i] = got[i].lat
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return quantile(lat, p).Round(10 * time.Microsecond) }
	errs := len(fs.streamErrs) + streams*messages - len(got)
	fmt.Printf("%-8d %12s %10v %10v %10v %10d %11.1f KB\n", streams, fmt.Sprintf("%d/%d", len(got), streams*messages),
		q(0.50), q(0.99), q(1), errs, kbPerStream)
	if commits != nil {
		at := commits.times()
		var fromCommit []time.Duration
		for _, a := range got {
			if a.n < len(at) {
				fromCommit = append(fromCommit, a.at.Sub(at[a.n]))
			}
		}
		slices.Sort(fromCommit)
		q := func(p float64) time.Duration { return quantile(fromCommit, p).Round(10 * time.Microsecond) }
		fmt.Printf("         commit->client (from the commit's notification, n=%d): p50 %v p99 %v max %v\n", len(fromCommit), q(0.5), q(0.99), q(1))
	}
	// Where the time goes: the first stream to receive an event measures
	// the commit -> notify -> read path, the spread to the last the
	// fan-out itself.
	first, last := map[string]time.Duration{}, map[string]time.Duration{}
	for _, a := range got {
		if f, ok := first[a.key]; !ok || a.lat < f {
			first[a.key] = a.lat
		}
		last[a.key] = max(last[a.key], a.lat)
	}
	var firsts, spreads []time.Duration
	for k, f := range first {
		firsts = append(firsts, f)
		spreads = append(spreads, last[k]-f)
	}
	slices.Sort(firsts)
	slices.Sort(spreads)
	slices.Sort(posts)
	fmt.Printf("         append (POST) p50 %v p99 %v\n", quantile(posts, 0.5).Round(10*time.Microsecond), quantile(posts, 0.99).Round(10*time.Microsecond))
	fmt.Printf("         first stream p50 %v p99 %v; first-to-last spread p50 %v p99 %v\n",
		quantile(firsts, 0.5).Round(10*time.Microsecond), quantile(firsts, 0.99).Round(10*time.Microsecond),
		quantile(spreads, 0.5).Round(10*time.Microsecond), quantile(spreads, 0.99).Round(10*time.Microsecond))
	for i, e := range fs.streamErrs {
		if i == 3 {
			fmt.Printf("  ... %d more stream errors\n", len(fs.streamErrs)-3)
			break
		}
		fmt.Println("  ", e)
	}
}

// openStream opens a session's SSE stream through hc (a stream outlives
// the client's request timeout, so not through c.http).
func (c *client) openStream(ctx context.Context, hc *http.Client, sessionID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/sessions/"+sessionID+"/events/stream", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", c.key)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("stream of %s: status %d", sessionID, resp.StatusCode)
	}
	return resp, nil
}

// newBareSession creates an agent, an environment and a session on them.
func (c *client) newBareSession() (string, error) {
	agentID, err := c.createAgent()
	if err != nil {
		return "", err
	}
	b, err := c.do(http.MethodPost, "/v1/environments", []byte(fmt.Sprintf(`{"name":"bench-%d"}`, time.Now().UnixNano())))
	if err != nil {
		return "", err
	}
	var env struct{ ID string }
	if err := json.Unmarshal(b, &env); err != nil {
		return "", err
	}
	b, err = c.do(http.MethodPost, "/v1/sessions", []byte(fmt.Sprintf(`{"agent":%q,"environment_id":%q}`, agentID, env.ID)))
	if err != nil {
		return "", err
	}
	var s struct{ ID string }
	return s.ID, json.Unmarshal(b, &s)
}

// commitClock records when each commit to a session was notified.
type commitClock struct {
	mu sync.Mutex
	at []time.Time
}

func (c *commitClock) times() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.at)
}

// listenCommits listens on the events' NOTIFY channel (db.NotifyChannel)
// and records the time of every notification of sessionID's commits until
// ctx ends; it returns once listening.
func listenCommits(ctx context.Context, url, sessionID string) (*commitClock, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("listen for commits: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+db.NotifyChannel); err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("listen for commits: %w", err)
	}
	c := &commitClock{}
	go func() {
		defer func() { _ = conn.Close(context.Background()) }()
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			if rest, ok := strings.CutPrefix(n.Payload, sessionID+":"); ok && rest != "deleted" {
				c.mu.Lock()
				c.at = append(c.at, time.Now())
				c.mu.Unlock()
			}
		}
	}()
	return c, nil
}

// residentBytes reads the api-server's process_resident_memory_bytes.
func (c *client) residentBytes() (int64, error) {
	b, err := c.do(http.MethodGet, "/metrics", nil)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "process_resident_memory_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("/metrics has no process_resident_memory_bytes")
}
