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

// A session whose tool results outgrow a small context window keeps
// working: old results are moved to files in the sandbox and the projection
// is compacted (agent.thread_context_compacted, decoded through the SDK's
// union); a single result too large for the window ends the turn with a
// session.error the SDK decodes, and the session stays usable.
func TestContextCompactionThroughSDK(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	// 20,000 tokens less 8,192 of output leave 11,808 for input: three
	// 20 KB tool results (5,000 tokens each) do not fit.
	e.worker = startWorkerWith(t, srv, "wire-context", e.root, map[string]string{"MANGO_MODEL_CONTEXT_WINDOW": "20000"})
	id := e.session(t, toolset)
	events := e.watch(t, id)
	var all []streamed
	for i := range 4 {
		e.say(t, id, fmt.Sprintf("turn %d\n#tool bash {\"command\":\"head -c 20000 /dev/zero | tr '\\\\0' a\"}", i))
		evs := until(t, events, "session.status_idle", 60*time.Second)
		if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" || count(evs, "session.error") > 0 {
			t.Fatalf("turn %d: stop reason %q, events %v; want end_turn without errors", i, typ, typesOf(evs))
		}
		all = append(all, evs...)
	}
	if n := count(all, "agent.thread_context_compacted"); n < 1 {
		t.Fatalf("no agent.thread_context_compacted in %v", typesOf(all))
	}
	// The first turn's result was spilled to a file of the sandbox.
	dir := filepath.Join(e.root, sandboxDir(t, e.root), ".mango", "context")
	files, err := os.ReadDir(dir)
	if err != nil || len(files) == 0 {
		t.Fatalf("no spilled tool results in %s: %v", dir, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, files[0].Name())); err != nil || len(b) < 20_000 {
		t.Errorf("spilled result %s: %d bytes (%v), want the whole 20 KB output", files[0].Name(), len(b), err)
	}

	// 60,000 characters of output (stdout and stderr) need 15,000 tokens.
	e.say(t, id, `#tool bash {"command":"head -c 30000 /dev/zero | tr '\\0' a; head -c 30000 /dev/zero | tr '\\0' b >&2"}`)
	evs := until(t, events, "session.status_idle", 60*time.Second)
	errEv := last(evs, "session.error")
	if errEv == nil {
		t.Fatalf("no session.error for a request over the window; got %v", typesOf(evs))
	}
	for _, ev := range evs {
		if ev.Type == "session.error" {
			if typ, retry := sdkSessionError(t, ev.Raw); typ != "unknown_error" || retry != "exhausted" {
				t.Errorf("session.error %s/%s, want unknown_error/exhausted: %s", typ, retry, ev.Raw)
			}
		}
	}
	if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" {
		t.Errorf("after the over-window error: stop reason %q, want end_turn", typ)
	}
	// The session still works.
	e.say(t, id, "#reply still here")
	evs = until(t, events, "session.status_idle", 60*time.Second)
	if m := last(evs, "agent.message"); resultText(m) != "still here" {
		t.Errorf("after the error: agent.message %v, want \"still here\"", m)
	}

	// Long messages have no tool results to stub: the oldest turns are
	// summarized by a model call, whose usage counts like any other.
	id = e.session(t, toolset)
	events = e.watch(t, id)
	all = nil
	long := strings.Repeat("lorem ipsum ", 700) // 8,400 bytes, echoed back by the fake
	for i := range 4 {
		e.say(t, id, fmt.Sprintf("turn %d %s", i, long))
		evs := until(t, events, "session.status_idle", 60*time.Second)
		if typ, _ := stopReason(last(evs, "session.status_idle")); typ != "end_turn" || count(evs, "session.error") > 0 {
			t.Fatalf("long turn %d: stop reason %q, events %v; want end_turn without errors", i, typ, typesOf(evs))
		}
		all = append(all, evs...)
	}
	if n := count(all, "agent.thread_context_compacted"); n != 1 {
		t.Fatalf("%d agent.thread_context_compacted in %v, want 1 (in the fourth turn)", n, typesOf(all))
	}
	if n := count(all, "span.model_request_end"); n != 5 {
		t.Errorf("%d span.model_request_end, want 5 (four replies and the summary)", n)
	}
	var input, output int64
	for _, ev := range all {
		if ev.Type != "span.model_request_end" {
			continue
		}
		var body struct {
			ModelUsage struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
			} `json:"model_usage"`
		}
		if err := json.Unmarshal([]byte(ev.Raw), &body); err != nil {
			t.Fatal(err)
		}
		input, output = input+body.ModelUsage.InputTokens, output+body.ModelUsage.OutputTokens
	}
	sess, err := e.client.Beta.Sessions.Get(context.Background(), id, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if sess.Usage.InputTokens != input || sess.Usage.OutputTokens != output {
		t.Errorf("Sessions.Get usage %s, want the spans' %d input and %d output tokens, the summary's included", sess.Usage.RawJSON(), input, output)
	}
}
