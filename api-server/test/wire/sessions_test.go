package wire

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/api-server/internal/testserver"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// fixture creates an agent and an environment to hang sessions on.
func fixture(t *testing.T, client anthropic.Client) (agent *anthropic.BetaManagedAgentsAgent, envID string) {
	t.Helper()
	ctx := context.Background()
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "helper", System: anthropic.String("be brief"),
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-5"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}},
	})
	if err != nil {
		t.Fatalf("create agent: %v", err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("env-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatalf("create environment: %v", err)
	}
	return agent, env.ID
}

func userMessage(text string) anthropic.BetaManagedAgentsEventParamsUnion {
	return anthropic.BetaManagedAgentsEventParamsUnion{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
		Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: text}}},
	}}
}

func TestSessionLifecycle(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	agent, envID := fixture(t, client)

	s1, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)},
		EnvironmentID: envID,
		Title:         anthropic.String("first"),
		Metadata:      map[string]string{"k": "v"},
	})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	if s1.Type != "session" || s1.Status != "idle" || s1.EnvironmentID != envID || s1.Title != "first" {
		t.Fatalf("session = type %q status %q env %q title %q", s1.Type, s1.Status, s1.EnvironmentID, s1.Title)
	}
	if s1.Agent.ID != agent.ID || s1.Agent.Version != 1 || s1.Agent.System != "be brief" || len(s1.Agent.Tools) != 1 {
		t.Errorf("agent snapshot = %+v", s1.Agent)
	}
	if !s1.JSON.Usage.Valid() || !s1.JSON.Stats.Valid() {
		t.Errorf("usage/stats missing: %s", s1.RawJSON())
	}

	pinned, overridden := sessionSnapshots(t, client, agent, envID, s1)

	updated, err := client.Beta.Sessions.Update(ctx, s1.ID, anthropic.BetaSessionUpdateParams{
		Title:    anthropic.String("renamed"),
		Metadata: map[string]string{"n": "1"},
		Agent:    anthropic.BetaManagedAgentsSessionAgentUpdateParam{Tools: []anthropic.BetaManagedAgentsSessionAgentUpdateToolUnionParam{}},
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if updated.Title != "renamed" || updated.Metadata["k"] != "v" || updated.Metadata["n"] != "1" || len(updated.Agent.Tools) != 0 {
		t.Errorf("updated = title %q metadata %v tools %d", updated.Title, updated.Metadata, len(updated.Agent.Tools))
	}

	sessionListFilters(t, client, agent, s1, overridden)
	sessionPaging(t, client, s1)
	sessionArchiveIsReadOnly(t, srv, client, pinned)
	deleted, err := client.Beta.Sessions.Delete(ctx, s1.ID, anthropic.BetaSessionDeleteParams{})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if deleted.ID != s1.ID || deleted.Type != "session_deleted" {
		t.Errorf("delete = %+v", deleted)
	}
	_, err = client.Beta.Sessions.Get(ctx, s1.ID, anthropic.BetaSessionGetParams{})
	wantAPIError(t, err, http.StatusNotFound)
	_, err = client.Beta.Sessions.Events.Send(ctx, s1.ID, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{userMessage("hi")}})
	wantAPIError(t, err, http.StatusNotFound)
}

// sessionSnapshots: updating the agent does not touch a session's
// snapshot; a session can pin a version or override the agent.
func sessionSnapshots(t *testing.T, client anthropic.Client, agent *anthropic.BetaManagedAgentsAgent, envID string, s1 *anthropic.BetaManagedAgentsSession) (pinned, overridden *anthropic.BetaManagedAgentsSession) {
	t.Helper()
	ctx := context.Background()
	if _, err := client.Beta.Agents.Update(ctx, agent.ID, anthropic.BetaAgentUpdateParams{System: anthropic.String("v2 prompt")}); err != nil {
		t.Fatalf("update agent: %v", err)
	}
	pinned, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfBetaManagedAgentsAgent: &anthropic.BetaManagedAgentsAgentParams{ID: agent.ID, Version: anthropic.Int(1)}},
		EnvironmentID: envID,
	})
	if err != nil {
		t.Fatalf("create pinned session: %v", err)
	}
	if pinned.Agent.Version != 1 || pinned.Agent.System != "be brief" {
		t.Errorf("pinned snapshot = v%d %q, want v1 be brief", pinned.Agent.Version, pinned.Agent.System)
	}
	overridden, err = client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfBetaManagedAgentsAgentWithOverrides: &anthropic.BetaManagedAgentsAgentWithOverridesParams{
			ID: agent.ID, System: anthropic.String("override"),
			Tools: []anthropic.BetaManagedAgentsAgentWithOverridesParamsToolUnion{},
		}},
		EnvironmentID: envID,
	})
	if err != nil {
		t.Fatalf("create overridden session: %v", err)
	}
	if overridden.Agent.Version != 2 || overridden.Agent.System != "override" {
		t.Errorf("overridden snapshot = v%d %q, want v2 override", overridden.Agent.Version, overridden.Agent.System)
	}
	got, err := client.Beta.Sessions.Get(ctx, s1.ID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.Agent.System != "be brief" {
		t.Errorf("snapshot changed after agent update: %q", got.Agent.System)
	}
	return pinned, overridden
}

// listSessionIDs lists sessions with p and returns their ids in order.
func listSessionIDs(t *testing.T, client anthropic.Client, p anthropic.BetaSessionListParams) []string {
	t.Helper()
	page, err := client.Beta.Sessions.List(context.Background(), p)
	if err != nil {
		t.Fatalf("list %+v: %v", p, err)
	}
	var out []string
	for _, s := range page.Data {
		out = append(out, s.ID)
	}
	return out
}

// sessionListFilters checks the list filters over the three sessions.
func sessionListFilters(t *testing.T, client anthropic.Client, agent *anthropic.BetaManagedAgentsAgent, s1, overridden *anthropic.BetaManagedAgentsSession) {
	t.Helper()
	list := func(p anthropic.BetaSessionListParams) []string {
		t.Helper()
		return listSessionIDs(t, client, p)
	}
	if ids := list(anthropic.BetaSessionListParams{}); len(ids) != 3 || ids[0] != overridden.ID {
		t.Errorf("list = %v, want 3 newest first", ids)
	}
	if ids := list(anthropic.BetaSessionListParams{Order: "asc"}); len(ids) != 3 || ids[0] != s1.ID {
		t.Errorf("asc list = %v, want oldest first", ids)
	}
	if ids := list(anthropic.BetaSessionListParams{AgentID: anthropic.String(agent.ID), AgentVersion: anthropic.Int(2)}); len(ids) != 1 || ids[0] != overridden.ID {
		t.Errorf("agent_version=2 list = %v", ids)
	}
	if ids := list(anthropic.BetaSessionListParams{AgentID: anthropic.String("agent_nope")}); len(ids) != 0 {
		t.Errorf("unknown agent list = %v", ids)
	}
	if ids := list(anthropic.BetaSessionListParams{Statuses: []string{"running"}}); len(ids) != 0 {
		t.Errorf("running list = %v, want none", ids)
	}
	if ids := list(anthropic.BetaSessionListParams{Statuses: []string{"idle", "running"}}); len(ids) != 3 {
		t.Errorf("idle|running list = %v, want 3", ids)
	}
	if ids := list(anthropic.BetaSessionListParams{CreatedAtGt: anthropic.Time(s1.CreatedAt)}); len(ids) != 2 {
		t.Errorf("created_at[gt] list = %v, want 2", ids)
	}
	if ids := list(anthropic.BetaSessionListParams{CreatedAtLte: anthropic.Time(s1.CreatedAt)}); len(ids) != 1 || ids[0] != s1.ID {
		t.Errorf("created_at[lte] list = %v", ids)
	}
}

// sessionPaging pages the three sessions forwards and back.
func sessionPaging(t *testing.T, client anthropic.Client, s1 *anthropic.BetaManagedAgentsSession) {
	t.Helper()
	ctx := context.Background()
	first, err := client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{Limit: anthropic.Int(2)})
	if err != nil {
		t.Fatalf("page 1: %v", err)
	}
	if len(first.Data) != 2 || first.NextPage == "" || first.PrevPage != "" {
		t.Fatalf("page 1 = %d items next %q prev %q", len(first.Data), first.NextPage, first.PrevPage)
	}
	second, err := first.GetNextPage()
	if err != nil || second == nil {
		t.Fatalf("page 2: %v", err)
	}
	if len(second.Data) != 1 || second.Data[0].ID != s1.ID || second.NextPage != "" || second.PrevPage == "" {
		t.Fatalf("page 2 = %d items next %q prev %q", len(second.Data), second.NextPage, second.PrevPage)
	}
	back, err := client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{Limit: anthropic.Int(2), Page: anthropic.String(second.PrevPage)})
	if err != nil {
		t.Fatalf("prev page: %v", err)
	}
	if len(back.Data) != 2 || back.Data[0].ID != first.Data[0].ID || back.Data[1].ID != first.Data[1].ID {
		t.Errorf("prev page differs from page 1")
	}
	n := 0
	pager := client.Beta.Sessions.ListAutoPaging(ctx, anthropic.BetaSessionListParams{Limit: anthropic.Int(1)})
	for pager.Next() {
		n++
	}
	if pager.Err() != nil || n != 3 {
		t.Errorf("auto-paging = %d sessions (err %v), want 3", n, pager.Err())
	}
}

// sessionArchiveIsReadOnly archives the pinned session: it leaves the
// default list, and sending events to it is a conflict that will not
// clear, in the error envelope, and nothing is appended.
func sessionArchiveIsReadOnly(t *testing.T, srv *testserver.Server, client anthropic.Client, pinned *anthropic.BetaManagedAgentsSession) {
	t.Helper()
	ctx := context.Background()
	list := func(p anthropic.BetaSessionListParams) []string {
		t.Helper()
		return listSessionIDs(t, client, p)
	}
	archived, err := client.Beta.Sessions.Archive(ctx, pinned.ID, anthropic.BetaSessionArchiveParams{})
	if err != nil || archived.ArchivedAt.IsZero() {
		t.Fatalf("archive: %v", err)
	}
	if ids := list(anthropic.BetaSessionListParams{}); len(ids) != 2 {
		t.Errorf("list after archive = %d, want 2", len(ids))
	}
	// An archived session is read-only: sending events is a conflict that
	// will not clear, in the error envelope, and nothing is appended.
	before, err := client.Beta.Sessions.Events.List(ctx, pinned.ID, anthropic.BetaSessionEventListParams{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Beta.Sessions.Events.Send(ctx, pinned.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{userMessage("after archive")}})
	apiErr := apiErrorWithStatus(t, err, http.StatusConflict)
	if apiErr.Response.Header.Get("x-should-retry") != "false" || !strings.Contains(apiErr.RawJSON(), "archived") {
		t.Errorf("send to an archived session: x-should-retry %q, error %s; want false and a message naming the archive",
			apiErr.Response.Header.Get("x-should-retry"), apiErr.RawJSON())
	}
	r := do(t, srv, http.MethodPost, "/v1/sessions/"+pinned.ID+"/events", "application/json",
		[]byte(`{"events":[{"type":"user.message","content":[{"type":"text","text":"raw"}]}]}`), nil)
	checkEnvelope(t, r, http.StatusConflict, "conflict_error", "archived")
	after, err := client.Beta.Sessions.Events.List(ctx, pinned.ID, anthropic.BetaSessionEventListParams{})
	if err != nil || len(after.Data) != len(before.Data) {
		t.Errorf("events after refused sends = %d (%v), want %d", len(after.Data), err, len(before.Data))
	}
	if ids := list(anthropic.BetaSessionListParams{IncludeArchived: anthropic.Bool(true)}); len(ids) != 3 {
		t.Errorf("include_archived list = %d, want 3", len(ids))
	}
}

func TestSessionEventsAndStream(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	agent, envID := fixture(t, client)
	sess, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: envID,
	})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}

	streamCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	stream := client.Beta.Sessions.Events.StreamEvents(streamCtx, sess.ID, anthropic.BetaSessionEventStreamParams{})
	defer func() { _ = stream.Close() }()
	// The stream is live once its response arrived; the SDK has it open now.

	sent, err := client.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{userMessage("hello")}})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if len(sent.Data) != 1 || sent.Data[0].Type != "user.message" || !strings.HasPrefix(sent.Data[0].ID, "sevt_") {
		t.Fatalf("send response = %s", sent.RawJSON())
	}
	var types []string
	for len(types) < 2 && stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "user.message" && ev.ID != sent.Data[0].ID {
			t.Errorf("streamed user.message id %s, sent %s", ev.ID, sent.Data[0].ID)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if strings.Join(types, ",") != "user.message,session.status_running" {
		t.Errorf("streamed %v, want user.message then session.status_running", types)
	}

	got, err := client.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
	if err != nil || got.Status != "running" {
		t.Fatalf("status after message = %q (%v), want running", got.Status, err)
	}
	// A second message while running is queued outside the log until the
	// session takes it up: answered with processed_at null, not listed,
	// no second status event.
	queued, err := client.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{userMessage("again")}})
	if err != nil {
		t.Fatalf("send while running: %v", err)
	}
	if len(queued.Data) != 1 || !queued.Data[0].ProcessedAt.IsZero() || !strings.Contains(queued.Data[0].RawJSON(), `"processed_at":null`) {
		t.Errorf("queued message answered %s, want processed_at null", queued.RawJSON())
	}
	_, err = client.Beta.Sessions.Update(ctx, sess.ID, anthropic.BetaSessionUpdateParams{
		Agent: anthropic.BetaManagedAgentsSessionAgentUpdateParam{Tools: []anthropic.BetaManagedAgentsSessionAgentUpdateToolUnionParam{}},
	})
	wantAPIError(t, err, http.StatusConflict)

	page, err := client.Beta.Sessions.Events.List(ctx, sess.ID, anthropic.BetaSessionEventListParams{})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	var listed []string
	for _, ev := range page.Data {
		listed = append(listed, ev.Type)
	}
	if strings.Join(listed, ",") != "user.message,session.status_running" {
		t.Errorf("events = %v, want the first message and the status event (the second waits)", listed)
	}
	if page.Data[0].ProcessedAt.IsZero() || page.Data[1].ProcessedAt.Before(page.Data[0].ProcessedAt) {
		t.Errorf("processed_at %v then %v, want both set and in list order", page.Data[0].ProcessedAt, page.Data[1].ProcessedAt)
	}
	onlyUser, err := client.Beta.Sessions.Events.List(ctx, sess.ID, anthropic.BetaSessionEventListParams{Types: []anthropic.BetaManagedAgentsSessionEventType{"user.message"}, Order: "desc"})
	if err != nil {
		t.Fatalf("list types[]: %v", err)
	}
	if len(onlyUser.Data) != 1 || onlyUser.Data[0].ID != sent.Data[0].ID {
		t.Errorf("types[]=user.message desc = %d events, want the one in the log", len(onlyUser.Data))
	}
	paged := 0
	pager := client.Beta.Sessions.Events.ListAutoPaging(ctx, sess.ID, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(1)})
	for pager.Next() {
		paged++
	}
	if pager.Err() != nil || paged != 2 {
		t.Errorf("auto-paged %d events (err %v), want 2", paged, pager.Err())
	}
}

// sseFrame is one parsed Server-Sent Events frame.
type sseFrame struct {
	id, event, data string
}

// openStream opens the event stream with raw HTTP and returns a reader of
// its frames (comments skipped).
func openStream(t *testing.T, ctx context.Context, srv *testserver.Server, sessionID, lastEventID string) (<-chan sseFrame, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.BaseURL+"/v1/sessions/"+sessionID+"/events/stream", nil)
	req.Header.Set("x-api-key", srv.APIKey)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("open stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		cancel()
		t.Fatalf("stream status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	frames := make(chan sseFrame, 1024)
	go func() {
		defer close(frames)
		defer func() { _ = resp.Body.Close() }()
		r := bufio.NewReader(resp.Body)
		var f sseFrame
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "":
				if f.event != "" {
					frames <- f
				}
				f = sseFrame{}
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "id: "):
				f.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				f.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				f.data = line[6:]
			}
		}
	}()
	return frames, cancel
}

func nextFrame(t *testing.T, frames <-chan sseFrame) sseFrame {
	t.Helper()
	select {
	case f, ok := <-frames:
		if !ok {
			t.Fatalf("stream ended")
		}
		return f
	case <-time.After(10 * time.Second):
		t.Fatalf("no frame within 10s")
	}
	return sseFrame{}
}

func send(t *testing.T, srv *testserver.Server, sessionID string, events ...string) rawResponse {
	t.Helper()
	body := `{"events":[` + strings.Join(events, ",") + `]}`
	return do(t, srv, http.MethodPost, "/v1/sessions/"+sessionID+"/events", "application/json", []byte(body), nil)
}

const (
	msg       = `{"type":"user.message","content":[{"type":"text","text":"hi"}]}`
	interrupt = `{"type":"user.interrupt"}`
)

func newSession(t *testing.T, srv *testserver.Server) string {
	t.Helper()
	client := newClient(t, srv)
	agent, envID := fixture(t, client)
	s, err := client.Beta.Sessions.New(context.Background(), anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: envID,
	})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	return s.ID
}

func TestStreamLastEventIDReplay(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	id := newSession(t, srv)
	ctx := context.Background()

	frames, closeStream := openStream(t, ctx, srv, id, "")
	// A message starts a turn (no worker runs here); interrupts of the
	// running session enter the log at once (messages would queue).
	for _, body := range []string{msg, interrupt, interrupt} {
		if r := send(t, srv, id, body); r.status != http.StatusOK {
			t.Fatalf("send: %d %s", r.status, r.body)
		}
	}
	// 3 events + 1 status event; take the first two and disconnect.
	seen := []sseFrame{nextFrame(t, frames), nextFrame(t, frames)}
	closeStream()
	for _, f := range seen {
		if f.id == "" || !strings.HasPrefix(f.id, "sevt_") {
			t.Fatalf("frame without an event id: %+v", f)
		}
		var ev struct{ ID, Type string }
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil || ev.ID != f.id || ev.Type != f.event {
			t.Fatalf("frame %+v: data does not match id/event", f)
		}
	}
	// Commit more while disconnected.
	for range 2 {
		send(t, srv, id, interrupt)
	}
	frames, closeStream = openStream(t, ctx, srv, id, seen[1].id)
	defer closeStream()
	var replayed []sseFrame
	for range 4 {
		replayed = append(replayed, nextFrame(t, frames))
	}
	list := do(t, srv, http.MethodGet, "/v1/sessions/"+id+"/events?limit=100", "", nil, nil)
	var all struct {
		Data []struct{ ID, Type string }
	}
	_ = json.Unmarshal(list.body, &all)
	if len(all.Data) != 6 {
		t.Fatalf("log has %d events, want 6", len(all.Data))
	}
	for i, f := range replayed {
		want := all.Data[2+i]
		if f.id != want.ID || f.event != want.Type {
			t.Errorf("replayed[%d] = %s %s, want %s %s", i, f.id, f.event, want.ID, want.Type)
		}
	}
	// Frames arrive in log order, so the next frame being the next event
	// committed shows that nothing was sent twice.
	r := send(t, srv, id, interrupt)
	var sent struct {
		Data []struct{ ID string }
	}
	if err := json.Unmarshal(r.body, &sent); err != nil || r.status != http.StatusOK || len(sent.Data) != 1 {
		t.Fatalf("send = %d %s (%v), want the one event committed", r.status, r.body, err)
	}
	if f := nextFrame(t, frames); f.id != sent.Data[0].ID {
		t.Errorf("frame after the replay = %s %s, want the event committed next, %s (sent twice?)", f.id, f.event, sent.Data[0].ID)
	}
	// An unknown Last-Event-ID is refused.
	r = do(t, srv, http.MethodGet, "/v1/sessions/"+id+"/events/stream", "", nil, map[string]string{"Last-Event-ID": "sevt_000000000000000000000000"})
	checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "Last-Event-ID")
}

func TestConcurrentSendersGetContiguousSequence(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	id := newSession(t, srv)
	const senders = 50
	var wg sync.WaitGroup
	errs := make(chan string, senders)
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"type":"user.message","content":[{"type":"text","text":"m%d"}]}`, i)
			if r := send(t, srv, id, body); r.status != http.StatusOK {
				errs <- fmt.Sprintf("sender %d: %d %s", i, r.status, r.body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	pool, err := pgxpool.New(context.Background(), srv.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var count, minSeq, maxSeq, inLog, queued, distinctText int64
	err = pool.QueryRow(context.Background(), `SELECT count(*), min(seq), max(seq), count(*) FILTER (WHERE type = 'user.message'),
		(SELECT count(*) FROM queued_events q WHERE q.session_id = $1),
		(SELECT count(DISTINCT t) FROM (SELECT body->'content'->0->>'text' AS t FROM events WHERE session_id = $1 AND type = 'user.message'
		 UNION ALL SELECT body->'content'->0->>'text' FROM queued_events WHERE session_id = $1) AS texts)
		FROM events WHERE session_id = $1`, id).Scan(&count, &minSeq, &maxSeq, &inLog, &queued, &distinctText)
	if err != nil {
		t.Fatal(err)
	}
	// The first message and session.status_running are in the log; the
	// other 49 wait for its turn, none lost or doubled.
	if count != 2 || minSeq != 1 || maxSeq != 2 || inLog != 1 || queued != senders-1 || distinctText != senders {
		t.Errorf("events: count %d seq %d..%d, messages in the log %d, queued %d, distinct messages %d; want 2 contiguous from 1, 1, %d and %d",
			count, minSeq, maxSeq, inLog, queued, distinctText, senders-1, senders)
	}
	// Events that enter the log at once stay gapless under concurrency.
	var wg2 sync.WaitGroup
	for range senders {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			if r := send(t, srv, id, interrupt); r.status != http.StatusOK {
				t.Errorf("interrupt: %d %s", r.status, r.body)
			}
		}()
	}
	wg2.Wait()
	// The log as clients list it and its newest position as the
	// ControlPlane reports it: as many events as the newest seq, and seqs
	// are unique and start at 1, so they are contiguous.
	list := do(t, srv, http.MethodGet, "/v1/sessions/"+id+"/events?limit=100", "", nil, nil)
	var listed struct {
		Data []struct{ ID string }
	}
	if err := json.Unmarshal(list.body, &listed); err != nil || list.status != http.StatusOK {
		t.Fatalf("list events = %d %s (%v), want 200", list.status, list.body, err)
	}
	conn, cpCtx := workerConn(t, srv)
	run, err := pb.NewControlPlaneClient(conn).GetRun(cpCtx, &pb.GetRunRequest{SessionId: id})
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	if count, last := len(listed.Data), run.GetLastSeq(); count != senders+2 || last != senders+2 {
		t.Errorf("after %d concurrent interrupts: %d events listed, last seq %d; want %d contiguous from 1", senders, count, last, senders+2)
	}
}

func TestStreamAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := testserver.Start(t)
	b := testserver.Start(t, testserver.WithDatabase(a.DatabaseURL))
	id := newSession(t, a)
	frames, closeStream := openStream(t, context.Background(), a, id, "")
	defer closeStream()
	start := time.Now()
	r := send(t, b, id, msg)
	if r.status != http.StatusOK {
		t.Fatalf("send through B: %d %s", r.status, r.body)
	}
	f := nextFrame(t, frames)
	if f.event != "user.message" {
		t.Fatalf("stream on A got %q first, want user.message sent through B", f.event)
	}
	t.Logf("commit on B reached a stream on A in %v", time.Since(start))
}

func TestStreamEndsWhenSessionDeleted(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	id := newSession(t, srv)
	frames, closeStream := openStream(t, context.Background(), srv, id, "")
	defer closeStream()
	send(t, srv, id, msg)
	nextFrame(t, frames)
	nextFrame(t, frames)
	if r := do(t, srv, http.MethodDelete, "/v1/sessions/"+id, "", nil, nil); r.status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	f := nextFrame(t, frames)
	if f.event != "session.deleted" {
		t.Fatalf("got %q, want session.deleted", f.event)
	}
	select {
	case _, ok := <-frames:
		if ok {
			t.Errorf("stream continued after session.deleted")
		}
	case <-time.After(5 * time.Second):
		t.Errorf("stream did not end after session.deleted")
	}
}

var _ = option.WithBaseURL
