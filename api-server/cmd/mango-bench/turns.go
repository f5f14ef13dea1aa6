package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const bashTurn = `{"events":[{"type":"user.message","content":[{"type":"text","text":"#tool bash {\"command\":\"true\"}"}]}]}`

// runTurns measures whole agent turns (a running execution-worker with
// the fake model is required): the latency from sending a user.message
// whose script runs one bash round to its session.status_idle on the SSE
// stream, sequentially on one session; then turns/s with `sessions`
// sessions in parallel for d.
func runTurns(c *client, n, sessions int, d time.Duration) error {
	agent, err := c.do(http.MethodPost, "/v1/agents", []byte(`{"name":"bench-turns","model":"fake","tools":[{"type":"agent_toolset_20260401"}]}`))
	if err != nil {
		return err
	}
	var a struct{ ID string }
	_ = json.Unmarshal(agent, &a)
	envB, err := c.do(http.MethodPost, "/v1/environments", []byte(fmt.Sprintf(`{"name":"bench-turns-%d"}`, time.Now().UnixNano())))
	if err != nil {
		return err
	}
	var env struct{ ID string }
	_ = json.Unmarshal(envB, &env)
	newSession := func() (string, error) {
		b, err := c.do(http.MethodPost, "/v1/sessions", []byte(fmt.Sprintf(`{"agent":%q,"environment_id":%q}`, a.ID, env.ID)))
		if err != nil {
			return "", err
		}
		var s struct{ ID string }
		return s.ID, json.Unmarshal(b, &s)
	}
	turn := func(id string, idle <-chan struct{}) (time.Duration, error) {
		start := time.Now()
		if _, err := c.do(http.MethodPost, "/v1/sessions/"+id+"/events", []byte(bashTurn)); err != nil {
			return 0, err
		}
		select {
		case <-idle:
			return time.Since(start), nil
		case <-time.After(30 * time.Second):
			return 0, fmt.Errorf("session %s: no session.status_idle within 30s", id)
		}
	}

	id, err := newSession()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	idle, err := c.idleEvents(ctx, id)
	if err != nil {
		return err
	}
	for range 3 { // warm-up: provisioning, connections
		if _, err := turn(id, idle); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, 0, n)
	for range n {
		l, err := turn(id, idle)
		if err != nil {
			return err
		}
		lat = append(lat, l)
	}
	report(fmt.Sprintf("turn (1 bash round), sequential x%d", n), lat)

	var done atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	for range sessions {
		sid, err := newSession()
		if err != nil {
			return err
		}
		ch, err := c.idleEvents(ctx, sid)
		if err != nil {
			return err
		}
		if _, err := turn(sid, ch); err != nil { // provision first
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := turn(sid, ch); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	fmt.Printf("turns/s with %d sessions: %.1f (%d turns in %v)\n", sessions, float64(done.Load())/d.Seconds(), done.Load(), d)
	return nil
}

// idleEvents streams a session and signals each session.status_idle.
func (c *client) idleEvents(ctx context.Context, id string) (<-chan struct{}, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/sessions/"+id+"/events/stream", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", c.key)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stream: status %d", resp.StatusCode)
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
