package sessionfiles_test

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
	"github.com/mangohq/mango/internal/testenv"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// fakeResources serves SessionResources for one session from memory, as
// the api-server does: the listing with materialized versions, marks,
// and skill archives by resource id (a resource without one is NOT_FOUND).
type fakeResources struct {
	pb.UnimplementedSessionResourcesServer

	mu        sync.Mutex
	resources []*pb.SessionResource
	archives  map[string][]byte
	// announce, when set, replaces the size_bytes of the first message.
	announce int64
	calls    map[string]int
}

func (f *fakeResources) ListSessionResources(context.Context, *pb.ListSessionResourcesRequest) (*pb.ListSessionResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["list"]++
	out := &pb.ListSessionResourcesResponse{}
	for _, r := range f.resources {
		out.Resources = append(out.Resources, proto.CloneOf(r))
	}
	return out, nil
}

func (f *fakeResources) MarkResourceMaterialized(_ context.Context, req *pb.MarkResourceMaterializedRequest) (*pb.MarkResourceMaterializedResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["mark"]++
	for i, r := range f.resources {
		if r.GetId() != req.GetResourceId() {
			continue
		}
		if r.GetDeleted() {
			f.resources = append(f.resources[:i], f.resources[i+1:]...)
		} else {
			r.MaterializedVersion = req.GetVersion()
		}
		return &pb.MarkResourceMaterializedResponse{}, nil
	}
	return nil, status.Errorf(codes.NotFound, "resource %s not found", req.GetResourceId())
}

func (f *fakeResources) ReadSkillVersion(req *pb.ReadSkillVersionRequest, stream grpc.ServerStreamingServer[pb.ReadSkillVersionResponse]) error {
	f.mu.Lock()
	f.calls["read"]++
	data, ok := f.archives[req.GetResourceId()]
	announce := f.announce
	f.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "skill resource %s has no version", req.GetResourceId())
	}
	if announce == 0 {
		announce = int64(len(data))
	}
	const chunk = 1000 // several messages for any real archive
	for first := true; first || len(data) > 0; first = false {
		msg := &pb.ReadSkillVersionResponse{Data: data[:min(chunk, len(data))]}
		if first {
			msg.SizeBytes = announce
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		data = data[len(msg.Data):]
	}
	return nil
}

// count returns how many times method ("list", "mark", "read") was called.
func (f *fakeResources) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// set replaces the skill resource id (version v of it, with archive).
func (f *fakeResources) set(id string, v int64, archive []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.archives[id] = archive
	for _, r := range f.resources {
		if r.GetId() == id {
			r.Version, r.SkillVersionId = v, fmt.Sprintf("skillver_%d", v)
			return
		}
	}
	f.resources = append(f.resources, &pb.SessionResource{
		Id: id, Type: "skill", MountPath: sessionfiles.SkillsDir + "/pdf", Version: v,
		SkillId: "skill_pdf", SkillVersionId: fmt.Sprintf("skillver_%d", v), SkillName: "pdf", SkillDescription: "Reads PDF files.",
	})
}

// skillEnv is a Materializer whose api-server is a fakeResources on an
// in-process gRPC connection, and a local sandbox.
type skillEnv struct {
	fake *fakeResources
	m    *sessionfiles.Materializer
	cli  pb.SessionResourcesClient
	p    *sandboxlocal.Provider
	sb   sandbox.Sandbox
	tmp  string // the Materializer's TempDir
}

func newSkillEnv(t *testing.T) *skillEnv {
	t.Helper()
	fake := &fakeResources{archives: map[string][]byte{}, calls: map[string]int{}}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	pb.RegisterSessionResourcesServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), Installation: "skills-test"})
	if err != nil {
		t.Fatal(err)
	}
	sb, _, err := p.Create(t.Context(), "sesn_skills", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	cli := pb.NewSessionResourcesClient(conn)
	tmp := t.TempDir()
	return &skillEnv{fake: fake, cli: cli, p: p, sb: sb, tmp: tmp,
		m: &sessionfiles.Materializer{Resources: cli, TempDir: tmp}}
}

// materialize runs Materialize and fails the test on an error.
func (e *skillEnv) materialize(t *testing.T) {
	t.Helper()
	if err := e.m.Materialize(t.Context(), "sesn_skills", e.sb); err != nil {
		t.Fatalf("Materialize = %v, want no error", err)
	}
}

// listing returns the files under dir of the sandbox as "path size" lines.
func (e *skillEnv) listing(t *testing.T, dir string) string {
	t.Helper()
	files, err := e.sb.(sandbox.FileTransfer).ListFiles(t.Context(), dir)
	if err != nil {
		t.Fatalf("ListFiles(%s) = %v", dir, err)
	}
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "%s %d\n", f.Path, f.Size)
	}
	return b.String()
}

// entry is one member of a test archive.
type entry struct {
	name string
	data string
	mode fs.FileMode
}

// zipOf builds a zip archive of entries, as skillbundle writes them.
func zipOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.data == "" {
			h.Method = zip.Store // a deflate writer per entry is slow for thousands
		}
		h.SetMode(e.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const (
	manifest = "---\nname: pdf\ndescription: Reads PDF files.\n---\nRun scripts/extract.sh FILE.\n"
	script   = "#!/bin/bash\necho \"extracted by $(basename \"$0\")\"\n"
)

// skillV1 is version 1 of the pdf skill.
func skillV1(t *testing.T) []byte {
	return zipOf(t,
		entry{"pdf/SKILL.md", manifest, 0o644},
		entry{"pdf/scripts/extract.sh", script, 0o755},
		entry{"pdf/reference/old.md", "only in version 1\n", 0o644},
	)
}

// A skill is placed read-only at /mnt/session/skills/<name>, and the
// agent's shell reads its SKILL.md and runs its script there by absolute
// path.
func TestSkillPlacedAndRunnable(t *testing.T) {
	t.Parallel()
	e := newSkillEnv(t)
	e.fake.set("sesrsc_skill", 1, skillV1(t))
	e.materialize(t)
	dir := sessionfiles.SkillsDir + "/pdf"
	want := fmt.Sprintf("%[1]s/SKILL.md %[2]d\n%[1]s/reference/old.md 18\n%[1]s/scripts/extract.sh %[3]d\n", dir, len(manifest), len(script))
	if got := e.listing(t, dir); got != want {
		t.Errorf("the sandbox holds\n%s\nwant\n%s", got, want)
	}
	if n := e.fake.count("mark"); n != 1 {
		t.Errorf("%d MarkResourceMaterialized calls, want 1", n)
	}

	if !sandboxlocal.SessionPathsVisible(e.p) {
		testenv.Unavailable(t, "this host gives no private mount namespace (%s); the shell does not see %s", sandboxlocal.SessionPathsUnavailable(e.p), sandbox.SessionDir)
	}
	cmd := "cat /mnt/session/skills/pdf/SKILL.md && bash /mnt/session/skills/pdf/scripts/extract.sh && " +
		"stat -c '%a %n' /mnt/session/skills/pdf/SKILL.md /mnt/session/skills/pdf/scripts/extract.sh"
	res, err := e.sb.(sandbox.Shell).ShellExec(t.Context(), sandbox.ExecRequest{Command: cmd})
	if err != nil {
		t.Fatalf("ShellExec = %v", err)
	}
	wantOut := manifest + "extracted by extract.sh\n444 /mnt/session/skills/pdf/SKILL.md\n555 /mnt/session/skills/pdf/scripts/extract.sh\n"
	if res.ExitCode != 0 || string(res.Stdout) != wantOut {
		t.Errorf("%q: exit %d, stdout\n%s\nstderr %q; want exit 0 and\n%s", cmd, res.ExitCode, res.Stdout, res.Stderr, wantOut)
	}
}

// A second Materialize (a retried activity, or a new worker process)
// costs only the listing; a new version replaces the old files, and a
// deleted skill resource is removed.
func TestSkillIdempotentAndReplaced(t *testing.T) {
	t.Parallel()
	e := newSkillEnv(t)
	e.fake.set("sesrsc_skill", 1, skillV1(t))
	e.materialize(t)
	e.materialize(t)
	restarted := &sessionfiles.Materializer{Resources: e.cli, TempDir: t.TempDir()}
	if err := restarted.Materialize(t.Context(), "sesn_skills", e.sb); err != nil {
		t.Fatalf("Materialize after a restart = %v", err)
	}
	if got := [3]int{e.fake.count("list"), e.fake.count("read"), e.fake.count("mark")}; got != [3]int{3, 1, 1} {
		t.Errorf("after three Materialize calls: %d listings, %d archive reads, %d marks; want 3, 1, 1", got[0], got[1], got[2])
	}

	dir := sessionfiles.SkillsDir + "/pdf"
	e.fake.set("sesrsc_skill", 2, zipOf(t,
		entry{"pdf/SKILL.md", "version 2\n", 0o644},
		entry{"pdf/scripts/extract.sh", script, 0o755},
	))
	e.materialize(t)
	want := fmt.Sprintf("%[1]s/SKILL.md 10\n%[1]s/scripts/extract.sh %d\n", dir, len(script))
	if got := e.listing(t, dir); got != want {
		t.Errorf("after version 2 the sandbox holds\n%s\nwant (reference/old.md gone)\n%s", got, want)
	}

	e.fake.mu.Lock()
	e.fake.resources[0].Deleted = true
	e.fake.mu.Unlock()
	e.materialize(t)
	if got := e.listing(t, dir); got != "" {
		t.Errorf("after the skill resource was deleted the sandbox holds\n%s\nwant nothing", got)
	}
}

// A skill whose version no longer exists is a ResourceError naming the
// skill; nothing is recorded, and the next Materialize tries again.
func TestSkillVersionGone(t *testing.T) {
	t.Parallel()
	e := newSkillEnv(t)
	e.fake.set("sesrsc_skill", 1, nil)
	delete(e.fake.archives, "sesrsc_skill")
	err := e.m.Materialize(t.Context(), "sesn_skills", e.sb)
	var re *sessionfiles.ResourceError
	if !errors.As(err, &re) || re.ResourceID != "sesrsc_skill" {
		t.Fatalf("Materialize = %v, want a *ResourceError of sesrsc_skill", err)
	}
	for _, part := range []string{`skill "pdf" (skill_pdf)`, "skillver_1", "no longer exists"} {
		if !strings.Contains(re.Error(), part) {
			t.Errorf("error %q does not name %q", re.Error(), part)
		}
	}
	if n := e.fake.count("mark"); n != 0 {
		t.Errorf("%d MarkResourceMaterialized calls, want 0", n)
	}
	e.fake.set("sesrsc_skill", 1, skillV1(t))
	e.materialize(t)
	if got := e.listing(t, sessionfiles.SkillsDir+"/pdf"); !strings.Contains(got, "/SKILL.md ") {
		t.Errorf("after the version came back the sandbox holds\n%s\nwant the skill", got)
	}
}

// manyEntries returns n entries under pdf/ besides SKILL.md.
func manyEntries(n int) []entry {
	out := []entry{{"pdf/SKILL.md", manifest, 0o644}}
	for i := range n {
		out = append(out, entry{fmt.Sprintf("pdf/f/%05d", i), "", 0o644})
	}
	return out
}

// hugeEntry returns an archive whose entry pdf/big declares 2 GiB.
func hugeEntry(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("pdf/SKILL.md")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte(manifest))
	w, err = zw.CreateRaw(&zip.FileHeader{Name: "pdf/big", Method: zip.Store, CompressedSize64: 4, UncompressedSize64: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("abcd"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Hostile or broken archives are refused with a ResourceError naming the
// skill and why, and nothing is placed.
func TestSkillArchiveRefused(t *testing.T) {
	t.Parallel()
	ok := entry{"pdf/SKILL.md", manifest, 0o644}
	tests := []struct {
		name     string
		archive  func(t *testing.T) []byte
		announce int64
		reason   string
	}{
		{"entry outside the skill", func(t *testing.T) []byte { return zipOf(t, ok, entry{"other/x", "x", 0o644}) }, 0, `entry "other/x" lies outside pdf/`},
		{"absolute path", func(t *testing.T) []byte { return zipOf(t, ok, entry{"/pdf/x", "x", 0o644}) }, 0, `entry "/pdf/x" lies outside pdf/`},
		{"dot-dot", func(t *testing.T) []byte { return zipOf(t, ok, entry{"pdf/../../etc/x", "x", 0o644}) }, 0, `entry "pdf/../../etc/x" is not a clean relative path`},
		{"empty component", func(t *testing.T) []byte { return zipOf(t, ok, entry{"pdf//x", "x", 0o644}) }, 0, "is not a clean relative path"},
		{"symbolic link", func(t *testing.T) []byte {
			return zipOf(t, ok, entry{"pdf/link", "/etc/passwd", fs.ModeSymlink | 0o777})
		}, 0, `entry "pdf/link" is not a regular file or a directory`},
		{"duplicate", func(t *testing.T) []byte { return zipOf(t, ok, ok) }, 0, `entry "pdf/SKILL.md" appears twice`},
		{"file and directory", func(t *testing.T) []byte {
			return zipOf(t, ok, entry{"pdf/a", "x", 0o644}, entry{"pdf/a/b", "y", 0o644})
		}, 0, "pdf/a is both a file and a directory"},
		{"no SKILL.md", func(t *testing.T) []byte { return zipOf(t, entry{"pdf/README.md", "x", 0o644}) }, 0, "it has no pdf/SKILL.md"},
		{"too many entries", func(t *testing.T) []byte { return zipOf(t, manyEntries(10_000)...) }, 0, "10001 entries, more than the 10000 allowed"},
		{"expands too much", hugeEntry, 0, "more than 1073741824 bytes once expanded"},
		{"announced too large", func(t *testing.T) []byte { return zipOf(t, ok) }, 2 << 30, "is over the 1073741824 allowed"},
		{"not a zip", func(*testing.T) []byte { return []byte("not a zip archive") }, 0, "its archive cannot be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newSkillEnv(t)
			e.fake.set("sesrsc_skill", 1, tt.archive(t))
			e.fake.announce = tt.announce
			err := e.m.Materialize(t.Context(), "sesn_skills", e.sb)
			var re *sessionfiles.ResourceError
			if !errors.As(err, &re) {
				t.Fatalf("Materialize = %v, want a *ResourceError", err)
			}
			if msg := re.Error(); !strings.HasPrefix(msg, `skill "pdf" (skill_pdf) cannot be mounted: `) || !strings.Contains(msg, tt.reason) {
				t.Errorf("error %q, want it to name the skill and %q", msg, tt.reason)
			}
			if got := e.listing(t, sandbox.SessionDir); got != "" {
				t.Errorf("a refused archive left\n%s", got)
			}
			if left, err := os.ReadDir(e.tmp); err != nil || len(left) != 0 {
				t.Errorf("TempDir holds %v (%v) after the refusal, want nothing", left, err)
			}
		})
	}
}
