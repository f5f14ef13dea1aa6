package controlplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/mangohq/mango/api-server/internal/controlplane"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// memoryEnv is a ControlPlane with a memory store holding two memories and
// a session that attaches it twice (read_write at /mnt/memory/notes,
// read_only at /mnt/memory/notes-2) beside a repository.
type memoryEnv struct {
	*env
	mem     pb.SessionMemoryClient
	res     pb.SessionResourcesClient
	storeID string
	sid     string
	api     db.Actor
}

func newMemoryEnv(t *testing.T) *memoryEnv {
	t.Helper()
	e := &env{store: dbtest.Store(t), reg: prometheus.NewRegistry(), clock: newClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	conn := dial(t, controlplane.Deps{Store: e.store, Token: token, Registry: e.reg, Now: e.clock.now})
	e.client = pb.NewControlPlaneClient(conn)
	m := &memoryEnv{env: e, mem: pb.NewSessionMemoryClient(conn), res: pb.NewSessionResourcesClient(conn),
		storeID: ids.New(ids.MemoryStore), sid: ids.New(ids.Session), api: db.Actor{Type: db.ActorAPI, ID: "apikey_test"}}
	ctx := context.Background()
	now := e.clock.now()
	if err := e.store.MemoryStoreCreate(ctx, &db.MemoryStore{ID: m.storeID, Name: "Notes", Description: "What we learned.", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	for p, content := range map[string]string{"/notes.md": "n1", "/projects/a.md": "a1"} {
		if _, err := e.store.MemoryCreate(ctx, m.storeID, p, content, m.api, now); err != nil {
			t.Fatal(err)
		}
	}
	memRes := func(id, access, mount, instructions string) db.ResourceCreate {
		return db.ResourceCreate{ID: id, Type: db.ResourceMemoryStore, MountPath: mount, MemoryStoreID: m.storeID, Access: access,
			Instructions: instructions, StoreName: "Notes", StoreDescription: "What we learned."}
	}
	if _, _, err := e.store.SessionCreate(ctx, db.SessionCreateParams{ID: m.sid, AgentID: ids.New(ids.Agent), AgentVersion: 1,
		Provider: "local", Now: now, Agent: json.RawMessage(`{"name":"a","model":{"id":"m"}}`),
		Resources: []db.ResourceCreate{
			{ID: "sesrsc_repo", Type: db.ResourceRepository, MountPath: "/workspace/r", URL: "https://example.com/r.git"},
			memRes("sesrsc_mrw", db.AccessReadWrite, "/mnt/memory/notes", "Keep it short."),
			memRes("sesrsc_mro", db.AccessReadOnly, "/mnt/memory/notes-2", ""),
		}}, nil); err != nil {
		t.Fatal(err)
	}
	return m
}

// read reads a memory_store resource through ReadMemoryStore.
func (m *memoryEnv) read(ctx context.Context, sid, rid string) (*pb.MemoryStoreHeader, []*pb.MemoryFile, error) {
	stream, err := m.mem.ReadMemoryStore(ctx, &pb.ReadMemoryStoreRequest{SessionId: sid, ResourceId: rid})
	if err != nil {
		return nil, nil, err
	}
	var header *pb.MemoryStoreHeader
	var files []*pb.MemoryFile
	for i := 0; ; i++ {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return header, files, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if i == 0 {
			header = msg.GetHeader()
			continue
		}
		files = append(files, msg.GetMemory())
	}
}

// sync sends changes through SyncMemoryStore (with the header of sid and
// rid unless header is false).
func (m *memoryEnv) sync(ctx context.Context, sid, rid string, header bool, changes ...*pb.MemoryChange) ([]*pb.MemoryChangeResult, error) {
	stream, err := m.mem.SyncMemoryStore(ctx)
	if err != nil {
		return nil, err
	}
	var reqs []*pb.SyncMemoryStoreRequest
	if header {
		reqs = append(reqs, &pb.SyncMemoryStoreRequest{Header: &pb.ReadMemoryStoreRequest{SessionId: sid, ResourceId: rid}})
	}
	for _, c := range changes {
		reqs = append(reqs, &pb.SyncMemoryStoreRequest{Change: c})
	}
	for _, r := range reqs {
		// io.EOF: the server ended the stream (a refusal); its status
		// comes from CloseAndRecv.
		if err := stream.Send(r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
	}
	resp, err := stream.CloseAndRecv()
	return resp.GetResults(), err
}

// content returns the store's memories by wire path.
func (m *memoryEnv) content(t *testing.T) map[string]string {
	t.Helper()
	items, _, err := m.store.MemoryList(context.Background(), db.MemoryListParams{StoreID: m.storeID, Limit: 100, WithContent: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, it := range items {
		out[it.Memory.Path] = it.Memory.Content
	}
	return out
}

// memoryID returns the id of the store's memory at wire path p.
func (m *memoryEnv) memoryID(t *testing.T, p string) string {
	t.Helper()
	items, _, err := m.store.MemoryList(context.Background(), db.MemoryListParams{StoreID: m.storeID, Limit: 100, WithContent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Memory != nil && it.Memory.Path == p {
			return it.Memory.ID
		}
	}
	t.Fatalf("no memory at %s", p)
	return ""
}

func sha(s string) string { return db.ContentSHA256([]byte(s)) }

func modify(path, content, base string) *pb.MemoryChange {
	return &pb.MemoryChange{Path: path, Content: []byte(content), ContentSha256: sha(content), BaseSha256: base}
}

// TestMemoryResourcesReachWorkers: a memory_store resource reaches workers
// with its store, access, instructions, name, description and mount path
// (ListSessionResources and the turn context).
func TestMemoryResourcesReachWorkers(t *testing.T) {
	t.Parallel()
	m := newMemoryEnv(t)
	ctx := authed(context.Background())
	list, err := m.res.ListSessionResources(ctx, &pb.ListSessionResourcesRequest{SessionId: m.sid})
	if err != nil || len(list.GetResources()) != 3 {
		t.Fatalf("list = %v, %v; want the repository and two memory stores", list, err)
	}
	run, err := m.client.GetRun(ctx, &pb.GetRunRequest{SessionId: m.sid, WithTurnContext: true})
	if err != nil || len(run.GetTurnContext().GetResources()) != 3 {
		t.Fatalf("turn context = %v, %v; want three resources", run.GetTurnContext(), err)
	}
	for where, rs := range map[string][]*pb.SessionResource{"ListSessionResources": list.GetResources(), "turn context": run.GetTurnContext().GetResources()} {
		rw, ro := rs[1], rs[2]
		if rw.GetId() != "sesrsc_mrw" || rw.GetType() != "memory_store" || rw.GetMountPath() != "/mnt/memory/notes" ||
			rw.GetMemoryStoreId() != m.storeID || rw.GetMemoryAccess() != "read_write" || rw.GetMemoryInstructions() != "Keep it short." ||
			rw.GetMemoryStoreName() != "Notes" || rw.GetMemoryStoreDescription() != "What we learned." {
			t.Errorf("%s: read_write resource = %v", where, rw)
		}
		if ro.GetId() != "sesrsc_mro" || ro.GetMountPath() != "/mnt/memory/notes-2" || ro.GetMemoryAccess() != "read_only" ||
			ro.GetMemoryInstructions() != "" || ro.GetMemoryStoreId() != m.storeID {
			t.Errorf("%s: read_only resource = %v", where, ro)
		}
		if rs[0].GetMemoryStoreId() != "" || rs[0].GetMemoryAccess() != "" {
			t.Errorf("%s: the repository carries memory fields: %v", where, rs[0])
		}
	}
}

// TestReadMemoryStoreRecordsBase: ReadMemoryStore streams the header then
// each memory (paths relative to the root, content and SHA-256), and the
// memories read become the base GetMemoryBase returns; a resource never
// read has an empty base.
func TestReadMemoryStoreRecordsBase(t *testing.T) {
	t.Parallel()
	m := newMemoryEnv(t)
	ctx := authed(context.Background())
	base, err := m.mem.GetMemoryBase(ctx, &pb.GetMemoryBaseRequest{SessionId: m.sid, ResourceId: "sesrsc_mrw"})
	if err != nil || len(base.GetEntries()) != 0 || base.GetHeader().GetMemoryStoreId() != m.storeID {
		t.Fatalf("base before placement = %v, %v; want the header and no entries", base, err)
	}
	h, files, err := m.read(ctx, m.sid, "sesrsc_mrw")
	if err != nil {
		t.Fatal(err)
	}
	if h.GetMemoryStoreId() != m.storeID || h.GetName() != "Notes" || h.GetAccess() != "read_write" || h.GetMountPath() != "/mnt/memory/notes" {
		t.Errorf("header = %v", h)
	}
	got := map[string]string{}
	for _, f := range files {
		if f.GetContentSha256() != sha(string(f.GetContent())) {
			t.Errorf("memory %s: sha %s does not match its content", f.GetPath(), f.GetContentSha256())
		}
		got[f.GetPath()] = string(f.GetContent())
	}
	if len(got) != 2 || got["notes.md"] != "n1" || got["projects/a.md"] != "a1" {
		t.Errorf("memories read = %v; want notes.md=n1 and projects/a.md=a1", got)
	}
	base, err = m.mem.GetMemoryBase(ctx, &pb.GetMemoryBaseRequest{SessionId: m.sid, ResourceId: "sesrsc_mrw"})
	if err != nil {
		t.Fatal(err)
	}
	entries := base.GetEntries()
	if len(entries) != 2 || entries[0].GetPath() != "notes.md" || entries[0].GetContentSha256() != sha("n1") ||
		entries[1].GetPath() != "projects/a.md" || entries[1].GetContentSha256() != sha("a1") {
		t.Errorf("base after placement = %v; want notes.md and projects/a.md with their SHA-256, by path", entries)
	}
	other, err := m.mem.GetMemoryBase(ctx, &pb.GetMemoryBaseRequest{SessionId: m.sid, ResourceId: "sesrsc_mro"})
	if err != nil || len(other.GetEntries()) != 0 || other.GetHeader().GetAccess() != "read_only" {
		t.Errorf("base of the other resource = %v, %v; want read_only and empty", other, err)
	}
}

// TestSyncMemoryStore: changes against the base are applied (a new
// version by the session) and reported in order; the same sync again is
// unchanged; a change over an API edit is a conflict whose content lands
// at the conflict path; a read_only resource is refused.
func TestSyncMemoryStore(t *testing.T) {
	t.Parallel()
	m := newMemoryEnv(t)
	ctx := authed(context.Background())
	if _, _, err := m.read(ctx, m.sid, "sesrsc_mrw"); err != nil {
		t.Fatal(err)
	}
	changes := []*pb.MemoryChange{modify("notes.md", "n2", sha("n1")), modify("new.md", "fresh", ""),
		{Path: "projects/a.md", Deleted: true, BaseSha256: sha("a1")}}
	res, err := m.sync(ctx, m.sid, "sesrsc_mrw", true, changes...)
	wantOutcomes(t, "first sync", res, err, changes, pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_APPLIED)
	if got := m.content(t); len(got) != 2 || got["/notes.md"] != "n2" || got["/new.md"] != "fresh" {
		t.Errorf("memories after the sync = %v; want /notes.md=n2 and /new.md=fresh", got)
	}
	if n := m.count(t, `SELECT count(*) FROM memory_versions WHERE store_id = $1 AND actor_type = 'session_actor' AND actor_id = $2`, m.storeID, m.sid); n != 3 {
		t.Errorf("versions by the session = %d, want 3", n)
	}
	res, err = m.sync(ctx, m.sid, "sesrsc_mrw", true, changes...)
	wantOutcomes(t, "retried sync", res, err, changes, pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_UNCHANGED)

	api := "by the API"
	if _, err := m.store.MemoryUpdateApply(context.Background(), m.storeID, m.memoryID(t, "/notes.md"), db.MemoryUpdate{Content: &api}, m.api, m.clock.now()); err != nil {
		t.Fatal(err)
	}
	conflict := modify("notes.md", "n3", sha("n2"))
	res, err = m.sync(ctx, m.sid, "sesrsc_mrw", true, conflict)
	wantOutcomes(t, "sync over an API edit", res, err, []*pb.MemoryChange{conflict}, pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_CONFLICT)
	wantConflict := "notes.conflict-" + m.sid + ".md"
	if len(res) == 1 && res[0].GetConflictPath() != wantConflict {
		t.Errorf("conflict path = %q, want %q", res[0].GetConflictPath(), wantConflict)
	}
	if got := m.content(t); got["/notes.md"] != api || got["/"+wantConflict] != "n3" {
		t.Errorf("memories after the conflict = %v; want the API's /notes.md and the agent's content at /%s", got, wantConflict)
	}

	ro := modify("notes.md", "from read-only", "")
	res, err = m.sync(ctx, m.sid, "sesrsc_mro", true, ro)
	wantOutcomes(t, "sync of a read_only resource", res, err, []*pb.MemoryChange{ro}, pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_REFUSED)
	if len(res) == 1 && res[0].GetReason() == "" {
		t.Error("a refused change has no reason")
	}
	if got := m.content(t); got["/notes.md"] != api {
		t.Errorf("/notes.md after the refused sync = %q, want %q", got["/notes.md"], api)
	}
}

func wantOutcomes(t *testing.T, what string, res []*pb.MemoryChangeResult, err error, changes []*pb.MemoryChange, want pb.MemoryChangeOutcome) {
	t.Helper()
	if err != nil || len(res) != len(changes) {
		t.Fatalf("%s = %v, %v; want %d results", what, res, err, len(changes))
	}
	for i, r := range res {
		if r.GetPath() != changes[i].GetPath() || r.GetOutcome() != want {
			t.Errorf("%s: result %d = %v; want %s %v", what, i, r, changes[i].GetPath(), want)
		}
	}
}

// TestSessionMemoryRefusals: NOT_FOUND for a resource that is not a live
// memory_store resource of the session, or whose store was deleted;
// INVALID_ARGUMENT for a missing field, a stream without its header, an
// empty path or a content that does not match its SHA-256.
func TestSessionMemoryRefusals(t *testing.T) {
	t.Parallel()
	m := newMemoryEnv(t)
	ctx := authed(context.Background())
	for what, pair := range map[string][2]string{"a repository": {m.sid, "sesrsc_repo"}, "an unknown resource": {m.sid, "sesrsc_none"},
		"another session": {ids.New(ids.Session), "sesrsc_mrw"}} {
		_, _, err := m.read(ctx, pair[0], pair[1])
		wantCode(t, "read "+what, err, codes.NotFound)
		_, err = m.mem.GetMemoryBase(ctx, &pb.GetMemoryBaseRequest{SessionId: pair[0], ResourceId: pair[1]})
		wantCode(t, "base of "+what, err, codes.NotFound)
		_, err = m.sync(ctx, pair[0], pair[1], true, modify("x.md", "x", ""))
		wantCode(t, "sync "+what, err, codes.NotFound)
	}
	_, _, err := m.read(ctx, m.sid, "")
	wantCode(t, "read without resource_id", err, codes.InvalidArgument)
	_, err = m.sync(ctx, m.sid, "sesrsc_mrw", false, modify("x.md", "x", ""))
	wantCode(t, "sync without a header", err, codes.InvalidArgument)
	_, err = m.sync(ctx, m.sid, "sesrsc_mrw", true, modify("", "x", ""))
	wantCode(t, "sync of an empty path", err, codes.InvalidArgument)
	bad := modify("x.md", "x", "")
	bad.ContentSha256 = sha("y")
	_, err = m.sync(ctx, m.sid, "sesrsc_mrw", true, bad)
	wantCode(t, "sync of a content that does not match its SHA-256", err, codes.InvalidArgument)
	if got := m.content(t); len(got) != 2 {
		t.Errorf("memories after refused syncs = %v; want the two memories untouched", got)
	}

	if err := m.store.MemoryStoreDelete(context.Background(), m.storeID); err != nil {
		t.Fatal(err)
	}
	_, _, err = m.read(ctx, m.sid, "sesrsc_mrw")
	wantCode(t, "read of a deleted store", err, codes.NotFound)
	if err != nil && !strings.Contains(err.Error(), "deleted") {
		t.Errorf("read of a deleted store: %v; want a message saying the store was deleted", err)
	}
	_, err = m.sync(ctx, m.sid, "sesrsc_mrw", true, modify("x.md", "x", ""))
	wantCode(t, "sync of a deleted store", err, codes.NotFound)
}
