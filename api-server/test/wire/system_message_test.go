package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

func systemMessage(text string) anthropic.BetaManagedAgentsEventParamsUnion {
	return anthropic.BetaManagedAgentsEventParamsUnion{OfSystemMessage: &anthropic.BetaManagedAgentsSystemMessageEventParams{
		Content: []anthropic.BetaManagedAgentsSystemContentBlockParam{{Text: text}}}}
}

// TestSystemMessage: a system.message sent with a user.message is in the
// log (decoded by the SDK) and extends the system context of the model
// requests of that turn and the turns after it; the SDK's placement rule
// (at most one, last, after the event it accompanies) is enforced.
func TestSystemMessage(t *testing.T) {
	srv := testserver.Start(t)
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	record := filepath.Join(t.TempDir(), "requests.jsonl")
	e.worker = startWorkerWith(t, srv, "wire-system", e.root, map[string]string{"MANGO_FAKE_MODEL_RECORD": record})
	ctx := context.Background()
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "sys", System: anthropic.String("You help."),
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("sys-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	events := e.watch(t, s.ID)
	for _, bad := range [][]anthropic.BetaManagedAgentsEventParamsUnion{
		{systemMessage("alone")},
		{systemMessage("first"), userMessage("then")},
		{userMessage("m"), systemMessage("one"), systemMessage("two")},
	} {
		_, err := e.client.Beta.Sessions.Events.Send(ctx, s.ID, anthropic.BetaSessionEventSendParams{Events: bad})
		wantAPIError(t, err, 400)
	}
	if _, err := e.client.Beta.Sessions.Events.Send(ctx, s.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{userMessage("#reply one"), systemMessage("Answer in French.")}}); err != nil {
		t.Fatal(err)
	}
	got := until(t, events, "session.status_idle", time.Minute)
	var sm anthropic.BetaManagedAgentsSystemMessageEvent
	if ev := lastEvent(got, "system.message"); ev.ID == "" || json.Unmarshal([]byte(ev.Raw), &sm) != nil || sm.Content[0].Text != "Answer in French." {
		t.Fatalf("the session's log lacks the system.message as sent; events %v", typesOf(got))
	}
	e.say(t, s.ID, "#reply two")
	until(t, events, "session.status_idle", time.Minute)
	reqs := recordedSystems(t, record)
	if len(reqs) != 2 {
		t.Fatalf("%d model requests recorded, want 2", len(reqs))
	}
	for i, sys := range reqs {
		if !strings.HasPrefix(sys, "You help.") || !strings.HasSuffix(sys, "\n\nAnswer in French.") {
			t.Errorf("request %d's system context %q, want the agent's prompt then the system message", i+1, sys)
		}
	}
}

// recordedSystems are the system prompts of the requests the worker's fake
// model answered, in order.
func recordedSystems(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the model's record: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			System string `json:"system"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("decode a recorded request: %v", err)
		}
		out = append(out, r.System)
	}
	return out
}
