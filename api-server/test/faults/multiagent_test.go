package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/internal/poll"
)

// TestMultiagentFaults kills the execution worker, then the api-server,
// each while the child threads of a group of multi-agent sessions run their
// bash calls and the coordinators wait for them. Every session must end
// idle with each event once, each tool use (the coordinator's and the
// thread's) answered exactly once, one thread, one reply reaching the
// coordinator, and each command run at most once (exactly once unless its
// result says it may not have run).
func TestMultiagentFaults(t *testing.T) {
	if os.Getenv("MANGO_FAULTS") != "1" {
		t.Skip("the fault-injection suite runs with MANGO_FAULTS=1 (make test-faults)")
	}
	sys := startSystem(t, false)
	ctx := context.Background()
	toolset := []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}}
	writer, err := sys.cli.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "writer", System: anthropic.String("You write markers."),
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: toolset})
	if err != nil {
		t.Fatal(err)
	}
	lead, err := sys.cli.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "lead",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: toolset,
		Multiagent: anthropic.BetaManagedAgentsMultiagentParamsUnion{OfCoordinator: &anthropic.BetaManagedAgentsMultiagentCoordinatorParams{
			Agents: []anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion{{OfString: anthropic.String(writer.ID)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	all := newFaultSessions(t, ctx, sys.cli, lead.ID, 2*groupSize, false)
	d := &driver{t: t, cli: sys.cli}
	inject := func(name string, group []*sess, do func()) {
		startThreads(t, d, group, writer.ID)
		do()
		t.Logf("fault %-40s injected", name)
	}
	inject("SIGKILL worker mid-thread, restart after 2s", all[:groupSize], func() {
		sys.local.kill(t)
		time.Sleep(2 * time.Second)
		sys.startWorker(sys.local)
	})
	inject("SIGKILL api-server mid-thread, restart", all[groupSize:], func() {
		sys.api.kill(t)
		sys.startAPI()
	})
	for _, s := range all {
		if err := d.waitIdle(s, 1); err != nil {
			t.Fatalf("session %s: %v", s.id, err)
		}
	}
	markers := localMarkers(t, sys.sandboxes)
	for _, s := range all {
		evs := d.list(s.id)
		checkMultiagentSession(t, s, evs, markers)
		checkReplay(t, sys.cli, s.id, evs)
	}
}

// startThreads has each session of group start a thread of agent writer
// whose bash call writes the session's marker, and wait for it; it
// returns once every thread's call runs.
func startThreads(t *testing.T, d *driver, group []*sess, writer string) {
	t.Helper()
	for _, s := range group {
		bash, _ := json.Marshal(map[string]any{"command": fmt.Sprintf("echo %s >> markers.log; sleep 2", marker(s.id, 1))})
		start, _ := json.Marshal(map[string]any{"agent_id": writer, "message": "#tool bash " + string(bash)})
		text := "#tool start_thread " + string(start) + "\n#tool wait_for_threads {}"
		if err := d.send(s, text); err != nil {
			t.Fatalf("session %s: send: %v", s.id, err)
		}
		s.sent = append(s.sent, text)
	}
	poll.Until(t, 2*time.Minute, "every session's thread running its bash call", func() (bool, string) {
		n := 0
		for _, s := range group {
			if threadToolRunning(d.list(s.id)) {
				n++
			}
		}
		return n == len(group), fmt.Sprintf("%d of %d", n, len(group))
	})
}

// threadToolRunning reports whether a child thread's tool use is listed
// without its result.
func threadToolRunning(evs []event) bool {
	open := map[string]bool{}
	for _, e := range evs {
		switch {
		case e.Type == "agent.tool_use" && strings.Contains(e.raw, `"session_thread_id"`):
			open[e.ID] = true
		case e.Type == "agent.tool_result":
			delete(open, e.ToolUseID)
		}
	}
	return len(open) > 0
}

// checkMultiagentSession: the message once, no event twice, each tool use
// answered once, one thread with one reply to the coordinator, whose last
// message holds it, and the thread's command run at most once.
func checkMultiagentSession(t *testing.T, s *sess, evs []event, markers map[string]int) {
	t.Helper()
	ids, results := map[string]bool{}, map[string]int{}
	var uses []event
	var msgs, created, replies int
	final := ""
	for _, e := range evs {
		if ids[e.ID] {
			t.Errorf("session %s: event %s listed twice", s.id, e.ID)
		}
		ids[e.ID] = true
		switch e.Type {
		case "user.message":
			msgs++
		case "agent.tool_use":
			uses = append(uses, e)
		case "agent.tool_result":
			results[e.ToolUseID]++
		case "session.thread_created":
			created++
		case "agent.thread_message_received":
			if !strings.Contains(e.raw, `"session_thread_id"`) {
				replies++
			}
		case "agent.message":
			if !strings.Contains(e.raw, `"session_thread_id"`) {
				final = e.text()
			}
		}
	}
	if msgs != 1 || created != 1 || replies != 1 {
		t.Errorf("session %s: %d messages, %d threads, %d replies to the coordinator; want 1 each", s.id, msgs, created, replies)
	}
	if len(uses) != 3 {
		t.Errorf("session %s: %d tool uses, want 3 (start_thread, the thread's bash, wait_for_threads)", s.id, len(uses))
	}
	var bash *event
	for i, u := range uses {
		if results[u.ID] != 1 {
			t.Errorf("session %s: tool use %s has %d results, want exactly 1", s.id, u.ID, results[u.ID])
		}
		if strings.Contains(u.raw, `"session_thread_id"`) {
			bash = &uses[i]
		}
	}
	if !strings.Contains(final, "Reply from thread") {
		t.Errorf("session %s: the coordinator's last message %q holds no reply", s.id, final)
	}
	if bash == nil {
		return
	}
	var result event
	for _, e := range evs {
		if e.Type == "agent.tool_result" && e.ToolUseID == bash.ID {
			result = e
		}
	}
	m := markers[marker(s.id, 1)]
	amb := result.IsError && strings.Contains(result.text(), ambiguousText)
	switch {
	case m > 1:
		t.Errorf("session %s: the thread's command ran %d times", s.id, m)
	case m == 0 && !amb:
		t.Errorf("session %s: the thread's command never ran, yet its result is %q", s.id, result.text())
	}
	if amb {
		t.Logf("session %s: the thread's command result is ambiguous (the worker died during it)", s.id)
	}
}
