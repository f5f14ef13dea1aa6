package app_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/temporaltest"
)

// cutProxy forwards TCP connections to target; cut closes them all and
// refuses new ones until restore, like a Temporal server that died and
// came back.
type cutProxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() {
		_ = ln.Close()
		p.setCut(true)
	})
	go p.serve()
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(in)
	}
}

func (p *cutProxy) forward(in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = in.Close()
		return
	}
	if !p.track(in, out) {
		return
	}
	go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
	_, _ = io.Copy(in, out)
	_ = in.Close()
}

// track registers a connection pair, or closes it when the proxy is cut.
func (p *cutProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		if p.cut {
			_ = c.Close()
			continue
		}
		p.conns[c] = struct{}{}
	}
	return !p.cut
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
		clear(p.conns)
	}
}

// TestToolCallSurvivesTemporalOutage: Temporal goes away while a turn's
// tool runs, longer than the turn's heartbeat timeout, and comes back.
// Temporal has given the attempt up and starts the next one on the same
// worker, whose first attempt still runs the call: the next attempt takes
// the call over, and the model gets its real result (not "may or may not
// have completed"), the tool running once.
func TestToolCallSurvivesTemporalOutage(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	temporal := temporaltest.Dial(t, env["MANGO_TEMPORAL_HOSTPORT"])
	proxy := startCutProxy(t, env["MANGO_TEMPORAL_HOSTPORT"])
	env["MANGO_TEMPORAL_HOSTPORT"] = proxy.addr()
	runWorker(t, env)
	session := srv.NewSession(t, "local")
	before := controlPlaneCalls(t, srv)["RecordToolJournal"]
	sendMessage(t, srv, session, `#tool bash {"command":"touch started; while [ ! -e release ]; do sleep 0.02; done; echo ran >> runs; echo finished"}`)
	workdir := filepath.Dir(waitForFile(t, env["MANGO_LOCAL_SANDBOX_ROOT"], "started"))

	// Longer than the 1 s heartbeat timeout: Temporal times the attempt
	// out and schedules the next one.
	proxy.setCut(true)
	waitAttemptTimedOut(t, temporal, session)
	proxy.setCut(false)
	restored := time.Now()
	// The next attempt reached the journal (its start mark, the first
	// attempt's being the first call); the call is still held.
	poll.Until(t, 60*time.Second, "a second attempt to reach the tool call after Temporal's return", func() (bool, string) {
		n := controlPlaneCalls(t, srv)["RecordToolJournal"] - before
		return n >= 2, fmt.Sprintf("%v journal calls since the message", n)
	})
	t.Logf("the second attempt reached the call %s after Temporal's return", time.Since(restored).Round(time.Millisecond))
	if err := os.WriteFile(filepath.Join(workdir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) == 1 })
	if n := countType(evs, "agent.tool_result"); n != 1 {
		t.Fatalf("%d tool results, want 1: %s", n, types(evs))
	}
	res := lastOf(evs, "agent.tool_result")
	if res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, "finished") {
		t.Errorf("tool result %s: want the call's own output", res.Raw)
	}
	if runs, err := os.ReadFile(filepath.Join(workdir, "runs")); err != nil || string(runs) != "ran\n" {
		t.Errorf("runs %q (%v): want the tool run exactly once", runs, err)
	}
}

// waitAttemptTimedOut waits until Temporal has timed out the first attempt
// of one of the session workflow's activities (it lists an attempt after
// the first as pending), which the test cannot learn through the cut
// worker.
func waitAttemptTimedOut(t *testing.T, c client.Client, session string) {
	t.Helper()
	poll.Until(t, 30*time.Second, "Temporal to time out the first attempt of the held activity", func() (bool, string) {
		desc, err := c.DescribeWorkflow(t.Context(), session, "")
		if err != nil {
			return false, fmt.Sprintf("describe: %v", err)
		}
		var seen []string
		for _, a := range desc.RawResponse.GetPendingActivities() {
			if a.GetAttempt() >= 2 {
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("%s attempt %d %v", a.GetActivityType().GetName(), a.GetAttempt(), a.GetState()))
		}
		return false, fmt.Sprintf("pending activities: %v", seen)
	})
}

// waitForFile returns the path of the first file called name under root,
// waiting for one to appear.
func waitForFile(t *testing.T, root, name string) string {
	t.Helper()
	found := errors.New("found")
	var path string
	poll.Until(t, 30*time.Second, "a file "+name+" under "+root, func() (bool, string) {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == name && !d.IsDir() {
				path = p
				return found
			}
			return nil
		})
		return errors.Is(err, found), fmt.Sprintf("walk: %v", err)
	})
	return path
}
