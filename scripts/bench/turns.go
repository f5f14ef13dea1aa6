package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

const bashTurn = `{"events":[{"type":"user.message","content":[{"type":"text","text":"#tool bash {\"command\":\"true\"}"}]}]}`

// turnsConfig is what a turns run measures.
type turnsConfig struct {
	turns    int           // sequential turns on one session
	levels   []int         // concurrent sessions, one run each
	duration time.Duration // of each concurrent run
	age      int           // unmeasured turns per session first
	// sandbox, when set, is the provider the sessions run on (their
	// environment's mango.sandbox), with the worker's real model client
	// talking to the scripted Messages API the bench serves on
	// modelListen; unset, the worker's fake model scripts the turns.
	sandbox, modelListen string
	newSessions          int // sandbox level: new sessions whose first turn is measured
}

// runTurns measures whole agent turns (a running execution-worker is
// required): the latency from sending a user.message that makes the turn
// run one bash call to its session.status_idle on the SSE stream, first
// cfg.turns turns in a row on one session, then for each level of
// concurrency that many sessions each running turns back to back for
// cfg.duration. Every session first runs cfg.age unmeasured turns. It
// prints one table row per run: turns/s, latency quantiles, errors.
//
// With the fake model (cfg.sandbox unset) the message scripts the bash
// round. With cfg.sandbox the worker must run the real model client
// against the bench's scripted Messages API (see scriptedModel); the run
// also measures the first turn of cfg.newSessions new sessions, one at a
// time, and counts a turn whose tool result is an error as an error.
func runTurns(c *client, cfg turnsConfig) error {
	b := &turnBench{c: c, age: cfg.age, message: bashTurn}
	agent := `{"name":"bench-turns","model":"fake","tools":[{"type":"agent_toolset_20260401"}]}`
	env := fmt.Sprintf(`{"name":"bench-turns-%d"}`, time.Now().UnixNano())
	if cfg.sandbox != "" {
		b.model = &scriptedModel{}
		url, stop, err := serveScriptedModel(cfg.modelListen, b.model)
		if err != nil {
			return err
		}
		defer stop()
		b.message = userMessage("Run one command in the shell, then say you are done.")
		agent = `{"name":"bench-sandbox-turns","model":"claude-sonnet-4-5","tools":[{"type":"agent_toolset_20260401"}]}`
		env = fmt.Sprintf(`{"name":"bench-sandbox-%s-%d","metadata":{"mango.sandbox":%q}}`, cfg.sandbox, time.Now().UnixNano(), cfg.sandbox)
		fmt.Printf("sandbox %s, the worker's real model client against the scripted Messages API at %s (one bash call per turn: %s)\n",
			cfg.sandbox, url, benchCommand)
	}
	if err := b.setup(agent, env); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fmt.Printf("%-28s %7s %8s %9s %9s %9s %9s %7s\n", "turns (1 bash call)", "turns", "turns/s", "p50", "p90", "p99", "max", "errors")
	one, err := b.sessions(ctx, 1, b.age)
	if err != nil {
		return err
	}
	if b.model != nil && b.model.counts().calls == 0 {
		return fmt.Errorf("%d turns ran but no request reached the scripted Messages API at %s: run the %s worker with "+
			"MANGO_MODEL=anthropic MANGO_MODEL_BASE_URL=http://%s MANGO_MODEL_API_KEY=<any>", b.age, cfg.modelListen, cfg.sandbox, cfg.modelListen)
	}
	later := b.measure(fmt.Sprintf("1 session, x%d", cfg.turns), func(record func(time.Duration, error)) {
		for range cfg.turns {
			record(one[0].turn(c))
		}
	})
	if b.model != nil {
		first := b.measure(fmt.Sprintf("first turn, %d new sessions", cfg.newSessions), func(record func(time.Duration, error)) {
			for range cfg.newSessions {
				s, err := b.sessions(ctx, 1, 0)
				if err != nil {
					record(0, err)
					continue
				}
				record(s[0].turn(c))
			}
		})
		if len(first) > 0 && len(later) > 0 {
			d := (quantile(first, 0.5) - quantile(later, 0.5)).Round(time.Millisecond)
			sign := "+"
			if d < 0 {
				sign = ""
			}
			fmt.Printf("first turn of a new session - later turn (p50): %s%v\n", sign, d)
		}
	}
	for _, level := range cfg.levels {
		ss, err := b.sessions(ctx, level, b.age)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(cfg.duration)
		b.measure(fmt.Sprintf("%d sessions, %v", level, cfg.duration), func(record func(time.Duration, error)) {
			var wg sync.WaitGroup
			for _, s := range ss {
				wg.Go(func() {
					for time.Now().Before(deadline) {
						record(s.turn(c))
					}
				})
			}
			wg.Wait()
		})
	}
	if b.model != nil {
		n := b.model.counts()
		fmt.Printf("scripted Messages API: %d requests, %d tool_use answers, %d tool results with is_error, %d refused requests\n",
			n.calls, n.toolUses, n.toolErrors, n.bad)
		// Sandboxes of a real provider outlive the run (containers on the
		// daemon); deleting the sessions has the workers tear them down.
		if err := b.deleteSessions(); err != nil {
			return err
		}
	}
	return nil
}

// deleteSessions deletes the sessions the run created; the workers tear
// their sandboxes down afterwards.
func (b *turnBench) deleteSessions() error {
	b.mu.Lock()
	ids := b.created
	b.created = nil
	b.mu.Unlock()
	errs := make([]error, len(ids))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			_, errs[i] = b.c.do(http.MethodDelete, "/v1/sessions/"+id, nil)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deleting the bench's sessions: %w", err)
	}
	url := os.Getenv("MANGO_DATABASE_URL")
	if url == "" {
		fmt.Printf("deleted the %d sessions of the run; the workers destroy their sandboxes (set MANGO_DATABASE_URL to wait for it)\n", len(ids))
		return nil
	}
	start := time.Now()
	if err := awaitDeleted(url, ids, 3*time.Minute); err != nil {
		return err
	}
	fmt.Printf("deleted the %d sessions of the run; the workers destroyed their sandboxes in %v\n", len(ids), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// awaitDeleted polls the database at url until none of the sessions ids
// has a row: a worker deletes a deleted session's row once it has torn
// its sandbox down (so that stopping the workers then leaves nothing
// behind on the provider).
func awaitDeleted(url string, ids []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("waiting for the workers to destroy the sandboxes: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for {
		var left int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM sessions WHERE id = ANY($1)", ids).Scan(&left); err != nil {
			return fmt.Errorf("waiting for the workers to destroy the sandboxes of %d deleted sessions: %w", len(ids), err)
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d deleted sessions still have their rows after %v: the workers have not destroyed their sandboxes (see the worker logs)", left, len(ids), timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// measure runs one row of the table: run calls record for each turn
// (concurrently if it likes), and the row is printed with the turns/s
// over run's duration. Errors are the failed turns plus, on the sandbox
// level, tool results the worker sent as errors and requests the scripted
// model refused meanwhile. It returns the sorted latencies.
func (b *turnBench) measure(name string, run func(record func(time.Duration, error))) []time.Duration {
	var mu sync.Mutex
	var lat []time.Duration
	var errs atomic.Int64
	var before modelCounts
	if b.model != nil {
		before = b.model.counts()
	}
	start := time.Now()
	run(func(l time.Duration, err error) {
		if err != nil {
			errs.Add(1)
			fmt.Fprintln(os.Stderr, "mango-bench:", err)
			return
		}
		mu.Lock()
		lat = append(lat, l)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	if b.model != nil {
		d := b.model.counts().sub(before)
		errs.Add(d.toolErrors + d.bad)
	}
	row(name, lat, elapsed, errs.Load())
	return lat
}

// row prints one line of the turns table.
func row(name string, d []time.Duration, elapsed time.Duration, errs int64) {
	if len(d) == 0 {
		fmt.Printf("%-28s no turns, %d errors\n", name, errs)
		return
	}
	slices.Sort(d)
	q := func(p float64) time.Duration { return quantile(d, p).Round(100 * time.Microsecond) }
	fmt.Printf("%-28s %7d %8.1f %9v %9v %9v %9v %7d\n", name, len(d), float64(len(d))/elapsed.Seconds(),
		q(0.50), q(0.90), q(0.99), q(1), errs)
}

// turnBench creates the sessions of a turns run.
type turnBench struct {
	c          *client
	agent, env string
	age        int            // unmeasured turns per session
	message    string         // the events body that starts one turn
	model      *scriptedModel // the sandbox level's Messages API, else nil

	mu      sync.Mutex
	created []string // ids of the sessions created
}

// benchSession is a session with its stream's idle signals.
type benchSession struct {
	id      string
	message string
	idle    <-chan struct{}
}

// setup creates the agent and the environment (request bodies agentBody
// and envBody) the sessions use.
func (b *turnBench) setup(agentBody, envBody string) error {
	agent, err := b.c.do(http.MethodPost, "/v1/agents", []byte(agentBody))
	if err != nil {
		return err
	}
	var a struct{ ID string }
	if err := json.Unmarshal(agent, &a); err != nil {
		return err
	}
	envB, err := b.c.do(http.MethodPost, "/v1/environments", []byte(envBody))
	if err != nil {
		return err
	}
	var env struct{ ID string }
	if err := json.Unmarshal(envB, &env); err != nil {
		return err
	}
	b.agent, b.env = a.ID, env.ID
	return nil
}

// sessions creates n sessions, opens their streams and runs age
// unmeasured turns on each (sandbox provisioning, connections, and as
// many more as asked for).
func (b *turnBench) sessions(ctx context.Context, n, age int) ([]*benchSession, error) {
	out := make([]*benchSession, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			raw, err := b.c.do(http.MethodPost, "/v1/sessions", []byte(fmt.Sprintf(`{"agent":%q,"environment_id":%q}`, b.agent, b.env)))
			if err != nil {
				errs[i] = err
				return
			}
			var s struct{ ID string }
			if errs[i] = json.Unmarshal(raw, &s); errs[i] != nil {
				return
			}
			b.mu.Lock()
			b.created = append(b.created, s.ID)
			b.mu.Unlock()
			idle, err := b.c.idleEvents(ctx, s.ID)
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = &benchSession{id: s.ID, message: b.message, idle: idle}
			for range age {
				if _, errs[i] = out[i].turn(b.c); errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// turn sends the turn's message and waits for the session's idle.
func (s *benchSession) turn(c *client) (time.Duration, error) {
	start := time.Now()
	if _, err := c.do(http.MethodPost, "/v1/sessions/"+s.id+"/events", []byte(s.message)); err != nil {
		return 0, err
	}
	select {
	case <-s.idle:
		return time.Since(start), nil
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("session %s: no session.status_idle within 30s", s.id)
	}
}

// idleEvents streams a session and signals each session.status_idle. It
// returns once the stream is connected, so no event sent later is missed.
func (c *client) idleEvents(ctx context.Context, id string) (<-chan struct{}, error) {
	resp, err := c.openStream(ctx, http.DefaultClient, id)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, ": connected") {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("stream of %s: first line %q, want \": connected\" (%v)", id, line, err)
	}
	out := make(chan struct{}, 16)
	go func() {
		defer func() { _ = resp.Body.Close() }()
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.TrimSpace(line) == "event: session.status_idle" {
				out <- struct{}{}
			}
		}
	}()
	return out, nil
}
