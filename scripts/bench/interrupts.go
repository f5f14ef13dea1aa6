package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// interruptState is one turn state interrupts are measured in: the message
// that puts a turn there and the event that says it got there.
type interruptState struct {
	name, message, reached string
	mcp                    bool
}

var interruptStates = []interruptState{
	{name: "streaming the model", message: "#slow 500ms\n#reply one two three four five six seven eight nine ten", reached: "span.model_request_start"},
	{name: "running a sandbox tool", message: `#tool bash {"command":"sleep 29.5"}`, reached: "agent.tool_use"},
	{name: "waiting on an MCP server", message: `#tool mcp__bench__block {}`, reached: "agent.mcp_tool_use", mcp: true},
}

// inState is how long a turn is left in its state before the interrupt,
// so that the model is mid-stream, the command running, the MCP call
// sent.
const inState = 150 * time.Millisecond

// runInterrupts measures user.interrupt → session.status_idle (on the SSE
// stream) n times in each turn state: streaming the model, running a tool
// in the sandbox, waiting on an MCP server. It needs a running
// execution-worker with the fake model that may reach mcpListen (the MCP
// server it serves, whose block tool waits until the call is cancelled;
// the dev stack sets MANGO_MCP_ALLOW_PRIVATE). With workerMetrics it also
// reports how many interrupts the worker's push applied.
func runInterrupts(c *client, n int, mcpListen, workerMetrics string) error {
	mcpURL, stop, err := serveBlockingMCP(mcpListen)
	if err != nil {
		return err
	}
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fmt.Printf("%-26s %5s %9s %9s %9s %9s %7s %8s\n", "interrupt -> idle", "n", "p50", "p90", "p99", "max", "errors", "pushed")
	for _, st := range interruptStates {
		s, err := c.interruptSession(ctx, st.mcp, mcpURL)
		if err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		before, _ := appliedInterrupts(workerMetrics)
		var lat []time.Duration
		var errs int64
		for range n {
			l, err := s.interrupt(c, st)
			if err != nil {
				errs++
				fmt.Fprintf(os.Stderr, "mango-bench: %s: %v\n", st.name, err)
				continue
			}
			lat = append(lat, l)
		}
		pushed := "-"
		if after, ok := appliedInterrupts(workerMetrics); ok {
			pushed = strconv.FormatFloat(after-before, 'f', 0, 64)
		}
		interruptRow(st.name, lat, errs, pushed)
	}
	return nil
}

// interruptRow prints one line of the interrupts table.
func interruptRow(name string, d []time.Duration, errs int64, pushed string) {
	if len(d) == 0 {
		fmt.Printf("%-26s no samples, %d errors\n", name, errs)
		return
	}
	slices.Sort(d)
	q := func(p float64) time.Duration {
		return d[min(len(d)-1, int(p*float64(len(d))))].Round(100 * time.Microsecond)
	}
	fmt.Printf("%-26s %5d %9v %9v %9v %9v %7d %8s\n", name, len(d), q(0.50), q(0.90), q(0.99), d[len(d)-1].Round(100*time.Microsecond), errs, pushed)
}

// interruptSession is a session whose stream's event types are delivered.
type interruptSession struct {
	id     string
	events <-chan string
}

// interruptSession creates an agent (with the bench's MCP server when
// withMCP), an environment and a session, opens its stream and runs one
// unmeasured turn (the sandbox, the connections).
func (c *client) interruptSession(ctx context.Context, withMCP bool, mcpURL string) (*interruptSession, error) {
	agent := map[string]any{"name": "bench-interrupts", "model": "fake", "tools": []any{map[string]any{"type": "agent_toolset_20260401"}}}
	if withMCP {
		agent["mcp_servers"] = []any{map[string]any{"type": "url", "name": "bench", "url": mcpURL}}
		agent["tools"] = append(agent["tools"].([]any), map[string]any{"type": "mcp_toolset", "mcp_server_name": "bench",
			"default_config": map[string]any{"permission_policy": map[string]any{"type": "always_allow"}}})
	}
	body, _ := json.Marshal(agent)
	raw, err := c.do(http.MethodPost, "/v1/agents", body)
	if err != nil {
		return nil, err
	}
	var a struct{ ID string }
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, err
	}
	raw, err = c.do(http.MethodPost, "/v1/environments", []byte(fmt.Sprintf(`{"name":"bench-interrupts-%d"}`, time.Now().UnixNano())))
	if err != nil {
		return nil, err
	}
	var env struct{ ID string }
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, err
	}
	raw, err = c.do(http.MethodPost, "/v1/sessions", []byte(fmt.Sprintf(`{"agent":%q,"environment_id":%q}`, a.ID, env.ID)))
	if err != nil {
		return nil, err
	}
	var sess struct{ ID string }
	if err := json.Unmarshal(raw, &sess); err != nil {
		return nil, err
	}
	events, err := c.eventTypes(ctx, sess.ID)
	if err != nil {
		return nil, err
	}
	s := &interruptSession{id: sess.ID, events: events}
	if err := s.send(c, userMessage(`#tool bash {"command":"true"}`)); err != nil {
		return nil, err
	}
	if err := s.await("session.status_idle", 60*time.Second); err != nil {
		return nil, fmt.Errorf("warm-up turn: %w", err)
	}
	return s, nil
}

// interrupt starts a turn, waits until it reached the state, interrupts
// it and returns how long the session took to go idle.
func (s *interruptSession) interrupt(c *client, st interruptState) (time.Duration, error) {
	if err := s.send(c, userMessage(st.message)); err != nil {
		return 0, err
	}
	if err := s.await(st.reached, 30*time.Second); err != nil {
		return 0, err
	}
	time.Sleep(inState)
	start := time.Now()
	if err := s.send(c, `{"events":[{"type":"user.interrupt"}]}`); err != nil {
		return 0, err
	}
	if err := s.await("session.status_idle", 30*time.Second); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func (s *interruptSession) send(c *client, body string) error {
	_, err := c.do(http.MethodPost, "/v1/sessions/"+s.id+"/events", []byte(body))
	return err
}

// await waits for the next event of type typ, skipping others.
func (s *interruptSession) await(typ string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case t, ok := <-s.events:
			if !ok {
				return fmt.Errorf("session %s: stream ended while waiting for %s", s.id, typ)
			}
			if t == typ {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("session %s: no %s within %v", s.id, typ, timeout)
		}
	}
}

// userMessage is a send body of one user.message with text.
func userMessage(text string) string {
	b, _ := json.Marshal(map[string]any{"events": []any{map[string]any{"type": "user.message",
		"content": []any{map[string]any{"type": "text", "text": text}}}}})
	return string(b)
}

// eventTypes streams a session and delivers the type of each event.
func (c *client) eventTypes(ctx context.Context, id string) (<-chan string, error) {
	resp, err := c.openStream(ctx, http.DefaultClient, id)
	if err != nil {
		return nil, err
	}
	out := make(chan string, 1024)
	go func() {
		defer close(out)
		defer func() { _ = resp.Body.Close() }()
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if t, ok := strings.CutPrefix(strings.TrimSpace(line), "event: "); ok {
				out <- t
			}
		}
	}()
	return out, nil
}

// serveBlockingMCP serves an MCP server on addr whose block tool waits
// until the call is cancelled, and returns its URL.
func serveBlockingMCP(addr string) (url string, stop func(), err error) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "mango-bench", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "block", Description: "Waits until the call is cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("-mcp-listen: %w", err)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{JSONResponse: true})
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/mcp", func() { _ = hs.Close() }, nil
}

// appliedInterrupts reads mango_worker_interrupts_applied_total from the
// worker's metrics URL; ok is false without one.
func appliedInterrupts(metricsURL string) (float64, bool) {
	if metricsURL == "" {
		return 0, false
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		return 0, false
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "mango_worker_interrupts_applied_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, sc.Err() == nil // absent: none applied (push off)
}
