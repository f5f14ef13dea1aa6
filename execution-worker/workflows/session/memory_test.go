package session_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/interrupts"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
	"github.com/mangohq/mango/execution-worker/workflows/session"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// Mounts of the test's stores.
const (
	notesMount = sandbox.MemoryDir + "/notes"
	refsMount  = sandbox.MemoryDir + "/refs"
)

// memoryCP is toolCP whose agent has the write tool and whose session
// has two memory stores: notes (read_write) and refs (read_only).
type memoryCP struct{ *toolCP }

func (f memoryCP) GetRun(ctx context.Context, req *pb.GetRunRequest, opts ...grpc.CallOption) (*pb.GetRunResponse, error) {
	run, err := f.toolCP.GetRun(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	run.Tools = `[{"type":"agent_toolset_20260401","configs":[{"name":"write","enabled":true,"permission_policy":{"type":"always_allow"}}]}]`
	run.TurnContext = &pb.TurnContext{Resources: []*pb.SessionResource{
		{Id: "sesrsc_notes", Type: "memory_store", MountPath: notesMount, Version: 1, MaterializedVersion: 1, MemoryStoreId: "memstore_n",
			MemoryAccess: "read_write", MemoryStoreName: "Notes", MemoryStoreDescription: "What was learned.", MemoryInstructions: "One file per topic."},
		{Id: "sesrsc_refs", Type: "memory_store", MountPath: refsMount, Version: 1, MaterializedVersion: 1, MemoryStoreId: "memstore_r",
			MemoryAccess: "read_only", MemoryStoreName: "Refs"},
	}}
	return run, nil
}

// memStore is one store of memClient.
type memStore struct {
	access, mount  string
	memories, base map[string]string
}

// memClient is an in-process SessionMemory client: ReadMemoryStore
// makes the memories the base; SyncMemoryStore applies every change of a
// read_write store and refuses those of a read_only one.
type memClient struct {
	mu     sync.Mutex
	stores map[string]*memStore
	synced []string // "resource path" of every change received
}

func shaOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func (c *memClient) store(id string) (*memStore, error) {
	s, ok := c.stores[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no memory_store resource %s", id)
	}
	return s, nil
}

func (c *memClient) ReadMemoryStore(_ context.Context, req *pb.ReadMemoryStoreRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[pb.ReadMemoryStoreResponse], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.store(req.GetResourceId())
	if err != nil {
		return nil, err
	}
	msgs := []*pb.ReadMemoryStoreResponse{{Header: &pb.MemoryStoreHeader{Access: s.access, MountPath: s.mount}}}
	s.base = map[string]string{}
	for _, p := range slices.Sorted(maps.Keys(s.memories)) {
		s.base[p] = shaOf(s.memories[p])
		msgs = append(msgs, &pb.ReadMemoryStoreResponse{Memory: &pb.MemoryFile{Path: p, Content: []byte(s.memories[p]), ContentSha256: shaOf(s.memories[p])}})
	}
	return &readStream{msgs: msgs}, nil
}

func (c *memClient) GetMemoryBase(_ context.Context, req *pb.GetMemoryBaseRequest, _ ...grpc.CallOption) (*pb.GetMemoryBaseResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.store(req.GetResourceId())
	if err != nil {
		return nil, err
	}
	out := &pb.GetMemoryBaseResponse{Header: &pb.MemoryStoreHeader{Access: s.access, MountPath: s.mount}}
	for _, p := range slices.Sorted(maps.Keys(s.base)) {
		out.Entries = append(out.Entries, &pb.MemoryBaseEntry{Path: p, ContentSha256: s.base[p]})
	}
	return out, nil
}

func (c *memClient) SyncMemoryStore(context.Context, ...grpc.CallOption) (grpc.ClientStreamingClient[pb.SyncMemoryStoreRequest, pb.SyncMemoryStoreResponse], error) {
	return &syncStream{c: c}, nil
}

type readStream struct {
	grpc.ClientStream
	msgs []*pb.ReadMemoryStoreResponse
}

func (r *readStream) Recv() (*pb.ReadMemoryStoreResponse, error) {
	if len(r.msgs) == 0 {
		return nil, io.EOF
	}
	m := r.msgs[0]
	r.msgs = r.msgs[1:]
	return m, nil
}

type syncStream struct {
	grpc.ClientStream
	c    *memClient
	msgs []*pb.SyncMemoryStoreRequest
}

func (s *syncStream) Send(m *pb.SyncMemoryStoreRequest) error {
	s.msgs = append(s.msgs, m)
	return nil
}

func (s *syncStream) CloseAndRecv() (*pb.SyncMemoryStoreResponse, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	id := s.msgs[0].GetHeader().GetResourceId()
	st, err := s.c.store(id)
	if err != nil {
		return nil, err
	}
	out := &pb.SyncMemoryStoreResponse{}
	for _, m := range s.msgs[1:] {
		ch := m.GetChange()
		s.c.synced = append(s.c.synced, id+" "+ch.GetPath())
		res := &pb.MemoryChangeResult{Path: ch.GetPath(), Outcome: pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_APPLIED}
		switch {
		case st.access == "read_only":
			res.Outcome, res.Reason = pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_REFUSED, "read_only"
		case ch.GetDeleted():
			delete(st.memories, ch.GetPath())
			delete(st.base, ch.GetPath())
		default:
			st.memories[ch.GetPath()] = string(ch.GetContent())
			st.base[ch.GetPath()] = ch.GetContentSha256()
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}

// systemRecorder is the fake model, recording the system prompts it got.
type systemRecorder struct {
	*modelfake.Client
	mu      sync.Mutex
	systems []string
}

func (m *systemRecorder) Create(ctx context.Context, req *model.Request) (*model.Response, error) {
	m.mu.Lock()
	m.systems = append(m.systems, req.System)
	m.mu.Unlock()
	return m.Client.Create(ctx, req)
}

func (m *systemRecorder) Stream(ctx context.Context, req *model.Request, on func(model.StreamEvent)) (*model.Response, error) {
	m.mu.Lock()
	m.systems = append(m.systems, req.System)
	m.mu.Unlock()
	return m.Client.Stream(ctx, req, on)
}

// A turn places the session's memory stores at its first sandbox use and
// syncs them at its end: what the agent wrote to the read_write store is
// saved; the write tool refuses the read_only store's mount. The system
// prompt lists both stores.
func TestTurnPlacesAndSyncsMemory(t *testing.T) {
	t.Parallel()
	cp := memoryCP{&toolCP{text: `#tool write {"file_path":"` + notesMount + `/learned.md","content":"remember this"}` + "\n" +
		`#tool write {"file_path":"` + refsMount + `/x.md","content":"no"}`}}
	mem := &memClient{stores: map[string]*memStore{
		"sesrsc_notes": {access: "read_write", mount: notesMount, memories: map[string]string{"old.md": "kept\n"}, base: map[string]string{}},
		"sesrsc_refs":  {access: "read_only", mount: refsMount, memories: map[string]string{"ref.md": "ref\n"}, base: map[string]string{}},
	}}
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), Installation: "memory-turn-test"})
	if err != nil {
		t.Fatal(err)
	}
	m := &systemRecorder{Client: modelfake.New()}
	a := &session.TurnActivities{ControlPlane: cp, Model: m, Manager: sandbox.NewSessionManager(p, sandboxtest.NewBindings(), "mango.local.h1"),
		Resources: &sessionfiles.Materializer{Memory: mem}}
	res := runTurn(t, a, session.RunTurnInput{SessionID: "sesn_1"})
	if res.Outcome != session.TurnIdle {
		t.Fatalf("outcome %s, want idle", res.Outcome)
	}
	mem.mu.Lock()
	notes, refs, synced := maps.Clone(mem.stores["sesrsc_notes"].memories), maps.Clone(mem.stores["sesrsc_refs"].memories), slices.Clone(mem.synced)
	mem.mu.Unlock()
	if want := map[string]string{"old.md": "kept\n", "learned.md": "remember this"}; !maps.Equal(notes, want) {
		t.Errorf("notes store = %q, want %q", notes, want)
	}
	if want := map[string]string{"ref.md": "ref\n"}; !maps.Equal(refs, want) {
		t.Errorf("refs store = %q, want %q", refs, want)
	}
	if want := []string{"sesrsc_notes learned.md"}; !slices.Equal(synced, want) {
		t.Errorf("changes synced %q, want %q", synced, want)
	}
	if !slices.ContainsFunc(cp.toolResults(), func(body string) bool { return strings.Contains(body, "read_only") }) {
		t.Errorf("tool results %q, want the write to %s refused as read_only", cp.toolResults(), refsMount)
	}
	m.mu.Lock()
	sys := m.systems[0]
	m.mu.Unlock()
	for _, want := range []string{"# Memory", "- Notes (" + notesMount + ", read_write): What was learned.\n  Instructions: One file per topic.",
		"- Refs (" + refsMount + ", read_only)"} {
		if !strings.Contains(sys, want) {
			t.Errorf("system prompt =\n%s\nwant it to contain %q", sys, want)
		}
	}
}

// interruptingModel is the fake model whose second call delivers a
// pushed interrupt for the session and waits for the turn's cancellation.
type interruptingModel struct {
	*modelfake.Client
	reg *interrupts.Registry

	mu    sync.Mutex
	calls int
}

func (m *interruptingModel) interrupt(ctx context.Context) error {
	m.mu.Lock()
	m.calls++
	n := m.calls
	m.mu.Unlock()
	if n < 2 {
		return nil
	}
	m.reg.Deliver(interrupts.Interrupt{SessionID: "sesn_1", EventID: "sevt_interrupt", Seq: 1})
	<-ctx.Done()
	return ctx.Err()
}

func (m *interruptingModel) Create(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := m.interrupt(ctx); err != nil {
		return nil, err
	}
	return m.Client.Create(ctx, req)
}

func (m *interruptingModel) Stream(ctx context.Context, req *model.Request, on func(model.StreamEvent)) (*model.Response, error) {
	if err := m.interrupt(ctx); err != nil {
		return nil, err
	}
	return m.Client.Stream(ctx, req, on)
}

// An interrupted turn syncs its memory stores too: what the agent wrote
// before the interrupt is saved.
func TestInterruptedTurnSyncsMemory(t *testing.T) {
	t.Parallel()
	cp := memoryCP{&toolCP{text: `#tool write {"file_path":"` + notesMount + `/before.md","content":"written before the interrupt"}` + "\n#reply never"}}
	mem := &memClient{stores: map[string]*memStore{
		"sesrsc_notes": {access: "read_write", mount: notesMount, memories: map[string]string{}, base: map[string]string{}},
		"sesrsc_refs":  {access: "read_only", mount: refsMount, memories: map[string]string{}, base: map[string]string{}},
	}}
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), Installation: "memory-interrupt-test"})
	if err != nil {
		t.Fatal(err)
	}
	reg := interrupts.NewRegistry()
	a := &session.TurnActivities{ControlPlane: cp, Model: &interruptingModel{Client: modelfake.New(), reg: reg},
		Manager: sandbox.NewSessionManager(p, sandboxtest.NewBindings(), "mango.local.h1"), Interrupts: reg,
		Resources: &sessionfiles.Materializer{Memory: mem}}
	res := runTurn(t, a, session.RunTurnInput{SessionID: "sesn_1"})
	if res.Outcome != session.TurnInterrupted {
		t.Fatalf("outcome %s, want %s", res.Outcome, session.TurnInterrupted)
	}
	mem.mu.Lock()
	notes := maps.Clone(mem.stores["sesrsc_notes"].memories)
	mem.mu.Unlock()
	if want := map[string]string{"before.md": "written before the interrupt"}; !maps.Equal(notes, want) {
		t.Errorf("notes store = %q, want %q", notes, want)
	}
}
