package sessionfiles_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
	"github.com/mangohq/mango/internal/testenv"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

const (
	memSession  = "sesn_mem"
	memResource = "sesrsc_mem"
	// memMount is where the tests mount the store.
	memMount = sandbox.MemoryDir + "/notes"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// fakeMemory serves SessionMemory for one memory_store resource as the
// brief's base rule decides: memories by path, the base by path, and the
// versions written (one line per applied change).
type fakeMemory struct {
	pb.UnimplementedSessionMemoryServer

	mu       sync.Mutex
	access   string
	memories map[string]string
	base     map[string]string
	versions []string
	syncs    int
	// loseNext: the next sync is applied, then its response is lost (the
	// call fails with UNAVAILABLE).
	loseNext bool
}

func (f *fakeMemory) header() *pb.MemoryStoreHeader {
	return &pb.MemoryStoreHeader{MemoryStoreId: "memstore_x", Name: "notes", Access: f.access, MountPath: memMount}
}

func (f *fakeMemory) ReadMemoryStore(req *pb.ReadMemoryStoreRequest, stream grpc.ServerStreamingServer[pb.ReadMemoryStoreResponse]) error {
	f.mu.Lock()
	if req.GetResourceId() != memResource {
		f.mu.Unlock()
		return status.Errorf(codes.NotFound, "no memory_store resource %s", req.GetResourceId())
	}
	msgs := []*pb.ReadMemoryStoreResponse{{Header: f.header()}}
	f.base = map[string]string{}
	for _, p := range slices.Sorted(maps.Keys(f.memories)) {
		c := f.memories[p]
		f.base[p] = sha(c)
		msgs = append(msgs, &pb.ReadMemoryStoreResponse{Memory: &pb.MemoryFile{Path: p, Content: []byte(c), ContentSha256: sha(c)}})
	}
	f.mu.Unlock()
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeMemory) GetMemoryBase(_ context.Context, req *pb.GetMemoryBaseRequest) (*pb.GetMemoryBaseResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetResourceId() != memResource {
		return nil, status.Errorf(codes.NotFound, "no memory_store resource %s", req.GetResourceId())
	}
	out := &pb.GetMemoryBaseResponse{Header: f.header()}
	for _, p := range slices.Sorted(maps.Keys(f.base)) {
		out.Entries = append(out.Entries, &pb.MemoryBaseEntry{Path: p, ContentSha256: f.base[p]})
	}
	return out, nil
}

func (f *fakeMemory) SyncMemoryStore(stream grpc.ClientStreamingServer[pb.SyncMemoryStoreRequest, pb.SyncMemoryStoreResponse]) error {
	var changes []*pb.MemoryChange
	for first := true; ; first = false {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if first {
			if msg.GetHeader().GetSessionId() != memSession || msg.GetHeader().GetResourceId() != memResource {
				return status.Errorf(codes.InvalidArgument, "header %v", msg.GetHeader())
			}
			continue
		}
		changes = append(changes, msg.GetChange())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncs++
	out := &pb.SyncMemoryStoreResponse{}
	for _, c := range changes {
		out.Results = append(out.Results, f.apply(c))
	}
	if f.loseNext {
		f.loseNext = false
		return status.Error(codes.Unavailable, "connection lost after the sync was applied")
	}
	return stream.SendAndClose(out)
}

// apply decides one change; f.mu is held.
func (f *fakeMemory) apply(c *pb.MemoryChange) *pb.MemoryChangeResult {
	res := &pb.MemoryChangeResult{Path: c.GetPath()}
	cur, exists := f.memories[c.GetPath()]
	curSHA := ""
	if exists {
		curSHA = sha(cur)
	}
	switch {
	case f.access == sessionfiles.MemoryReadOnly:
		res.Outcome, res.Reason = pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_REFUSED, "the store is read_only"
	case c.GetDeleted() && !exists, !c.GetDeleted() && curSHA == c.GetContentSha256():
		res.Outcome = pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_UNCHANGED
		f.setBase(c.GetPath(), c.GetContentSha256())
	case curSHA == c.GetBaseSha256():
		res.Outcome = pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_APPLIED
		if c.GetDeleted() {
			delete(f.memories, c.GetPath())
			f.versions = append(f.versions, "deleted "+c.GetPath())
		} else {
			f.memories[c.GetPath()] = string(c.GetContent())
			f.versions = append(f.versions, fmt.Sprintf("wrote %s %q", c.GetPath(), c.GetContent()))
		}
		f.setBase(c.GetPath(), c.GetContentSha256())
	default:
		res.Outcome = pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_CONFLICT
		if !c.GetDeleted() {
			ext := path.Ext(c.GetPath())
			res.ConflictPath = strings.TrimSuffix(c.GetPath(), ext) + ".conflict-" + memSession + ext
			f.memories[res.ConflictPath] = string(c.GetContent())
			f.versions = append(f.versions, fmt.Sprintf("wrote %s %q", res.ConflictPath, c.GetContent()))
		}
		f.setBase(c.GetPath(), curSHA)
	}
	return res
}

func (f *fakeMemory) setBase(p, s string) {
	if s == "" {
		delete(f.base, p)
	} else {
		f.base[p] = s
	}
}

// syncCount returns how many SyncMemoryStore calls were served.
func (f *fakeMemory) syncCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs
}

// state returns the memories and versions written.
func (f *fakeMemory) state() (map[string]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.memories), slices.Clone(f.versions)
}

// memEnv is a Materializer whose api-server serves SessionResources and
// SessionMemory from fakes on an in-process gRPC connection, and a local
// sandbox.
type memEnv struct {
	res *fakeResources
	mem *fakeMemory
	m   *sessionfiles.Materializer
	sb  sandbox.Sandbox
	ft  sandbox.FileTransfer
	p   *sandboxlocal.Provider
}

func newMemEnv(t *testing.T, access string, memories map[string]string) *memEnv {
	t.Helper()
	res := &fakeResources{archives: map[string][]byte{}, calls: map[string]int{}, resources: []*pb.SessionResource{{
		Id: memResource, Type: sessionfiles.MemoryStoreType, MountPath: memMount, Version: 1,
		MemoryStoreId: "memstore_x", MemoryAccess: access, MemoryStoreName: "notes",
	}}}
	mem := &fakeMemory{access: access, memories: memories, base: map[string]string{}}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	pb.RegisterSessionResourcesServer(srv, res)
	pb.RegisterSessionMemoryServer(srv, mem)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), Installation: "memory-test"})
	if err != nil {
		t.Fatal(err)
	}
	sb, _, err := p.Create(t.Context(), memSession, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	e := &memEnv{res: res, mem: mem, sb: sb, ft: sb.(sandbox.FileTransfer), p: p}
	e.m = e.materializer(conn)
	return e
}

// materializer is a new Materializer on conn (a new worker process).
func (e *memEnv) materializer(conn *grpc.ClientConn) *sessionfiles.Materializer {
	return &sessionfiles.Materializer{Resources: pb.NewSessionResourcesClient(conn), Memory: pb.NewSessionMemoryClient(conn)}
}

func (e *memEnv) materialize(t *testing.T) {
	t.Helper()
	if err := e.m.Materialize(t.Context(), memSession, e.sb); err != nil {
		t.Fatalf("Materialize = %v, want no error", err)
	}
}

func (e *memEnv) sync(t *testing.T) {
	t.Helper()
	if err := e.m.SyncMemory(t.Context(), memSession, e.sb, nil); err != nil {
		t.Fatalf("SyncMemory = %v, want no error", err)
	}
}

// mount returns the files of the mount, by path relative to it.
func (e *memEnv) mount(t *testing.T) map[string]string {
	t.Helper()
	files, err := e.ft.ListFiles(t.Context(), memMount)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		out[strings.TrimPrefix(f.Path, memMount+"/")] = e.read(t, f.Path)
	}
	return out
}

func (e *memEnv) read(t *testing.T, p string) string {
	t.Helper()
	data, err := e.sb.ReadFile(t.Context(), p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(data)
}

// write is the agent writing a file of the mount (modes as the file
// tools leave them).
func (e *memEnv) write(t *testing.T, rel, content string) {
	t.Helper()
	if err := e.ft.PutFile(t.Context(), path.Join(memMount, rel), strings.NewReader(content), int64(len(content)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *memEnv) remove(t *testing.T, rel string) {
	t.Helper()
	if err := e.ft.RemoveAll(t.Context(), path.Join(memMount, rel)); err != nil {
		t.Fatal(err)
	}
}

// mode is the permission bits of the mount's file rel on the host.
func (e *memEnv) mode(t *testing.T, rel string) os.FileMode {
	t.Helper()
	ep, ok := e.sb.(interface{ ExecPath(string) string })
	if !ok {
		t.Fatal("the local sandbox has no ExecPath")
	}
	fi, err := os.Stat(ep.ExecPath(path.Join(memMount, rel)))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func checkMap(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

// A memory store is placed at its mount with the store's memories,
// writable (0644) when read_write; the resource is recorded materialized.
func TestMemoryPlaced(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"notes.md": "n1\n", "projects/a.md": "a1\n"})
	e.materialize(t)
	checkMap(t, "the mount", e.mount(t), map[string]string{"notes.md": "n1\n", "projects/a.md": "a1\n"})
	if m := e.mode(t, "projects/a.md"); m != 0o644 {
		t.Errorf("projects/a.md has mode %v, want 0644", m)
	}
	if n := e.res.count("mark"); n != 1 {
		t.Errorf("%d MarkResourceMaterialized calls, want 1", n)
	}
	// Placed again next turn (whatever materialized_version says), not
	// marked again.
	e.mem.mu.Lock()
	e.mem.memories["api.md"] = "written through the API\n"
	e.mem.mu.Unlock()
	e.materialize(t)
	checkMap(t, "the mount after the next turn's placement", e.mount(t),
		map[string]string{"notes.md": "n1\n", "projects/a.md": "a1\n", "api.md": "written through the API\n"})
	if n := e.res.count("mark"); n != 1 {
		t.Errorf("%d MarkResourceMaterialized calls after two placements, want 1", n)
	}
	// An empty store is an empty directory.
	e2 := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{})
	e2.materialize(t)
	fi, err := os.Stat(e2.sb.(interface{ ExecPath(string) string }).ExecPath(memMount))
	if err != nil || !fi.IsDir() {
		t.Errorf("the mount of an empty store is not a directory: %v", err)
	}
}

// What the agent created, modified and deleted under the mount is synced
// at the turn's end: one version per change, the base following.
func TestMemoryAgentEditsSynced(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"notes.md": "n1\n", "projects/a.md": "a1\n"})
	e.materialize(t)
	e.write(t, "notes.md", "n2\n")
	e.write(t, "new/b.md", "b1\n")
	e.remove(t, "projects/a.md")
	e.sync(t)
	mems, versions := e.mem.state()
	checkMap(t, "the store", mems, map[string]string{"notes.md": "n2\n", "new/b.md": "b1\n"})
	want := []string{`wrote new/b.md "b1\n"`, `wrote notes.md "n2\n"`, "deleted projects/a.md"}
	if !slices.Equal(versions, want) {
		t.Errorf("versions %q, want %q", versions, want)
	}
	// Nothing changed since: a second sync sends nothing.
	e.sync(t)
	if n := e.mem.syncCount(); n != 1 {
		t.Errorf("%d SyncMemoryStore calls, want 1 (the second sync had nothing to send)", n)
	}
}

// A sync whose response was lost fails (the attempt is retried); the
// retry finds everything applied and writes no second version.
func TestMemorySyncRetriedAfterLostResponse(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"notes.md": "n1\n"})
	e.materialize(t)
	e.write(t, "notes.md", "n2\n")
	e.mem.mu.Lock()
	e.mem.loseNext = true
	e.mem.mu.Unlock()
	err := e.m.SyncMemory(t.Context(), memSession, e.sb, nil)
	if err == nil || !strings.Contains(err.Error(), "connection lost") {
		t.Fatalf("SyncMemory with its response lost = %v, want the transport error", err)
	}
	// The retried attempt syncs again (the api-server reports the change
	// UNCHANGED if its base had not followed), then places.
	e.sync(t)
	e.materialize(t)
	mems, versions := e.mem.state()
	checkMap(t, "the store", mems, map[string]string{"notes.md": "n2\n"})
	if want := []string{`wrote notes.md "n2\n"`}; !slices.Equal(versions, want) {
		t.Errorf("versions %q, want %q (one)", versions, want)
	}
	// The api-server's base did not follow (its transaction committed the
	// version but the worker re-sends): UNCHANGED, still one version.
	e.mem.mu.Lock()
	e.mem.base["notes.md"] = sha("n1\n")
	e.mem.mu.Unlock()
	e.sync(t)
	if _, versions := e.mem.state(); len(versions) != 1 {
		t.Errorf("versions %q after a resent change, want one", versions)
	}
}

// A memory edited through the API since the placement keeps the API's
// content; the agent's is saved at the conflict path, and the mount is
// placed again so the sandbox holds what the store kept. The next
// placement's sync does not send the agent's old content again.
func TestMemoryConflict(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"notes.md": "n1\n"})
	e.materialize(t)
	e.mem.mu.Lock()
	e.mem.memories["notes.md"] = "edited through the API\n"
	e.mem.mu.Unlock()
	e.write(t, "notes.md", "the agent's\n")
	e.sync(t)
	wantStore := map[string]string{"notes.md": "edited through the API\n", "notes.conflict-sesn_mem.md": "the agent's\n"}
	mems, _ := e.mem.state()
	checkMap(t, "the store", mems, wantStore)
	checkMap(t, "the mount after the conflict", e.mount(t), wantStore)
	e.materialize(t)
	mems, versions := e.mem.state()
	checkMap(t, "the store after the next placement", mems, wantStore)
	if len(versions) != 1 {
		t.Errorf("versions %q, want only the conflict copy", versions)
	}
}

// A read_only store is placed 0444; changes made anyway (bash) are
// refused by the api-server, logged, never an error, and undone at the
// next placement.
func TestMemoryReadOnly(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadOnly, map[string]string{"notes.md": "n1\n"})
	e.materialize(t)
	if m := e.mode(t, "notes.md"); m != 0o444 {
		t.Errorf("notes.md of a read_only store has mode %v, want 0444", m)
	}
	e.remove(t, "notes.md")
	e.write(t, "bash.md", "made by bash\n")
	e.sync(t)
	mems, versions := e.mem.state()
	checkMap(t, "the store", mems, map[string]string{"notes.md": "n1\n"})
	if len(versions) != 0 {
		t.Errorf("versions %q, want none", versions)
	}
	e.materialize(t)
	checkMap(t, "the mount after the next placement", e.mount(t), map[string]string{"notes.md": "n1\n"})
}

// Changes a previous attempt left in the sandbox (it crashed before its
// turn-end sync) are synced by the next placement, in a new worker
// process, before the mount is replaced.
func TestMemoryCrashRecovery(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"notes.md": "n1\n", "old.md": "o\n"})
	e.materialize(t)
	e.write(t, "notes.md", "n2\n")
	e.remove(t, "old.md")
	// A new process (no memory of the previous one).
	restarted := &sessionfiles.Materializer{Resources: e.m.Resources, Memory: e.m.Memory}
	if err := restarted.Materialize(t.Context(), memSession, e.sb); err != nil {
		t.Fatalf("Materialize after a crash = %v", err)
	}
	mems, _ := e.mem.state()
	checkMap(t, "the store", mems, map[string]string{"notes.md": "n2\n"})
	checkMap(t, "the mount", e.mount(t), map[string]string{"notes.md": "n2\n"})
}

// A mount without a complete placement (a new sandbox after the old one
// vanished, or a placement cut short) is never synced: the store's
// memories are not taken for deleted.
func TestMemoryNewSandboxNotSynced(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"notes.md": "n1\n"})
	e.materialize(t)
	// The sandbox is replaced by an empty one.
	sb2, _, err := e.p.Create(t.Context(), "sesn_mem_2", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.SyncMemory(t.Context(), memSession, sb2, nil); err != nil {
		t.Fatalf("SyncMemory of a new sandbox = %v", err)
	}
	if err := e.m.Materialize(t.Context(), memSession, sb2); err != nil {
		t.Fatalf("Materialize of a new sandbox = %v", err)
	}
	mems, versions := e.mem.state()
	checkMap(t, "the store", mems, map[string]string{"notes.md": "n1\n"})
	if len(versions) != 0 {
		t.Errorf("versions %q, want none", versions)
	}
}

// Files the store cannot hold (over 100 kB, not UTF-8) are not sent,
// and are not taken for deletions.
func TestMemorySkipsUnsyncableFiles(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"big.md": "small\n"})
	e.materialize(t)
	e.write(t, "big.md", strings.Repeat("x", sessionfiles.MaxMemoryBytes+1))
	e.write(t, "bin.dat", string([]byte{0xff, 0xfe, 0x00}))
	e.write(t, "ok.md", "fine\n")
	e.sync(t)
	mems, _ := e.mem.state()
	checkMap(t, "the store", mems, map[string]string{"big.md": "small\n", "ok.md": "fine\n"})
}

// A store gone since it was attached is a ResourceError at placement,
// and skipped by the turn-end sync.
func TestMemoryStoreGone(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{})
	e.res.mu.Lock()
	e.res.resources[0].Id = "sesrsc_gone"
	e.res.mu.Unlock()
	err := e.m.Materialize(t.Context(), memSession, e.sb)
	var re *sessionfiles.ResourceError
	if !errors.As(err, &re) || re.ResourceID != "sesrsc_gone" {
		t.Errorf("Materialize of a gone store = %v, want a ResourceError naming sesrsc_gone", err)
	}
	e.sync(t)
}

// A mount path the sandbox refuses is a ResourceError naming it.
func TestMemoryMountRefused(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"a.md": "a\n"})
	e.res.mu.Lock()
	e.res.resources[0].MountPath = "/elsewhere/notes"
	e.res.mu.Unlock()
	err := e.m.Materialize(t.Context(), memSession, e.sb)
	var re *sessionfiles.ResourceError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "/elsewhere/notes") {
		t.Errorf("Materialize with mount path /elsewhere/notes = %v, want a ResourceError naming it", err)
	}
}

// The agent's shell sees the placed store at its mount path, and what it
// writes there is synced.
func TestMemoryShellEditsSynced(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"notes.md": "n1\n"})
	e.materialize(t)
	if !sandboxlocal.SessionPathsVisible(e.p) {
		testenv.Unavailable(t, "this host gives no private mount namespace (%s); the shell does not see %s", sandboxlocal.SessionPathsUnavailable(e.p), sandbox.MemoryDir)
	}
	cmd := "cat " + memMount + "/notes.md && echo from-bash >> " + memMount + "/notes.md && echo new > " + memMount + "/bash.md"
	res, err := e.sb.(sandbox.Shell).ShellExec(t.Context(), sandbox.ExecRequest{Command: cmd})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "n1\n" {
		t.Fatalf("%q = %v, exit %v, stdout %q, stderr %q; want exit 0 and n1", cmd, err, res.ExitCode, res.Stdout, res.Stderr)
	}
	e.sync(t)
	mems, _ := e.mem.state()
	checkMap(t, "the store", mems, map[string]string{"notes.md": "n1\nfrom-bash\n", "bash.md": "new\n"})
}

// A deleted memory_store resource is removed from the sandbox with its
// placement marker, without a sync (the api-server no longer knows it).
func TestMemoryResourceDeleted(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"notes.md": "n1\n"})
	e.materialize(t)
	e.write(t, "unsynced.md", "left behind\n")
	e.res.mu.Lock()
	e.res.resources[0].Deleted, e.res.resources[0].Version = true, 2
	e.res.mu.Unlock()
	e.materialize(t)
	if got := e.mount(t); len(got) != 0 {
		t.Errorf("the mount of a deleted resource holds %q, want nothing", got)
	}
	if files, err := e.ft.ListFiles(t.Context(), sessionfiles.MemoryStateDir); err != nil || len(files) != 0 {
		t.Errorf("placement markers %v, %v; want none", files, err)
	}
	if n := e.mem.syncCount(); n != 0 {
		t.Errorf("%d SyncMemoryStore calls, want 0", n)
	}
}

// A store over the bounds a placement accepts is a ResourceError, and
// nothing of it is placed.
func TestMemoryStoreTooLarge(t *testing.T) {
	t.Parallel()
	memories := map[string]string{}
	for i := range 10_001 {
		memories[fmt.Sprintf("m%05d.md", i)] = "x"
	}
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, memories)
	err := e.m.Materialize(t.Context(), memSession, e.sb)
	var re *sessionfiles.ResourceError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "more than 10000 memories") {
		t.Errorf("Materialize of a store of 10001 memories = %v, want a ResourceError saying it holds more than 10000", err)
	}
	if got := e.mount(t); len(got) != 0 {
		t.Errorf("the mount holds %d files, want none", len(got))
	}
}

// More changes than one SyncMemoryStore call carries are sent in several.
func TestMemorySyncBatches(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{})
	e.materialize(t)
	tree := fstest.MapFS{}
	for i := range 2500 {
		tree[fmt.Sprintf("m%04d.md", i)] = &fstest.MapFile{Data: []byte("x"), Mode: 0o644}
	}
	if err := sandbox.PutTree(t.Context(), e.ft, memMount, tree); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
	mems, _ := e.mem.state()
	if len(mems) != 2500 {
		t.Errorf("the store holds %d memories, want 2500", len(mems))
	}
	if n := e.mem.syncCount(); n != 3 {
		t.Errorf("%d SyncMemoryStore calls, want 3 (batches of 1000)", n)
	}
}

// reverseTree is a sandbox whose [sandbox.TreeGetter] walks a directory in
// reverse path order, to check that a sync does not depend on the order
// of a provider's walk.
type reverseTree struct {
	sandbox.Sandbox
	sandbox.FileTransfer
	walks atomic.Int32
}

func (r *reverseTree) GetTree(ctx context.Context, dir string, fn sandbox.WalkFilesFunc) error {
	r.walks.Add(1)
	files, err := r.ListFiles(ctx, dir)
	if err != nil {
		return err
	}
	for _, f := range slices.Backward(files) {
		rc, size, err := r.GetFile(ctx, f.Path)
		if err != nil {
			return err
		}
		err = fn(f.Path, size, rc)
		_ = rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// A sandbox offering a TreeGetter is read through it, and what is synced
// is the same: changes, deletions, and files the store cannot hold
// skipped (not taken for deletions).
func TestMemorySyncThroughTreeGetter(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t, sessionfiles.MemoryReadWrite, map[string]string{"big.md": "small\n", "gone.md": "g\n", "keep.md": "k\n"})
	rt := &reverseTree{Sandbox: e.sb, FileTransfer: e.ft}
	e.sb, e.ft = rt, rt
	e.materialize(t)
	e.write(t, "big.md", strings.Repeat("x", sessionfiles.MaxMemoryBytes+1))
	e.write(t, "bin.dat", string([]byte{0xff, 0xfe, 0x00}))
	e.write(t, "dir/new.md", "new\n")
	e.write(t, "empty.md", "")
	e.remove(t, "gone.md")
	e.sync(t)
	mems, _ := e.mem.state()
	checkMap(t, "the store", mems, map[string]string{"big.md": "small\n", "keep.md": "k\n", "dir/new.md": "new\n", "empty.md": ""})
	if got := rt.walks.Load(); got != 1 {
		t.Errorf("GetTree was called %d times, want 1 (the turn-end sync; the first placement has nothing to sync)", got)
	}
}
