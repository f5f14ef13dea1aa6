package faults

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// Levels and length of the throughput guard's runs.
const (
	guardLow, guardHigh = 8, 32
	guardRun            = 12 * time.Second
)

// TestThroughputRatios guards turn throughput under concurrency with
// ratios only, never absolute times (the machine's speed varies; `make
// bench` reports the figures): one-bash-round turns on guardLow, then
// guardHigh concurrent sessions. Throughput must not fall as concurrency
// rises, and at guardHigh no session may wait much longer than the others
// (the p99 turn within a few times the median). It runs with the fault
// suite (MANGO_FAULTS=1), alone, on its own processes.
func TestThroughputRatios(t *testing.T) {
	if os.Getenv("MANGO_FAULTS") != "1" {
		t.Skip("the throughput guard runs with MANGO_FAULTS=1 (make test-faults)")
	}
	sys := startSystem(t, false)
	ctx := context.Background()
	agent, err := sys.cli.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "throughput",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := sys.cli.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "throughput-" + randHex(4)})
	if err != nil {
		t.Fatal(err)
	}
	low := turnRun(t, sys.cli, agent.ID, env.ID, guardLow, guardRun)
	high := turnRun(t, sys.cli, agent.ID, env.ID, guardHigh, guardRun)
	t.Logf("%d sessions: %s", guardLow, low)
	t.Logf("%d sessions: %s", guardHigh, high)
	if high.rate < 0.7*low.rate {
		t.Errorf("throughput fell from %.1f turns/s at %d sessions to %.1f at %d; want at least 70%%", low.rate, guardLow, high.rate, guardHigh)
	}
	if high.p99 > 3*high.p50 {
		t.Errorf("at %d sessions the p99 turn (%v) is over 3x the median (%v): some sessions wait while others run", guardHigh, high.p99, high.p50)
	}
}

// runStats are the figures of one run.
type runStats struct {
	turns         int
	rate          float64
	p50, p99, max time.Duration
}

func (r runStats) String() string {
	return fmt.Sprintf("%d turns, %.1f turns/s, p50 %v, p99 %v, max %v", r.turns, r.rate, r.p50, r.p99, r.max)
}

// turnRun creates n sessions, runs one unmeasured turn on each, then turns
// back to back on all of them for d, and returns the figures.
func turnRun(t *testing.T, cli anthropic.Client, agentID, envID string, n int, d time.Duration) runStats {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	idles := make([]<-chan struct{}, n)
	ids := make([]string, n)
	for i := range n {
		s, err := cli.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID})
		if err != nil {
			t.Fatal(err)
		}
		ids[i], idles[i] = s.ID, idleSignals(ctx, cli, s.ID)
	}
	turn := func(i int) (time.Duration, error) {
		start := time.Now()
		_, err := cli.Beta.Sessions.Events.Send(ctx, ids[i], anthropic.BetaSessionEventSendParams{
			Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
				Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{
					Text: `#tool bash {"command":"true"}`}}}}}}})
		if err != nil {
			return 0, err
		}
		select {
		case <-idles[i]:
			return time.Since(start), nil
		case <-time.After(60 * time.Second):
			return 0, fmt.Errorf("session %s: not idle within 60s", ids[i])
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n { // warm-up: sandboxes, connections
		wg.Go(func() { _, errs[i] = turn(i) })
	}
	wg.Wait()
	var mu sync.Mutex
	var lat []time.Duration
	deadline := time.Now().Add(d)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			for errs[i] == nil && time.Now().Before(deadline) {
				var l time.Duration
				if l, errs[i] = turn(i); errs[i] == nil {
					mu.Lock()
					lat = append(lat, l)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			t.Fatalf("%d sessions: %v", n, err)
		}
	}
	if len(lat) < 2*n {
		t.Fatalf("%d sessions: only %d turns in %v", n, len(lat), d)
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	return runStats{turns: len(lat), rate: float64(len(lat)) / elapsed.Seconds(), p50: q(0.5), p99: q(0.99), max: lat[len(lat)-1]}
}

// idleSignals streams a session's events and signals each
// session.status_idle.
func idleSignals(ctx context.Context, cli anthropic.Client, id string) <-chan struct{} {
	out := make(chan struct{}, 16)
	// The client's 10 s request timeout would cut the stream.
	stream := cli.Beta.Sessions.Events.StreamEvents(ctx, id, anthropic.BetaSessionEventStreamParams{}, option.WithRequestTimeout(time.Hour))
	go func() {
		defer func() { _ = stream.Close() }()
		for stream.Next() {
			if stream.Current().Type == "session.status_idle" {
				out <- struct{}{}
			}
		}
	}()
	return out
}
