// Command mango-bench measures API latency against a running Mango at a
// fixed, open-loop request rate (requests are sent on schedule whether or
// not earlier ones finished, so slow responses cannot hide queueing).
//
//	mango-bench -rate 50 -duration 20s            # agent create + get
//	mango-bench -mode events -senders 16          # event append throughput
//	mango-bench -mode fanout -fanout-streams 100,1000  # commit->SSE latency with many streams on one session, RSS per idle stream
//	mango-bench -mode turns -turns 100 -sessions 8,32,64  # one-bash-round turns: one session, then 8, 32, 64 concurrent
//	mango-bench -mode turns -sandbox docker -sessions 8,32  # the same with the worker's real model client against a scripted Messages API
//	mango-bench -mode interrupts -interrupts 20   # user.interrupt -> idle while streaming, in a tool, on an MCP call
//
// It reads MANGO_BASE_URL and MANGO_API_KEY and prints p50/p90/p99/max per
// operation.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mango-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	rate := flag.Float64("rate", 50, "operations per second for each measured operation")
	duration := flag.Duration("duration", 20*time.Second, "measurement duration")
	warmup := flag.Duration("warmup", 2*time.Second, "unmeasured warm-up at the same rate")
	mode := flag.String("mode", "agents", "agents: create+get latency; events: append throughput and stream latency; turns: agent turn latency (needs a worker); interrupts: interrupt -> idle per turn state (needs a worker)")
	turns := flag.Int("turns", 100, "turns mode: sequential turns measured")
	senders := flag.Int("senders", 16, "events mode: concurrent senders for the throughput run")
	interrupts := flag.Int("interrupts", 20, "interrupts mode: interrupts measured in each turn state")
	mcpListen := flag.String("mcp-listen", "127.0.0.1:0", "interrupts mode: address of the MCP server the bench serves (the worker must reach it)")
	workerMetrics := flag.String("worker-metrics", "", "interrupts mode: the worker's /metrics URL, to report how many interrupts its push applied")
	fanLevels := flag.String("fanout-streams", "100,1000", "fanout mode: comma-separated numbers of SSE streams on one session")
	messages := flag.Int("messages", 100, "fanout mode: user messages sent at -message-rate while the streams watch")
	msgRate := flag.Float64("message-rate", 20, "fanout mode: user messages per second")
	levels := flag.String("sessions", "8,32,64", "turns mode: comma-separated numbers of concurrent sessions, each run for -duration")
	age := flag.Int("age", 3, "turns mode: unmeasured turns each session runs first (long sessions: a turn's cost grows with its transcript)")
	sandbox := flag.String("sandbox", "", "turns mode: run the sessions on this sandbox provider (local, docker, ...: the environment's mango.sandbox) "+
		"with the worker's real model client (MANGO_MODEL=anthropic) against the scripted Messages API the bench serves on -model-listen; unset: the fake model")
	modelListen := flag.String("model-listen", "127.0.0.1:18090", "turns mode with -sandbox: address of the scripted Messages API (the workers' MANGO_MODEL_BASE_URL is http://<this>)")
	newSessions := flag.Int("new-sessions", 10, "turns mode with -sandbox: new sessions whose first turn is measured, one at a time")
	flag.Parse()
	base, key := os.Getenv("MANGO_BASE_URL"), os.Getenv("MANGO_API_KEY")
	if base == "" || key == "" {
		return errors.New("MANGO_BASE_URL and MANGO_API_KEY must be set")
	}
	c := &client{base: base, key: key, http: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256},
	}}
	switch *mode {
	case "events":
		return runEvents(c, *duration, *senders)
	case "fanout":
		ls, err := parseLevels(*fanLevels)
		if err != nil {
			return err
		}
		return runFanout(c, ls, *messages, *msgRate)
	case "turns":
		ls, err := parseLevels(*levels)
		if err != nil {
			return err
		}
		if *age < 1 {
			return fmt.Errorf("-age: %d, want at least 1", *age)
		}
		if *turns < 1 || *newSessions < 1 {
			return fmt.Errorf("-turns %d, -new-sessions %d: want at least 1 each", *turns, *newSessions)
		}
		return runTurns(c, turnsConfig{turns: *turns, levels: ls, duration: *duration, age: *age,
			sandbox: *sandbox, modelListen: *modelListen, newSessions: *newSessions})
	case "interrupts":
		if *interrupts < 1 {
			return fmt.Errorf("-interrupts: %d, want at least 1", *interrupts)
		}
		return runInterrupts(c, *interrupts, *mcpListen, *workerMetrics)
	}
	if _, err := c.createAgent(); err != nil {
		return err
	}
	fmt.Printf("warming up %v at %.0f req/s\n", *warmup, *rate)
	if _, _, err := c.load(*rate, *warmup); err != nil {
		return err
	}
	fmt.Printf("measuring %v at %.0f agent creates/s + %.0f agent gets/s\n", *duration, *rate, *rate)
	creates, gets, err := c.load(*rate, *duration)
	if err != nil {
		return err
	}
	report("agent create", creates)
	report("agent get", gets)
	return nil
}

// parseLevels reads the -sessions list.
func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("-sessions: %q is not a number of sessions from 1 to 1000", f)
		}
		out = append(out, n)
	}
	return out, nil
}

type client struct {
	base, key string
	http      *http.Client
}

func (c *client) do(method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", c.key)
	req.Header.Set("anthropic-version", "2023-06-01")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: status %d: %s", method, path, resp.StatusCode, b)
	}
	return b, nil
}

var agentBody = []byte(`{"name":"bench","model":"claude-sonnet-5","tools":[{"type":"agent_toolset_20260401"}],"metadata":{"bench":"1"}}`)

func (c *client) createAgent() (string, error) {
	b, err := c.do(http.MethodPost, "/v1/agents", agentBody)
	if err != nil {
		return "", err
	}
	var a struct{ ID string }
	if err := json.Unmarshal(b, &a); err != nil {
		return "", err
	}
	return a.ID, nil
}

// load issues one create and one get of the freshly created agent per tick.
func (c *client) load(rate float64, d time.Duration) (creates, gets []time.Duration, err error) {
	interval := time.Duration(float64(time.Second) / rate)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for now := range ticker.C {
		if now.After(deadline) {
			break
		}
		wg.Add(1)
		go func(scheduled time.Time) {
			defer wg.Done()
			id, err := c.createAgent()
			created := time.Since(scheduled)
			var got time.Duration
			if err == nil {
				start := time.Now()
				_, err = c.do(http.MethodGet, "/v1/agents/"+id, nil)
				got = time.Since(start)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			creates = append(creates, created)
			gets = append(gets, got)
		}(now)
	}
	wg.Wait()
	return creates, gets, firstErr
}

func report(name string, d []time.Duration) {
	if len(d) == 0 {
		fmt.Printf("%-13s no samples\n", name)
		return
	}
	slices.Sort(d)
	q := func(p float64) time.Duration { return quantile(d, p).Round(10 * time.Microsecond) }
	fmt.Printf("%-13s n=%d p50=%v p90=%v p99=%v max=%v\n", name, len(d), q(0.50), q(0.90), q(0.99), q(1))
}

// quantile is the p quantile (0..1) of sorted durations; 1 is the maximum.
func quantile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}
