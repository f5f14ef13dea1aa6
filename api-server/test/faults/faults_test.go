// Package faults is Mango's fault-injection suite: real processes (the
// api-server, execution workers with the scripted fake model, PostgreSQL
// and the Temporal dev server on its file store), sessions running
// one-tool turns, and crashes of each process in the middle of them. It
// runs only with MANGO_FAULTS=1 (make test-faults, which make test runs).
package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/testenv"
)

// Shape of the run: sessions in groups; fault k is injected while tools
// of group k run, and group k+1 starts right after it.
const (
	groupSize     = 4
	turnsPerSess  = 3
	idleAfterLast = 60 * time.Second
	ambiguousText = "may or may not have completed"
)

// fault is one injected failure and what it cost.
type fault struct {
	name      string
	at        time.Time
	busy      map[string]int // session -> turn in flight when injected
	recovered time.Duration  // until every busy turn was idle
	workerDie bool           // a worker died: ambiguous results allowed
}

// sess is one client session driven through the SDK.
type sess struct {
	id     string
	docker bool
	mu     sync.Mutex
	sent   []string // accepted user.message texts, in order
	turn   int      // turns sent so far
	idle   int      // session.status_idle events seen
	toolOn bool     // the last listed events show a tool use without result
	done   chan struct{}
}

func (s *sess) state() (turn, idle int, toolOn bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn, s.idle, s.toolOn
}

func marker(sessionID string, turn int) string { return fmt.Sprintf("%s-t%d", sessionID, turn) }

// TestFaults is the suite. Every process runs with the configuration an
// operator would give it: no worker id, no locality, default timeouts.
func TestFaults(t *testing.T) {
	if os.Getenv("MANGO_FAULTS") != "1" {
		t.Skip("the fault-injection suite runs with MANGO_FAULTS=1 (make test-faults)")
	}
	sys := startSystem(t, dockerReady(t))
	ctx := context.Background()
	agent, err := sys.cli.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "faults",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}}})
	if err != nil {
		t.Fatal(err)
	}

	const groups = 4
	localSess := newFaultSessions(t, ctx, sys.cli, agent.ID, groups*groupSize, false)
	var dockerSess []*sess
	if sys.withDocker {
		dockerSess = newFaultSessions(t, ctx, sys.cli, agent.ID, groupSize, true)
	}
	d := &driver{t: t, cli: sys.cli}
	start := time.Now()
	faults := injectFaults(t, sys, d, localSess, dockerSess)
	last := faults[len(faults)-1].at
	all := append(slices.Clone(localSess), dockerSess...)
	for _, s := range all {
		select {
		case <-s.done:
		case <-time.After(time.Until(last.Add(idleAfterLast))):
			turn, idle, _ := s.state()
			t.Fatalf("session %s not idle within %s of the last fault: %d of %d turns sent, %d idle", s.id, idleAfterLast, turn, turnsPerSess, idle)
		}
	}
	if d.failed() {
		t.FailNow()
	}
	took := time.Since(start)

	// Every session, as the client sees it now.
	markers := sessionMarkers(t, sys, len(dockerSess))
	ambiguous := map[string]map[int]bool{} // session -> turns with an ambiguous result
	for _, s := range all {
		evs := d.list(s.id)
		ambiguous[s.id] = checkSession(t, s, evs, markers)
		checkReplay(t, sys.cli, s.id, evs)
	}
	for _, f := range faults {
		f.recovered = d.recovery(f)
	}
	t.Logf("fault injection: %d sessions x %d one-tool turns in %s", len(all), turnsPerSess, took.Round(time.Millisecond))
	attributeAmbiguous(t, faults, ambiguous)
}

// newFaultSessions creates n sessions of agent in a new environment, in
// docker sandboxes or local ones.
func newFaultSessions(t *testing.T, ctx context.Context, cli anthropic.Client, agent string, n int, docker bool) []*sess {
	t.Helper()
	meta := map[string]string{}
	if docker {
		meta["mango.sandbox"] = "docker"
	}
	env, err := cli.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "faults-" + randHex(4), Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*sess, n)
	for i := range out {
		s, err := cli.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent)}, EnvironmentID: env.ID})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = &sess{id: s.ID, docker: docker, done: make(chan struct{})}
	}
	return out
}

// injectFaults starts the groups one after another, injecting fault k
// while tools of group k run, and returns the faults in order.
func injectFaults(t *testing.T, sys *system, d *driver, localSess, dockerSess []*sess) []*fault {
	t.Helper()
	var faults []*fault
	inject := func(name string, group []*sess, workerDie bool, do func()) {
		f := &fault{name: name, workerDie: workerDie}
		d.waitToolsRunning(group, 2)
		f.busy = d.busy(append(slices.Clone(localSess), dockerSess...))
		f.at = time.Now()
		do()
		faults = append(faults, f)
		t.Logf("fault %-34s injected with %d turns in flight", name, len(f.busy))
	}

	d.start(localSess[0:groupSize])
	inject("SIGKILL worker, restart after 2s", localSess[0:groupSize], true, func() {
		sys.local.kill(t)
		time.Sleep(2 * time.Second)
		sys.startWorker(sys.local)
	})
	d.start(localSess[groupSize : 2*groupSize])
	inject("SIGKILL api-server, restart", localSess[groupSize:2*groupSize], false, func() {
		sys.api.kill(t)
		sys.startAPI()
	})
	d.start(localSess[2*groupSize : 3*groupSize])
	inject("PostgreSQL immediate stop for 3s", localSess[2*groupSize:3*groupSize], false, func() {
		sys.pg.crash(t)
		time.Sleep(3 * time.Second)
		sys.pg.start(t)
	})
	d.start(localSess[3*groupSize:])
	inject("SIGKILL Temporal, restart", localSess[3*groupSize:], false, func() {
		sys.temporal.kill(t)
		sys.temporal.start(t)
		waitTemporal(t, sys.temporal, sys.temporalAddr)
	})
	if sys.withDocker {
		d.start(dockerSess)
		inject("SIGKILL docker worker, restart after 2s", dockerSess, true, func() {
			sys.dockerWorker.kill(t)
			time.Sleep(2 * time.Second)
			sys.startWorker(sys.dockerWorker)
		})
	}
	return faults
}

// sessionMarkers counts the turns' markers in every sandbox, local and
// docker, and checks that each of the dockerSessions docker sessions kept
// one container.
func sessionMarkers(t *testing.T, sys *system, dockerSessions int) map[string]int {
	t.Helper()
	markers := localMarkers(t, sys.sandboxes)
	if sys.withDocker {
		got, containers := dockerMarkers(t, sys.runID)
		for k, v := range got {
			markers[k] += v
		}
		// One container per session, kept across the worker's death: the
		// restarted worker resumed in it rather than starting over.
		if containers != dockerSessions {
			t.Errorf("%d containers for %d docker sessions, want one each", containers, dockerSessions)
		}
	}
	return markers
}

// attributeAmbiguous attributes each ambiguous result to the fault it was
// in flight during, and reports each fault's count and recovery; only a
// worker dying mid-call may leave one.
func attributeAmbiguous(t *testing.T, faults []*fault, ambiguous map[string]map[int]bool) {
	t.Helper()
	t.Logf("%-40s %10s %12s", "fault", "ambiguous", "recovery")
	for _, f := range faults {
		n := 0
		for sid, turns := range ambiguous {
			for turn := range turns {
				if f.busy[sid] == turn {
					n++
					delete(turns, turn)
				}
			}
		}
		t.Logf("%-40s %10d %11.1fs", f.name, n, f.recovered.Seconds())
		if n > 0 && !f.workerDie {
			t.Errorf("fault %q left %d ambiguous tool results; only a worker dying mid-call may", f.name, n)
		}
	}
	for sid, turns := range ambiguous {
		for turn := range turns {
			t.Errorf("session %s turn %d has an ambiguous tool result but was not in flight during a worker kill", sid, turn)
		}
	}
}

// driver runs sessions' turns through the SDK, riding out the faults as a
// careful client would: a request that failed is checked before it is
// sent again, so an accepted message is never sent twice.
type driver struct {
	t   *testing.T
	cli anthropic.Client

	mu   sync.Mutex
	errs []string
}

func (d *driver) fail(format string, args ...any) {
	d.mu.Lock()
	d.errs = append(d.errs, fmt.Sprintf(format, args...))
	d.mu.Unlock()
	d.t.Errorf(format, args...)
}

func (d *driver) failed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.errs) > 0
}

func (d *driver) start(group []*sess) {
	for _, s := range group {
		go d.run(s)
	}
}

func (d *driver) run(s *sess) {
	defer close(s.done)
	for turn := 1; turn <= turnsPerSess; turn++ {
		text := fmt.Sprintf(`#tool bash {"command":"echo %s >> markers.log; sleep 1"}`, marker(s.id, turn))
		if err := d.send(s, text); err != nil {
			d.fail("session %s turn %d: send: %v", s.id, turn, err)
			return
		}
		s.mu.Lock()
		s.turn = turn
		s.sent = append(s.sent, text)
		s.mu.Unlock()
		if err := d.waitIdle(s, turn); err != nil {
			d.fail("session %s turn %d: %v", s.id, turn, err)
			return
		}
	}
}

// send delivers one user.message exactly once.
func (d *driver) send(s *sess, text string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := d.cli.Beta.Sessions.Events.Send(ctx, s.id, anthropic.BetaSessionEventSendParams{
			Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
				Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: text}}},
			}}}})
		cancel()
		if err == nil {
			return nil
		}
		var apiErr *anthropic.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode >= 400 && apiErr.StatusCode < 500 {
			return err // refused: not a fault to ride out
		}
		// Unknown outcome: the message may have been stored before the
		// connection broke. Look before sending again.
		for time.Now().Before(deadline) {
			evs, lerr := d.tryList(s.id)
			if lerr == nil {
				if slices.ContainsFunc(evs, func(e event) bool { return e.Type == "user.message" && e.text() == text }) {
					return nil
				}
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return errors.New("not accepted within 2 minutes")
}

// waitIdle polls the session's events until it has turn idle events,
// recording whether a tool is running.
func (d *driver) waitIdle(s *sess, turn int) error {
	deadline := time.Now().Add(4 * time.Minute)
	for time.Now().Before(deadline) {
		evs, err := d.tryList(s.id)
		if err == nil {
			idle, open := 0, map[string]bool{}
			for _, e := range evs {
				switch e.Type {
				case "session.status_idle":
					idle++
				case "agent.tool_use":
					open[e.ID] = true
				case "agent.tool_result", "user.tool_result":
					delete(open, e.ToolUseID)
				}
			}
			s.mu.Lock()
			s.idle, s.toolOn = idle, len(open) > 0
			s.mu.Unlock()
			if idle >= turn {
				return nil
			}
		}
		time.Sleep(150 * time.Millisecond)
	}
	return fmt.Errorf("not idle after turn %d within 4 minutes", turn)
}

// waitToolsRunning waits until at least n sessions of group have a tool
// running, so the next fault lands in the middle of tool calls.
func (d *driver) waitToolsRunning(group []*sess, n int) {
	poll.Until(d.t, 2*time.Minute, fmt.Sprintf("%d tools running in the group", min(n, len(group))), func() (bool, string) {
		running := 0
		for _, s := range group {
			turn, idle, on := s.state()
			if on && idle < turn {
				running++
			}
		}
		return running >= min(n, len(group)), fmt.Sprintf("%d running", running)
	})
}

// busy returns the turn each session has in flight.
func (d *driver) busy(all []*sess) map[string]int {
	out := map[string]int{}
	for _, s := range all {
		if turn, idle, _ := s.state(); turn > idle {
			out[s.id] = turn
		}
	}
	return out
}

// recovery is how long after f every turn it caught took to end idle.
func (d *driver) recovery(f *fault) time.Duration {
	var worst time.Duration
	for sid, turn := range f.busy {
		evs := d.list(sid)
		n := 0
		for _, e := range evs {
			if e.Type == "session.status_idle" {
				n++
				if n == turn {
					if took := e.ProcessedAt.Sub(f.at); took > worst {
						worst = took
					}
					break
				}
			}
		}
	}
	return worst
}

func (d *driver) tryList(id string) ([]event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []event
	pager := d.cli.Beta.Sessions.Events.ListAutoPaging(ctx, id, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(100)})
	for pager.Next() {
		var e event
		if err := json.Unmarshal([]byte(pager.Current().RawJSON()), &e); err != nil {
			return nil, err
		}
		e.raw = pager.Current().RawJSON()
		out = append(out, e)
	}
	return out, pager.Err()
}

func (d *driver) list(id string) []event {
	d.t.Helper()
	evs, err := d.tryList(id)
	if err != nil {
		d.t.Fatalf("list events of %s: %v", id, err)
	}
	return evs
}

// event is the part of a listed event the checks read.
type event struct {
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	ToolUseID   string    `json:"tool_use_id"`
	ProcessedAt time.Time `json:"processed_at"`
	IsError     bool      `json:"is_error"`
	Content     []struct {
		Text string `json:"text"`
	} `json:"content"`
	raw string
}

func (e event) text() string {
	var b strings.Builder
	for _, c := range e.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// checkSession asserts the session's log survived the faults: each
// accepted message once, each tool use with exactly one result, no event
// twice, each marker written at most once (exactly once unless its result
// is ambiguous). It returns the turns whose result is ambiguous.
func checkSession(t *testing.T, s *sess, evs []event, markers map[string]int) map[int]bool {
	t.Helper()
	ids := map[string]bool{}
	msgs := map[string]int{}
	uses := map[string]int{}
	results := map[string][]event{}
	var useOrder []string
	for _, e := range evs {
		if ids[e.ID] {
			t.Errorf("session %s: event %s listed twice", s.id, e.ID)
		}
		ids[e.ID] = true
		switch e.Type {
		case "user.message":
			msgs[e.text()]++
		case "agent.tool_use":
			uses[e.ID]++
			useOrder = append(useOrder, e.ID)
		case "agent.tool_result":
			results[e.ToolUseID] = append(results[e.ToolUseID], e)
		}
	}
	for _, text := range s.sent {
		if msgs[text] != 1 {
			t.Errorf("session %s: accepted message %q appears %d times, want once", s.id, text, msgs[text])
		}
	}
	if len(msgs) != len(s.sent) {
		t.Errorf("session %s: %d distinct user messages listed, %d accepted", s.id, len(msgs), len(s.sent))
	}
	if len(useOrder) != turnsPerSess {
		t.Errorf("session %s: %d tool uses, want %d (one per turn)", s.id, len(useOrder), turnsPerSess)
	}
	ambiguous := map[int]bool{}
	for i, id := range useOrder {
		rs := results[id]
		if len(rs) != 1 {
			t.Errorf("session %s: tool use %s has %d results, want exactly 1", s.id, id, len(rs))
			continue
		}
		turn := i + 1
		m := markers[marker(s.id, turn)]
		amb := rs[0].IsError && strings.Contains(rs[0].text(), ambiguousText)
		switch {
		case m > 1:
			t.Errorf("session %s turn %d: marker written %d times: the tool ran again", s.id, turn, m)
		case m == 0 && !amb:
			t.Errorf("session %s turn %d: the tool never ran, yet its result is %q", s.id, turn, rs[0].text())
		}
		if amb {
			ambiguous[turn] = true
		}
	}
	return ambiguous
}

// checkReplay asserts that the SSE stream resumed after the first event
// (Last-Event-ID) delivers exactly the rest of the listed log, in order.
func checkReplay(t *testing.T, cli anthropic.Client, id string, evs []event) {
	t.Helper()
	if len(evs) < 2 {
		t.Errorf("session %s: %d events, too few", id, len(evs))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream := cli.Beta.Sessions.Events.StreamEvents(ctx, id, anthropic.BetaSessionEventStreamParams{},
		option.WithHeader("Last-Event-ID", evs[0].ID), option.WithRequestTimeout(0))
	defer func() { _ = stream.Close() }()
	var got []string
	for len(got) < len(evs)-1 && stream.Next() {
		got = append(got, stream.Current().ID)
	}
	want := make([]string, 0, len(evs)-1)
	for _, e := range evs[1:] {
		want = append(want, e.ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("session %s: replay after %s gave %d events %v, want the %d listed %v (stream err %v)",
			id, evs[0].ID, len(got), got, len(want), want, stream.Err())
	}
}

// localMarkers counts the marker lines every local workspace holds.
func localMarkers(t *testing.T, root string) map[string]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "*", "markers.log"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Fields(string(b)) {
			out[line]++
		}
	}
	return out
}

// dockerMarkers reads the marker lines of the run's containers and counts
// the containers.
func dockerMarkers(t *testing.T, runID string) (map[string]int, int) {
	t.Helper()
	out := map[string]int{}
	ids, err := exec.Command("docker", "ps", "-aq", "--filter", "label=mango.faults="+runID).Output()
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	for _, id := range strings.Fields(string(ids)) {
		b, err := exec.Command("docker", "exec", id, "cat", "/workspace/markers.log").Output()
		if err != nil {
			t.Errorf("read markers of container %s: %v", id, err)
			continue
		}
		for _, line := range strings.Fields(string(b)) {
			out[line]++
		}
	}
	return out, len(strings.Fields(string(ids)))
}

func removeContainers(runID string) {
	ids, err := exec.Command("docker", "ps", "-aq", "--filter", "label=mango.faults="+runID).Output()
	if err != nil {
		return
	}
	if f := strings.Fields(string(ids)); len(f) > 0 {
		_ = exec.Command("docker", append([]string{"rm", "-f"}, f...)...).Run()
	}
}

// dockerReady reports whether the docker part can run: a daemon and the
// sandbox image. With MANGO_REQUIRE_SERVICES=1 their absence fails.
func dockerReady(t *testing.T) bool {
	t.Helper()
	if err := exec.Command("docker", "image", "inspect", "mango-sandbox:latest").Run(); err != nil {
		if testenv.Required() {
			t.Fatalf("Docker daemon or image mango-sandbox:latest not available (scripts/build-sandbox-image.sh): %v", err)
		}
		t.Log("no Docker daemon or sandbox image: the docker part is skipped")
		return false
	}
	return true
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
