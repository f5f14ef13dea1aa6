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
)

const bashTurn = `{"events":[{"type":"user.message","content":[{"type":"text","text":"#tool bash {\"command\":\"true\"}"}]}]}`

// runTurns measures whole agent turns (a running execution-worker with
// the fake model is required): the latency from sending a user.message
// whose script runs one bash round to its session.status_idle on the SSE
// stream, first n turns in a row on one session, then for each level of
// concurrency that many sessions each running turns back to back for d.
// It prints one table row per run: turns/s, latency quantiles, errors.
// Every session first runs age unmeasured turns.
func runTurns(c *client, n int, levels []int, d time.Duration, age int) error {
	b := &turnBench{c: c, age: age}
	if err := b.setup(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fmt.Printf("%-22s %7s %8s %9s %9s %9s %9s %7s\n", "turns (1 bash round)", "turns", "turns/s", "p50", "p90", "p99", "max", "errors")
	one, err := b.sessions(ctx, 1)
	if err != nil {
		return err
	}
	start := time.Now()
	var lat []time.Duration
	for range n {
		l, err := one[0].turn(c)
		if err != nil {
			return err
		}
		lat = append(lat, l)
	}
	row(fmt.Sprintf("1 session, x%d", n), lat, time.Since(start), 0)
	for _, level := range levels {
		ss, err := b.sessions(ctx, level)
		if err != nil {
			return err
		}
		var mu sync.Mutex
		var all []time.Duration
		var errs atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(d)
		start := time.Now()
		for _, s := range ss {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					l, err := s.turn(c)
					if err != nil {
						errs.Add(1)
						fmt.Fprintln(os.Stderr, "mango-bench:", err)
						continue
					}
					mu.Lock()
					all = append(all, l)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		row(fmt.Sprintf("%d sessions, %v", level, d), all, time.Since(start), errs.Load())
	}
	return nil
}

// row prints one line of the turns table.
func row(name string, d []time.Duration, elapsed time.Duration, errs int64) {
	if len(d) == 0 {
		fmt.Printf("%-22s no turns, %d errors\n", name, errs)
		return
	}
	slices.Sort(d)
	q := func(p float64) time.Duration { return quantile(d, p).Round(100 * time.Microsecond) }
	fmt.Printf("%-22s %7d %8.1f %9v %9v %9v %9v %7d\n", name, len(d), float64(len(d))/elapsed.Seconds(),
		q(0.50), q(0.90), q(0.99), q(1), errs)
}

// turnBench creates the sessions of a turns run.
type turnBench struct {
	c          *client
	agent, env string
	age        int // unmeasured turns per session
}

// benchSession is a session with its stream's idle signals.
type benchSession struct {
	id   string
	idle <-chan struct{}
}

func (b *turnBench) setup() error {
	agent, err := b.c.do(http.MethodPost, "/v1/agents", []byte(`{"name":"bench-turns","model":"fake","tools":[{"type":"agent_toolset_20260401"}]}`))
	if err != nil {
		return err
	}
	var a struct{ ID string }
	if err := json.Unmarshal(agent, &a); err != nil {
		return err
	}
	envB, err := b.c.do(http.MethodPost, "/v1/environments", []byte(fmt.Sprintf(`{"name":"bench-turns-%d"}`, time.Now().UnixNano())))
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

// sessions creates n sessions, opens their streams and runs b.age
// unmeasured turns on each (sandbox provisioning, connections, and as
// many more as asked for).
func (b *turnBench) sessions(ctx context.Context, n int) ([]*benchSession, error) {
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
			idle, err := b.c.idleEvents(ctx, s.ID)
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = &benchSession{id: s.ID, idle: idle}
			for range b.age {
				if _, errs[i] = out[i].turn(b.c); errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// turn sends one bash-round message and waits for the session's idle.
func (s *benchSession) turn(c *client) (time.Duration, error) {
	start := time.Now()
	if _, err := c.do(http.MethodPost, "/v1/sessions/"+s.id+"/events", []byte(bashTurn)); err != nil {
		return 0, err
	}
	select {
	case <-s.idle:
		return time.Since(start), nil
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("session %s: no session.status_idle within 30s", s.id)
	}
}

// idleEvents streams a session and signals each session.status_idle.
func (c *client) idleEvents(ctx context.Context, id string) (<-chan struct{}, error) {
	resp, err := c.openStream(ctx, http.DefaultClient, id)
	if err != nil {
		return nil, err
	}
	out := make(chan struct{}, 16)
	go func() {
		defer func() { _ = resp.Body.Close() }()
		r := bufio.NewReader(resp.Body)
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
