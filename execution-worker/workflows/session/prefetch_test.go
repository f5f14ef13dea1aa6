package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
	"github.com/mangohq/mango/execution-worker/workflows/session"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// bashTools is an agent's tool configuration with the bash built-in: its
// turns can need a sandbox.
const bashTools = `[{"type":"agent_toolset_20260401","configs":[{"name":"bash","enabled":true,"permission_policy":{"type":"always_allow"}}]}]`

// toolCP is a ControlPlane with one pending user.message (text) for an
// agent with bash; it keeps the tool journal and records the turn's end.
type toolCP struct {
	pb.ControlPlaneClient
	text string

	mu        sync.Mutex
	journal   map[string]string
	completes []*pb.CompleteTurnRequest
}

func (f *toolCP) GetRun(_ context.Context, req *pb.GetRunRequest, _ ...grpc.CallOption) (*pb.GetRunResponse, error) {
	body, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": f.text}}})
	return &pb.GetRunResponse{SessionId: req.GetSessionId(), Agent: `{"name":"a","model":{"id":"claude-sonnet-4-5"}}`, Tools: bashTools, McpServers: "[]",
		Status:          pb.SessionStatus_SESSION_STATUS_RUNNING,
		PendingTriggers: []*pb.Event{{Id: "sevt_1", Type: "user.message", Body: string(body)}}}, nil
}

func (f *toolCP) GetBinding(context.Context, *pb.GetBindingRequest, ...grpc.CallOption) (*pb.GetBindingResponse, error) {
	return &pb.GetBindingResponse{}, nil
}

func (f *toolCP) AppendEvents(_ context.Context, req *pb.AppendEventsRequest, _ ...grpc.CallOption) (*pb.AppendEventsResponse, error) {
	resp := &pb.AppendEventsResponse{}
	for _, e := range req.GetEvents() {
		resp.Events = append(resp.Events, &pb.Event{Id: sessionwf.EventID(req.GetSessionId(), e.GetKey()), Type: e.GetType(), Key: e.GetKey()})
	}
	return resp, nil
}

func (f *toolCP) AppendTranscript(context.Context, *pb.AppendTranscriptRequest, ...grpc.CallOption) (*pb.AppendTranscriptResponse, error) {
	return &pb.AppendTranscriptResponse{}, nil
}

func (f *toolCP) GetToolJournal(_ context.Context, req *pb.GetToolJournalRequest, _ ...grpc.CallOption) (*pb.GetToolJournalResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if body, ok := f.journal[req.GetToolUseId()]; ok {
		return &pb.GetToolJournalResponse{Entry: &pb.ToolJournalEntry{Body: body}}, nil
	}
	return &pb.GetToolJournalResponse{}, nil
}

func (f *toolCP) RecordToolJournal(_ context.Context, req *pb.RecordToolJournalRequest, _ ...grpc.CallOption) (*pb.RecordToolJournalResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.journal == nil {
		f.journal = map[string]string{}
	}
	body, ok := f.journal[req.GetToolUseId()]
	if !ok {
		body = req.GetBody()
		f.journal[req.GetToolUseId()] = body
	}
	return &pb.RecordToolJournalResponse{Entry: &pb.ToolJournalEntry{Body: body}, Created: !ok}, nil
}

func (f *toolCP) CompleteTurn(_ context.Context, req *pb.CompleteTurnRequest, _ ...grpc.CallOption) (*pb.CompleteTurnResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.completes = append(f.completes, req)
	return &pb.CompleteTurnResponse{Status: pb.SessionStatus_SESSION_STATUS_IDLE}, nil
}

// toolResults returns the journaled results (not the start marks).
func (f *toolCP) toolResults() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, body := range f.journal {
		if !strings.Contains(body, `"claim"`) {
			out = append(out, body)
		}
	}
	return out
}

// gatedProvider is a local provider whose Create announces itself
// (entered) and then waits for release, or for its context; fail, when
// set, is what it returns then.
type gatedProvider struct {
	sandbox.Provider
	entered chan struct{}
	release chan struct{}
	fail    error

	once      sync.Once
	mu        sync.Mutex
	creates   int
	cancelled bool      // a Create saw its context end
	returned  time.Time // when the last Create returned
}

func newGatedProvider(t *testing.T) *gatedProvider {
	t.Helper()
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), Installation: "prefetch-test"})
	if err != nil {
		t.Fatal(err)
	}
	return &gatedProvider{Provider: p, entered: make(chan struct{}), release: make(chan struct{})}
}

func (p *gatedProvider) Create(ctx context.Context, key string, spec sandbox.Spec) (sandbox.Sandbox, sandbox.Ref, error) {
	p.mu.Lock()
	p.creates++
	p.mu.Unlock()
	p.once.Do(func() { close(p.entered) })
	defer func() {
		p.mu.Lock()
		p.returned = time.Now()
		p.mu.Unlock()
	}()
	select {
	case <-p.release:
	case <-ctx.Done():
		p.mu.Lock()
		p.cancelled = true
		p.mu.Unlock()
		return nil, sandbox.Ref{}, ctx.Err()
	}
	if p.fail != nil {
		return nil, sandbox.Ref{}, p.fail
	}
	return p.Provider.Create(ctx, key, spec)
}

// gatedModel is the fake model, whose first call waits (up to a
// deadline) for the sandbox's Create to be under way, then lets it
// finish: the turn can only succeed when provisioning overlaps the model
// call.
type gatedModel struct {
	*modelfake.Client
	p *gatedProvider

	mu     sync.Mutex
	calls  int
	called time.Time // first call
}

func (m *gatedModel) gate(ctx context.Context) error {
	m.mu.Lock()
	m.calls++
	first := m.calls == 1
	if first {
		m.called = time.Now()
	}
	m.mu.Unlock()
	if !first {
		return nil
	}
	select {
	case <-m.p.entered:
	case <-time.After(10 * time.Second):
		return errors.New("the model was called and no sandbox was being provisioned within 10s")
	case <-ctx.Done():
		return ctx.Err()
	}
	close(m.p.release)
	return nil
}

func (m *gatedModel) Create(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := m.gate(ctx); err != nil {
		return nil, err
	}
	return m.Client.Create(ctx, req)
}

func (m *gatedModel) Stream(ctx context.Context, req *model.Request, on func(model.StreamEvent)) (*model.Response, error) {
	if err := m.gate(ctx); err != nil {
		return nil, err
	}
	return m.Client.Stream(ctx, req, on)
}

// TestFirstTurnProvisionsDuringTheModelCall: the sandbox of a turn that
// can need one is provisioned while the model answers, not after: the
// model's first call waits for Create to be under way and Create for
// the model call, so a turn that provisions only when the tool runs
// never gets past its first model call. The bash call then runs in the
// sandbox provisioned once.
func TestFirstTurnProvisionsDuringTheModelCall(t *testing.T) {
	t.Parallel()
	cp := &toolCP{text: "#tool bash {\"command\": \"echo provisioned-early\"}"}
	p := newGatedProvider(t)
	m := &gatedModel{Client: modelfake.New(), p: p}
	a := &session.TurnActivities{ControlPlane: cp, Model: m, Manager: sandbox.NewSessionManager(p, sandboxtest.NewBindings(), "mango.local.h1")}
	res := runTurn(t, a, session.RunTurnInput{SessionID: "sesn_1"})
	if res.Outcome != session.TurnIdle {
		t.Fatalf("outcome %s, want idle", res.Outcome)
	}
	p.mu.Lock()
	creates, returned := p.creates, p.returned
	p.mu.Unlock()
	m.mu.Lock()
	called := m.called
	m.mu.Unlock()
	if creates != 1 {
		t.Errorf("Create called %d times, want 1", creates)
	}
	if !called.Before(returned) {
		t.Errorf("the model was first called at %v, after Create returned at %v; want it called while provisioning", called, returned)
	}
	results := cp.toolResults()
	if len(results) != 1 || !strings.Contains(results[0], "provisioned-early") {
		t.Errorf("tool results %v, want one with the command's output", results)
	}
	if len(cp.completes) != 1 || cp.completes[0].GetOutcome() != pb.TurnOutcome_TURN_OUTCOME_END_TURN {
		t.Errorf("CompleteTurn %v, want one end_turn", cp.completes)
	}
}

// TestTurnWithoutToolStopsProvisioning: a turn that ends without using
// its sandbox while provisioning is still under way cancels it and waits
// for it before RunTurn returns (nothing keeps running behind the turn),
// and ends as it would have without provisioning.
func TestTurnWithoutToolStopsProvisioning(t *testing.T) {
	t.Parallel()
	cp := &toolCP{text: "hello"}
	p := newGatedProvider(t)
	// The model answers once Create is under way, without releasing it.
	a := &session.TurnActivities{ControlPlane: cp, Model: waitEntered{modelfake.New(), p}, Manager: sandbox.NewSessionManager(p, sandboxtest.NewBindings(), "mango.local.h1")}
	res := runTurn(t, a, session.RunTurnInput{SessionID: "sesn_1"})
	if res.Outcome != session.TurnIdle {
		t.Fatalf("outcome %s, want idle", res.Outcome)
	}
	p.mu.Lock()
	cancelled := p.cancelled
	p.mu.Unlock()
	if !cancelled {
		t.Error("RunTurn returned and the Create it started had not seen its context cancelled: provisioning outlived the turn")
	}
	if len(cp.completes) != 1 || cp.completes[0].GetOutcome() != pb.TurnOutcome_TURN_OUTCOME_END_TURN || len(cp.toolResults()) != 0 {
		t.Errorf("CompleteTurn %v, tool results %v; want one end_turn and no tool call", cp.completes, cp.toolResults())
	}
}

// waitEntered is the fake model answering once the provider's Create
// is under way.
type waitEntered struct {
	*modelfake.Client
	p *gatedProvider
}

func (w waitEntered) wait() error {
	select {
	case <-w.p.entered:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("the model was called and no sandbox was being provisioned within 10s")
	}
}

func (w waitEntered) Create(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := w.wait(); err != nil {
		return nil, err
	}
	return w.Client.Create(ctx, req)
}

func (w waitEntered) Stream(ctx context.Context, req *model.Request, on func(model.StreamEvent)) (*model.Response, error) {
	if err := w.wait(); err != nil {
		return nil, err
	}
	return w.Client.Stream(ctx, req, on)
}

// TestProvisioningErrorsSurfaceAtFirstUse: a sandbox that cannot be
// provisioned, or whose bound resource vanished, fails the turn exactly
// as before provisioning started early, and only if the turn uses the
// sandbox: a turn that only talks ends normally.
func TestProvisioningErrorsSurfaceAtFirstUse(t *testing.T) {
	t.Parallel()
	const tool = "#tool bash {\"command\": \"echo never\"}"
	for _, c := range []struct {
		name       string
		vanished   bool
		text       string
		outcome    string
		wantEnd    pb.TurnOutcome
		errorEvent string // key suffix of the session.error; "" none
	}{
		{"unprovisionable, tool used", false, tool, session.TurnIdle, pb.TurnOutcome_TURN_OUTCOME_END_TURN, "/sandbox_provisioning/session_error"},
		{"unprovisionable, no tool", false, "hello", session.TurnIdle, pb.TurnOutcome_TURN_OUTCOME_END_TURN, ""},
		{"vanished, tool used", true, tool, session.TurnStopped, pb.TurnOutcome_TURN_OUTCOME_TERMINATED, "/sandbox_vanished/session_error"},
		{"vanished, no tool", true, "hello", session.TurnIdle, pb.TurnOutcome_TURN_OUTCOME_END_TURN, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cp := &toolCP{text: c.text}
			p := newGatedProvider(t)
			close(p.release)
			var bindings *sandboxtest.Bindings
			if c.vanished {
				sb, ref, err := p.Provider.Create(ctx, "sesn_1", sandbox.Spec{})
				if err != nil {
					t.Fatal(err)
				}
				if err := sb.Destroy(ctx); err != nil {
					t.Fatal(err)
				}
				bindings = sandboxtest.NewBindings(sandbox.Binding{SessionID: "sesn_1", Provider: ref.Provider, ExternalID: ref.ID, TaskQueue: "mango.local.h1"})
			} else {
				bindings = sandboxtest.NewBindings()
				p.fail = &sandbox.ProvisionError{SessionID: "sesn_1", Reason: "the test refuses it"}
			}
			a := &session.TurnActivities{ControlPlane: cp, Model: modelfake.New(), Manager: sandbox.NewSessionManager(p, bindings, "mango.local.h1")}
			res := runTurn(t, a, session.RunTurnInput{SessionID: "sesn_1", TaskQueue: "mango.local.h1"})
			if res.Outcome != c.outcome {
				t.Fatalf("outcome %s, want %s", res.Outcome, c.outcome)
			}
			if len(cp.completes) != 1 {
				t.Fatalf("%d CompleteTurn calls, want 1", len(cp.completes))
			}
			end := cp.completes[0]
			var errs []string
			for _, e := range end.GetEvents() {
				if e.GetType() == "session.error" {
					errs = append(errs, e.GetKey())
				}
			}
			want := []string{}
			if c.errorEvent != "" {
				want = append(want, "sevt_1"+c.errorEvent)
			}
			if end.GetOutcome() != c.wantEnd || fmt.Sprint(errs) != fmt.Sprint(want) {
				t.Errorf("turn ended %s with session.errors %v; want %s with %v", end.GetOutcome(), errs, c.wantEnd, want)
			}
		})
	}
}
