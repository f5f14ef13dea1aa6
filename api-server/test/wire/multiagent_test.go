package wire

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/db"
)

// teamEnv is a server, a worker whose fake model records every request,
// and a coordinator agent whose roster holds a writer and a reader.
type teamEnv struct {
	*turnEnv
	record string
	writer *anthropic.BetaManagedAgentsAgent
	reader *anthropic.BetaManagedAgentsAgent
	lead   *anthropic.BetaManagedAgentsAgent
}

func newTeamEnv(t *testing.T, readerTools []anthropic.BetaAgentNewParamsToolUnion) *teamEnv {
	t.Helper()
	srv := testserver.Start(t)
	e := &teamEnv{turnEnv: &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}}
	e.record = filepath.Join(t.TempDir(), "requests.jsonl")
	e.worker = startWorkerWith(t, srv, "wire-team", e.root, map[string]string{"MANGO_FAKE_MODEL_RECORD": e.record})
	ctx := context.Background()
	agent := func(name, system string, tools []anthropic.BetaAgentNewParamsToolUnion, ma anthropic.BetaManagedAgentsMultiagentParamsUnion) *anthropic.BetaManagedAgentsAgent {
		a, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: name, System: anthropic.String(system),
			Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: tools, Multiagent: ma})
		if err != nil {
			t.Fatalf("create agent %s: %v", name, err)
		}
		return a
	}
	none := anthropic.BetaManagedAgentsMultiagentParamsUnion{}
	e.writer = agent("writer", "You write files.", toolset, none)
	e.reader = agent("reader", "You read files.", readerTools, none)
	e.lead = agent("lead", "You coordinate a writer and a reader.", toolset, anthropic.BetaManagedAgentsMultiagentParamsUnion{
		OfCoordinator: &anthropic.BetaManagedAgentsMultiagentCoordinatorParams{Agents: []anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion{
			{OfString: anthropic.String(e.writer.ID)},
			{OfBetaManagedAgentsAgent: &anthropic.BetaManagedAgentsAgentParams{ID: e.reader.ID}},
		}}})
	return e
}

// session starts a session of the coordinator.
func (e *teamEnv) session(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("team-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(e.lead.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// toolLine is a fake-model #tool directive calling name with input.
func toolLine(name string, input map[string]any) string {
	b, _ := json.Marshal(input)
	return "#tool " + name + " " + string(b)
}

// threadOf is the session_thread_id of an event ("" for the primary
// thread's).
func threadOf(ev streamed) string {
	var m struct {
		ThreadID string `json:"session_thread_id"`
	}
	_ = json.Unmarshal([]byte(ev.Raw), &m)
	return m.ThreadID
}

// recordedRequests are the requests the worker's fake model answered
// whose system prompt starts with system.
func recordedRequests(t *testing.T, path, system string) [][]json.RawMessage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("read the model's record: %v", err)
	}
	defer func() { _ = f.Close() }()
	var out [][]json.RawMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var req struct {
			System   string            `json:"system"`
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			t.Fatalf("decode a recorded request: %v", err)
		}
		if strings.HasPrefix(req.System, system) {
			out = append(out, req.Messages)
		}
	}
	return out
}

// TestMultiagentCoordinator: a coordinator starts two roster agents with
// different system prompts; both run bash at once in the session's one
// sandbox (the writer waits for the reader's answer to the file it
// wrote); both reply; the coordinator's final message holds both
// replies. A follow-up to the writer's thread reaches a model request
// that holds the writer's earlier turn. Every event decodes through the
// SDK with the session_thread_id of its thread; the threads API lists,
// gets, lists events of and streams (with replay) each thread; the
// threads' usage adds up to the session's.
func TestMultiagentCoordinator(t *testing.T) {
	e := newTeamEnv(t, toolset)
	sid := e.session(t)
	events := e.watch(t, sid)
	write := "echo W1 > /mnt/session/shared.txt && timeout 60 sh -c 'until [ -f /mnt/session/ack.txt ]; do sleep 0.05; done' && cat /mnt/session/ack.txt"
	read := "timeout 60 sh -c 'until [ -f /mnt/session/shared.txt ]; do sleep 0.05; done' && cat /mnt/session/shared.txt && echo R2 > /mnt/session/ack.txt"
	e.say(t, sid, strings.Join([]string{
		toolLine("start_thread", map[string]any{"agent_id": e.writer.ID, "message": toolLine("bash", map[string]any{"command": write})}),
		toolLine("start_thread", map[string]any{"agent_id": e.reader.ID, "message": toolLine("bash", map[string]any{"command": read})}),
		toolLine("wait_for_threads", map[string]any{}),
	}, "\n"))
	got := untilIdle(t, events, sid, 2*time.Minute)

	threads := map[string]string{} // thread id -> agent name
	for _, ev := range got {
		if ev.Type == "session.thread_created" {
			var c anthropic.BetaManagedAgentsSessionThreadCreatedEvent
			if err := json.Unmarshal([]byte(ev.Raw), &c); err != nil {
				t.Fatal(err)
			}
			threads[c.SessionThreadID] = c.AgentName
		}
	}
	if len(threads) != 2 {
		t.Fatalf("threads created %v, want the writer's and the reader's; events %v", threads, typesOf(got))
	}
	writerThread, readerThread := threadNamed(threads, "writer"), threadNamed(threads, "reader")
	checkThreadEvents(t, got, writerThread, readerThread)
	final := lastOfThread(got, "agent.message", "")
	if !strings.Contains(final, "W1") || !strings.Contains(final, "R2") || !strings.Contains(final, writerThread) || !strings.Contains(final, readerThread) {
		t.Fatalf("the coordinator's final message lacks a reply: %q", final)
	}
	checkUsageAdds(t, e, sid)

	// A follow-up: the writer's thread remembers its first turn.
	e.say(t, sid, strings.Join([]string{
		toolLine("send_to_thread", map[string]any{"thread_id": writerThread, "message": "#reply second-turn"}),
		toolLine("wait_for_threads", map[string]any{}),
	}, "\n"))
	got = untilIdle(t, events, sid, time.Minute)
	if final := lastOfThread(got, "agent.message", ""); !strings.Contains(final, "second-turn") {
		t.Fatalf("the follow-up's reply is missing from %q", final)
	}
	reqs := recordedRequests(t, e.record, "You write files.")
	if len(reqs) < 3 {
		t.Fatalf("the writer made %d model requests, want at least 3 (two turns)", len(reqs))
	}
	lastReq := string(mustJSON(reqs[len(reqs)-1]))
	if !strings.Contains(lastReq, "second-turn") || !strings.Contains(lastReq, "shared.txt") || !strings.Contains(lastReq, "R2") {
		t.Fatalf("the writer's follow-up request lacks its earlier turn: %s", lastReq)
	}
	checkThreadsAPI(t, e, sid, writerThread, readerThread)
}

func threadNamed(threads map[string]string, name string) string {
	for id, n := range threads {
		if n == name {
			return id
		}
	}
	return ""
}

// untilIdle collects the session stream's events until the session is
// idle (a session.status_idle of the session itself).
func untilIdle(t *testing.T, events <-chan streamed, sid string, timeout time.Duration) []streamed {
	t.Helper()
	var got []streamed
	for {
		batch := until(t, events, "session.status_idle", timeout)
		got = append(got, batch...)
		if threadOf(batch[len(batch)-1]) == "" {
			return got
		}
	}
}

// lastOfThread is the text of the last event of type typ of a thread
// ("" the primary).
func lastOfThread(evs []streamed, typ, thread string) string {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == typ && threadOf(evs[i]) == thread {
			var m map[string]any
			_ = json.Unmarshal([]byte(evs[i].Raw), &m)
			return resultText(m)
		}
	}
	return ""
}

// checkThreadEvents checks the session stream's multi-agent events: each
// child thread's events carry its id and include its bash call and its
// reply; the primary thread sent and received one message per thread.
func checkThreadEvents(t *testing.T, got []streamed, threads ...string) {
	t.Helper()
	for _, th := range threads {
		var types []string
		for _, ev := range got {
			if threadOf(ev) == th {
				types = append(types, ev.Type)
			}
		}
		inOrder(t, streamedOf(types), "session.thread_created", "agent.thread_message_received", "session.thread_status_running",
			"agent.tool_use", "agent.tool_result", "agent.message", "agent.thread_message_sent", "session.thread_status_idle")
	}
	var sent, received int
	for _, ev := range got {
		if threadOf(ev) != "" {
			continue
		}
		switch ev.Type {
		case "agent.thread_message_sent":
			var m anthropic.BetaManagedAgentsAgentThreadMessageSentEvent
			_ = json.Unmarshal([]byte(ev.Raw), &m)
			if m.ToSessionThreadID != threads[0] && m.ToSessionThreadID != threads[1] {
				t.Errorf("agent.thread_message_sent to %q, not a thread of the session", m.ToSessionThreadID)
			}
			sent++
		case "agent.thread_message_received":
			var m anthropic.BetaManagedAgentsAgentThreadMessageReceivedEvent
			_ = json.Unmarshal([]byte(ev.Raw), &m)
			if m.FromSessionThreadID != threads[0] && m.FromSessionThreadID != threads[1] {
				t.Errorf("agent.thread_message_received from %q, not a thread of the session", m.FromSessionThreadID)
			}
			received++
		}
	}
	if sent != 2 || received != 2 {
		t.Errorf("the primary thread sent %d and received %d thread messages, want 2 and 2", sent, received)
	}
}

func streamedOf(types []string) []streamed {
	out := make([]streamed, len(types))
	for i, typ := range types {
		out[i] = streamed{Type: typ}
	}
	return out
}

// checkUsageAdds checks that the threads' usage adds up to the session's.
func checkUsageAdds(t *testing.T, e *teamEnv, sid string) {
	t.Helper()
	ctx := context.Background()
	sess, err := e.client.Beta.Sessions.Get(ctx, sid, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	page, err := e.client.Beta.Sessions.Threads.List(ctx, sid, anthropic.BetaSessionThreadListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var in, out int64
	for _, th := range page.Data {
		if th.Usage.InputTokens <= 0 {
			t.Errorf("thread %s reports no input tokens", th.ID)
		}
		in += th.Usage.InputTokens
		out += th.Usage.OutputTokens
	}
	if in != sess.Usage.InputTokens || out != sess.Usage.OutputTokens {
		t.Errorf("threads' usage %d in / %d out, session's %d / %d", in, out, sess.Usage.InputTokens, sess.Usage.OutputTokens)
	}
}

// checkThreadsAPI checks list, get, events and stream with replay of the
// session's threads.
func checkThreadsAPI(t *testing.T, e *teamEnv, sid, writer, reader string) {
	t.Helper()
	ctx := context.Background()
	page, err := e.client.Beta.Sessions.Threads.List(ctx, sid, anthropic.BetaSessionThreadListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 3 || page.Data[0].ParentThreadID != "" || page.Data[1].ParentThreadID != page.Data[0].ID {
		t.Fatalf("threads %s, want the primary thread then its two children", page.RawJSON())
	}
	for _, th := range page.Data {
		if th.Status != anthropic.BetaManagedAgentsSessionThreadStatusIdle || th.SessionID != sid {
			t.Errorf("thread %s: status %s, session %s; want idle, %s", th.ID, th.Status, th.SessionID, sid)
		}
	}
	got, err := e.client.Beta.Sessions.Threads.Get(ctx, writer, anthropic.BetaSessionThreadGetParams{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Agent.AsAgent(); a.ID != e.writer.ID || a.System != "You write files." {
		t.Errorf("writer thread's agent %s, want the writer's snapshot", got.Agent.RawJSON())
	}
	evs, err := e.client.Beta.Sessions.Threads.Events.List(ctx, reader, anthropic.BetaSessionThreadEventListParams{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Data) == 0 {
		t.Fatal("the reader thread lists no events")
	}
	for _, ev := range evs.Data {
		if ev.AsAny() == nil || threadOf(streamed{Raw: ev.RawJSON()}) != reader {
			t.Errorf("reader thread event does not decode or lacks its thread id: %s", ev.RawJSON())
		}
	}
	// Replay: from the thread's first event, the stream sends the rest.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream := e.client.Beta.Sessions.Threads.Events.StreamEvents(sctx, reader, anthropic.BetaSessionThreadEventStreamParams{SessionID: sid},
		option.WithHeader("Last-Event-ID", evs.Data[0].ID))
	defer func() { _ = stream.Close() }()
	n := 0
	for stream.Next() {
		ev := stream.Current()
		if ev.AsAny() == nil {
			t.Errorf("thread stream event does not decode: %s", ev.RawJSON())
		}
		n++
		if n == len(evs.Data)-1 {
			break
		}
	}
	if n != len(evs.Data)-1 {
		t.Fatalf("the thread stream replayed %d events after the first, want %d (err %v)", n, len(evs.Data)-1, stream.Err())
	}
}

// TestMultiagentInterrupt: an interrupt while both threads run their
// tools stops every thread and leaves the session and its threads idle;
// the interrupted threads owe the coordinator no reply (no turn of the
// coordinator follows), and the session takes the next message.
func TestMultiagentInterrupt(t *testing.T) {
	e := newTeamEnv(t, toolset)
	sid := e.session(t)
	events := e.watch(t, sid)
	long := toolLine("bash", map[string]any{"command": "sleep 120"})
	e.say(t, sid, strings.Join([]string{
		toolLine("start_thread", map[string]any{"agent_id": e.writer.ID, "message": long}),
		toolLine("start_thread", map[string]any{"agent_id": e.reader.ID, "message": long}),
		toolLine("wait_for_threads", map[string]any{}),
	}, "\n"))
	// Both threads have announced their bash call.
	var got []streamed
	uses := map[string]bool{}
	for len(uses) < 2 {
		batch := until(t, events, "agent.tool_use", time.Minute)
		got = append(got, batch...)
		if th := threadOf(batch[len(batch)-1]); th != "" {
			uses[th] = true
		}
	}
	e.sendRaw(t, sid, map[string]any{"type": "user.interrupt"})
	got = append(got, untilIdle(t, events, sid, time.Minute)...)
	idle := map[string]bool{}
	for _, ev := range got {
		if ev.Type == "session.thread_status_idle" {
			idle[threadOf(ev)] = true
		}
	}
	for th := range uses {
		if !idle[th] {
			t.Errorf("thread %s did not go idle; events %v", th, typesOf(got))
		}
	}
	ctx := context.Background()
	page, err := e.client.Beta.Sessions.Threads.List(ctx, sid, anthropic.BetaSessionThreadListParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range page.Data {
		if th.Status != anthropic.BetaManagedAgentsSessionThreadStatusIdle {
			t.Errorf("thread %s is %s after the interrupt, want idle", th.ID, th.Status)
		}
	}
	// The next message runs the coordinator once, on that message alone.
	e.say(t, sid, "#reply after the interrupt")
	next := untilIdle(t, events, sid, time.Minute)
	if text := lastOfThread(next, "agent.message", ""); text != "after the interrupt" {
		t.Fatalf("the turn after the interrupt answered %q; events %v", text, typesOf(next))
	}
	if n := count(next, "agent.thread_message_received"); n != 0 {
		t.Fatalf("an interrupted thread replied after the interrupt (%d replies)", n)
	}
	// Deleting the session deletes its threads.
	if _, err := e.client.Beta.Sessions.Delete(ctx, sid, anthropic.BetaSessionDeleteParams{}); err != nil {
		t.Fatal(err)
	}
	for th := range uses {
		waitSessionGone(t, e.srv, th, "its session was deleted")
	}
	waitSessionGone(t, e.srv, sid, "deleted")
}

// TestMultiagentClientActions: a child thread's custom tool call and its
// always_ask bash call reach the client on the session stream with the
// thread's id; the client answers through the session (the answer goes
// to the thread of the tool use), and the coordinator gets the thread's
// reply.
func TestMultiagentClientActions(t *testing.T) {
	approve := anthropic.BetaAgentNewParamsToolUnion{OfCustom: &anthropic.BetaManagedAgentsCustomToolParams{Name: "approve",
		Description: "Ask the user to approve.", InputSchema: anthropic.BetaManagedAgentsCustomToolInputSchemaParam{Type: "object"}}}
	ask := anthropic.BetaAgentNewParamsToolUnion{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{
		DefaultConfig: anthropic.BetaManagedAgentsAgentToolsetDefaultConfigParams{PermissionPolicy: anthropic.BetaManagedAgentsAgentToolsetDefaultConfigParamsPermissionPolicyUnion{
			OfAlwaysAsk: &anthropic.BetaManagedAgentsAlwaysAskPolicyParam{}}}}}
	e := newTeamEnv(t, []anthropic.BetaAgentNewParamsToolUnion{ask, approve})
	sid := e.session(t)
	events := e.watch(t, sid)
	task := toolLine("approve", map[string]any{"what": "deploy"}) + "\n" + toolLine("bash", map[string]any{"command": "echo confirmed-run"})
	e.say(t, sid, toolLine("start_thread", map[string]any{"agent_id": e.reader.ID, "message": task})+"\n"+
		toolLine("wait_for_threads", map[string]any{}))

	got := until(t, events, "session.thread_status_idle", time.Minute)
	use := lastEvent(got, "agent.custom_tool_use")
	if use.ID == "" || threadOf(use) == "" {
		t.Fatalf("no agent.custom_tool_use of the thread on the session stream; events %v", typesOf(got))
	}
	if typ, ids := stopReason(last(got, "session.thread_status_idle")); typ != "requires_action" || len(ids) != 1 || ids[0] != use.ID {
		t.Fatalf("the thread's idle stop reason %s %v, want requires_action naming %s", typ, ids, use.ID)
	}
	e.sendRaw(t, sid, map[string]any{"type": "user.custom_tool_result", "custom_tool_use_id": use.ID,
		"content": []map[string]string{{"type": "text", "text": "approved"}}})

	got = until(t, events, "session.thread_status_idle", time.Minute)
	bash := lastEvent(got, "agent.tool_use")
	if bash.ID == "" || threadOf(bash) != threadOf(use) {
		t.Fatalf("no always_ask agent.tool_use of the thread; events %v", typesOf(got))
	}
	e.sendRaw(t, sid, map[string]any{"type": "user.tool_confirmation", "tool_use_id": bash.ID, "result": "allow",
		"session_thread_id": threadOf(bash)})
	got = untilIdle(t, events, sid, time.Minute)
	final := lastOfThread(got, "agent.message", "")
	if !strings.Contains(final, "confirmed-run") {
		t.Fatalf("the coordinator's final message %q lacks the thread's confirmed bash output", final)
	}
}

// lastEvent is the last event of type typ.
func lastEvent(evs []streamed, typ string) streamed {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == typ {
			return evs[i]
		}
	}
	return streamed{}
}

// TestMultiagentThreadSkills: a roster agent's own skill is placed in the
// session's sandbox for its thread, and its thread's system prompt lists
// it; the coordinator's does not.
func TestMultiagentThreadSkills(t *testing.T) {
	e := newTeamEnv(t, toolset)
	sk, err := e.client.Beta.Skills.New(context.Background(), anthropic.BetaSkillNewParams{
		Files: skillFiles("csv-tools/SKILL.md", skillMD, "csv-tools/scripts/count.sh", countScript)})
	if err != nil {
		t.Fatalf("create skill: %v", err)
	}
	ctx := context.Background()
	reader, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "skilled", System: anthropic.String("You use skills."),
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: toolset,
		Skills: []anthropic.BetaManagedAgentsSkillParamsUnion{{OfCustom: &anthropic.BetaManagedAgentsCustomSkillParams{SkillID: sk.ID}}}})
	if err != nil {
		t.Fatal(err)
	}
	lead, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "lead2", System: anthropic.String("You lead."),
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: toolset,
		Multiagent: anthropic.BetaManagedAgentsMultiagentParamsUnion{OfCoordinator: &anthropic.BetaManagedAgentsMultiagentCoordinatorParams{
			Agents: []anthropic.BetaManagedAgentsMultiagentRosterEntryParamsUnion{{OfString: anthropic.String(reader.ID)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	e.lead = lead
	sid := e.session(t)
	events := e.watch(t, sid)
	e.say(t, sid, toolLine("start_thread", map[string]any{"agent_id": reader.ID,
		"message": toolLine("bash", map[string]any{"command": "sh /mnt/session/skills/csv-tools/scripts/count.sh /mnt/session/skills/csv-tools/SKILL.md"})})+
		"\n"+toolLine("wait_for_threads", map[string]any{}))
	got := untilIdle(t, events, sid, time.Minute)
	if final := lastOfThread(got, "agent.message", ""); !strings.Contains(final, "Tool bash returned: ") || strings.Contains(final, "returned an error") {
		t.Fatalf("the thread could not run its skill's script: %q", final)
	}
	if reqs := recordedRequests(t, e.record, "You use skills."); len(reqs) == 0 {
		t.Fatal("no request of the skilled thread recorded")
	}
	var sys []string
	f, _ := os.ReadFile(e.record)
	for _, line := range strings.Split(string(f), "\n") {
		var r struct {
			System string `json:"system"`
		}
		if json.Unmarshal([]byte(line), &r) == nil {
			sys = append(sys, r.System)
		}
	}
	var threadSees, leadSees bool
	for _, s := range sys {
		threadSees = threadSees || (strings.HasPrefix(s, "You use skills.") && strings.Contains(s, "csv-tools"))
		leadSees = leadSees || (strings.HasPrefix(s, "You lead.") && strings.Contains(s, "csv-tools"))
	}
	if !threadSees || leadSees {
		t.Fatalf("the skill in the thread's system prompt: %v, in the coordinator's: %v; want true, false", threadSees, leadSees)
	}
}

// TestMultiagentReplyStartsTurn: a coordinator that ends its turn without
// waiting gets the thread's reply as the message of its next turn,
// introduced by the thread's id and agent; the session ends idle after it.
func TestMultiagentReplyStartsTurn(t *testing.T) {
	e := newTeamEnv(t, toolset)
	sid := e.session(t)
	events := e.watch(t, sid)
	e.say(t, sid, toolLine("start_thread", map[string]any{"agent_id": e.writer.ID, "message": "#reply done-later"}))
	var got []streamed
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(lastOfThread(got, "agent.message", ""), "done-later") {
		if time.Now().After(deadline) {
			t.Fatalf("no coordinator turn on the thread's reply; events %v", typesOf(got))
		}
		got = append(got, untilIdle(t, events, sid, time.Minute)...)
	}
	final := lastOfThread(got, "agent.message", "")
	if !strings.Contains(final, "Reply from thread sthr_") || !strings.Contains(final, "(agent writer)") {
		t.Fatalf("the coordinator's turn on the reply saw %q, want the reply introduced by its thread", final)
	}
	sess, err := e.client.Beta.Sessions.Get(context.Background(), sid, anthropic.BetaSessionGetParams{})
	if err != nil || sess.Status != anthropic.BetaManagedAgentsSessionStatusIdle {
		t.Fatalf("session after the reply's turn: %v, %v; want idle", sess.Status, err)
	}
}

// TestMultiagentThreadStatuses: a thread's retryable model error shows as
// session.thread_status_rescheduled, then it runs again and replies;
// archiving it terminates it (session.thread_status_terminated) and it
// takes no more messages; the primary thread cannot be archived alone.
func TestMultiagentThreadStatuses(t *testing.T) {
	e := newTeamEnv(t, toolset)
	sid := e.session(t)
	events := e.watch(t, sid)
	e.say(t, sid, toolLine("start_thread", map[string]any{"agent_id": e.writer.ID, "message": "#error overloaded 1\n#reply recovered"})+
		"\n"+toolLine("wait_for_threads", map[string]any{}))
	got := untilIdle(t, events, sid, 2*time.Minute)
	th := threadOf(lastEvent(got, "session.thread_created"))
	var types []string
	for _, ev := range got {
		if threadOf(ev) == th {
			types = append(types, ev.Type)
		}
	}
	inOrder(t, streamedOf(types), "session.thread_status_running", "session.error", "session.thread_status_rescheduled",
		"session.thread_status_running", "agent.message", "session.thread_status_idle")
	if final := lastOfThread(got, "agent.message", ""); !strings.Contains(final, "recovered") {
		t.Fatalf("the coordinator's final message %q lacks the thread's reply after its retry", final)
	}
	ctx := context.Background()
	_, err := e.client.Beta.Sessions.Threads.Archive(ctx, db.PrimaryThreadID(sid), anthropic.BetaSessionThreadArchiveParams{SessionID: sid})
	wantAPIError(t, err, 400)
	archived, err := e.client.Beta.Sessions.Threads.Archive(ctx, th, anthropic.BetaSessionThreadArchiveParams{SessionID: sid})
	if err != nil || archived.Status != anthropic.BetaManagedAgentsSessionThreadStatusTerminated || archived.ArchivedAt.IsZero() {
		t.Fatalf("archived thread %+v, %v; want terminated and archived", archived, err)
	}
	until(t, events, "session.thread_status_terminated", 30*time.Second)
	e.say(t, sid, toolLine("send_to_thread", map[string]any{"thread_id": th, "message": "#reply again"}))
	got = untilIdle(t, events, sid, time.Minute)
	if res := lastEvent(got, "agent.tool_result"); !strings.Contains(res.Raw, `"is_error":true`) || !strings.Contains(res.Raw, "archived") {
		t.Fatalf("a message to the archived thread answered %s, want an error naming it archived", res.Raw)
	}
}

// TestMultiagentInterruptOneThread: an interrupt naming a thread stops
// that thread alone; the coordinator's wait no longer waits for it, and
// ends with the other thread's reply.
func TestMultiagentInterruptOneThread(t *testing.T) {
	e := newTeamEnv(t, toolset)
	sid := e.session(t)
	events := e.watch(t, sid)
	e.say(t, sid, strings.Join([]string{
		toolLine("start_thread", map[string]any{"agent_id": e.writer.ID, "message": toolLine("bash", map[string]any{"command": "sleep 120"})}),
		toolLine("start_thread", map[string]any{"agent_id": e.reader.ID, "message": toolLine("bash", map[string]any{
			"command": "timeout 60 sh -c 'until [ -f /mnt/session/go ]; do sleep 0.05; done' && echo R-DONE"})}),
		toolLine("wait_for_threads", map[string]any{}),
	}, "\n"))
	var got []streamed
	threads := map[string]bool{}
	for len(threads) < 2 {
		batch := until(t, events, "agent.tool_use", time.Minute)
		got = append(got, batch...)
		if th := threadOf(batch[len(batch)-1]); th != "" {
			threads[th] = true
		}
	}
	writer := ""
	for _, ev := range got {
		if ev.Type == "session.thread_created" && strings.Contains(ev.Raw, `"agent_name":"writer"`) {
			writer = threadOf(ev)
		}
	}
	e.sendRaw(t, sid, map[string]any{"type": "user.interrupt", "session_thread_id": writer})
	idle := until(t, events, "session.thread_status_idle", 30*time.Second)
	if th := threadOf(idle[len(idle)-1]); th != writer {
		t.Fatalf("thread %s went idle first, want the interrupted writer %s", th, writer)
	}
	// The reader goes on: let it finish.
	if err := os.WriteFile(filepath.Join(e.root, sandboxDir(t, e.root), "mnt", "session", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got = untilIdle(t, events, sid, time.Minute)
	final := lastOfThread(got, "agent.message", "")
	if !strings.Contains(final, "R-DONE") || strings.Contains(final, "(agent writer)") {
		t.Fatalf("the coordinator's final message %q, want the reader's reply alone", final)
	}
}

// TestMultiagentTurnCost measures, opt-in, the latency of a coordinator
// turn that has two threads each run one bash round and waits for both,
// beside a single-agent turn of one bash round, on the local sandbox:
// MANGO_MULTIAGENT_COST=<turns>.
func TestMultiagentTurnCost(t *testing.T) {
	n := 0
	if _, err := fmt.Sscan(os.Getenv("MANGO_MULTIAGENT_COST"), &n); err != nil || n <= 0 {
		t.Skip("set MANGO_MULTIAGENT_COST=<turns> to measure")
	}
	e := newTeamEnv(t, toolset)
	measure := func(what, sid string, message func(i int) string) {
		events := e.watch(t, sid)
		var ds []time.Duration
		for i := range n + 1 {
			start := time.Now()
			e.say(t, sid, message(i))
			untilIdle(t, events, sid, time.Minute)
			if i > 0 { // the first turn starts the sandbox (and the threads)
				ds = append(ds, time.Since(start))
			}
		}
		slices.Sort(ds)
		t.Logf("%s: %d turns, p50 %v, p90 %v, max %v", what, n, ds[len(ds)/2], ds[len(ds)*9/10], ds[len(ds)-1])
	}
	ctx := context.Background()
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("cost-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(e.writer.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	measure("single agent, one bash round", plain.ID, func(i int) string {
		return toolLine("bash", map[string]any{"command": fmt.Sprintf("echo %d", i)})
	})
	sid := e.session(t)
	var threads []string
	measure("coordinator, two threads of one bash round each, waited for", sid, func(i int) string {
		bash := toolLine("bash", map[string]any{"command": fmt.Sprintf("echo %d", i)})
		if i == 0 {
			return toolLine("start_thread", map[string]any{"agent_id": e.writer.ID, "message": bash}) + "\n" +
				toolLine("start_thread", map[string]any{"agent_id": e.reader.ID, "message": bash}) + "\n" + toolLine("wait_for_threads", map[string]any{})
		}
		if threads == nil {
			page, err := e.client.Beta.Sessions.Threads.List(ctx, sid, anthropic.BetaSessionThreadListParams{})
			if err != nil || len(page.Data) != 3 {
				t.Fatalf("threads: %v", err)
			}
			threads = []string{page.Data[1].ID, page.Data[2].ID}
		}
		return "#parallel\n" + toolLine("send_to_thread", map[string]any{"thread_id": threads[0], "message": bash}) + "\n" +
			toolLine("send_to_thread", map[string]any{"thread_id": threads[1], "message": bash}) + "\n#tool wait_for_threads {}"
	})
}
