package sandboxe2b_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/e2bproto"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxe2b"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxe2b/e2bfake"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
)

const testKey = "e2b_test_key"

func fakeConfig(f *e2bfake.Server) e2bproto.Config {
	cfg := sandboxe2b.Defaults()
	cfg.APIURL = f.URL
	cfg.APIKey = testKey
	cfg.Domain = "configured.invalid" // the service's answer wins
	cfg.EnvdProxyAddr = f.Addr
	cfg.EnvdScheme = "http"
	cfg.RetryBase = 5 * time.Millisecond
	cfg.RetryMax = 50 * time.Millisecond
	return cfg
}

func newFake(t *testing.T) *e2bfake.Server {
	return e2bfake.New(t, e2bfake.Options{APIKey: testKey, AccessTokens: true})
}

func newProvider(t *testing.T, cfg e2bproto.Config) *e2bproto.Provider {
	t.Helper()
	p, err := sandboxe2b.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	f := newFake(t)
	sandboxtest.Run(t, sandboxtest.Harness{
		New:  func(t *testing.T) sandbox.Provider { return newProvider(t, fakeConfig(f)) },
		Spec: sandbox.Spec{Env: map[string]string{"MANGO_SPEC_VAR": "from spec"}},
	})
}

func TestEnvdEndpoint(t *testing.T) {
	cfg := sandboxe2b.Defaults()
	base, host := cfg.EnvdEndpoint("abc123", "")
	if base != "https://49983-abc123.e2b.app" || host != "" {
		t.Errorf("EnvdEndpoint = %q, %q; want https://49983-abc123.e2b.app and no Host override", base, host)
	}
	base, _ = cfg.EnvdEndpoint("abc123", "eu.e2b.dev")
	if base != "https://49983-abc123.eu.e2b.dev" {
		t.Errorf("EnvdEndpoint with the service's domain = %q", base)
	}
	cfg.EnvdProxyAddr, cfg.EnvdScheme = "10.0.0.5:8080", "http"
	base, host = cfg.EnvdEndpoint("abc123", "")
	if base != "http://10.0.0.5:8080" || host != "49983-abc123.e2b.app" {
		t.Errorf("EnvdEndpoint through a proxy = %q, %q", base, host)
	}
}

func TestAttachKilledOrExpired(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, fakeConfig(f))
	key := "sesn_killed"
	sb, ref, err := p.Create(t.Context(), key, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Kill(ref.ID) {
		t.Fatalf("fake has no sandbox %s", ref.ID)
	}
	if _, err := newProvider(t, fakeConfig(f)).Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to a killed sandbox = %v, want ErrNotFound", err)
	}
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Exec in a killed sandbox = %v, want ErrNotFound", err)
	}
	if _, err := sb.ReadFile(t.Context(), "x"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("ReadFile in a killed sandbox = %v, want ErrNotFound", err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Errorf("Destroy of a killed sandbox = %v, want nil", err)
	}
}

func TestAttachResumesPaused(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, fakeConfig(f))
	key := "sesn_paused"
	sb, ref, err := p.Create(t.Context(), key, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(t.Context(), "kept.txt", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.Pause(ref.ID)
	att, err := newProvider(t, fakeConfig(f)).Attach(t.Context(), key, ref)
	if err != nil {
		t.Fatalf("Attach to a paused sandbox = %v, want it resumed", err)
	}
	if got, err := att.ReadFile(t.Context(), "kept.txt"); err != nil || string(got) != "kept" {
		t.Errorf("after resume ReadFile = %q, %v", got, err)
	}
	if f.Count(e2bfake.RouteConnect) == 0 {
		t.Error("Attach did not call connect")
	}
}

func TestOwnershipLabel(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, fakeConfig(f))
	key := "sesn_owned"
	_, ref, err := p.Create(t.Context(), key, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	owned, err := p.List(t.Context())
	if err != nil || len(owned) != 1 || owned[0].KeyHash != sandbox.KeyHash(key) {
		t.Fatalf("List = %+v, %v; want one sandbox labelled with the key hash", owned, err)
	}
	// Relabel it for another session: Attach with the original key is
	// rejected, and Create does not adopt it.
	other := sandbox.KeyHash("sesn_someone_else")
	f.SetMetadata(ref.ID, e2bproto.LabelKeyHash, other)
	if _, err := p.Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach to a sandbox labelled for another session = %v, want ErrNotOwned", err)
	}
	_, ref2, err := p.Create(t.Context(), key, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if ref2 == ref {
		t.Errorf("Create adopted a sandbox labelled for another session")
	}
	if _, err := p.Attach(t.Context(), key, sandbox.Ref{Provider: "cube", ID: ref2.ID}); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach with another provider's name = %v, want ErrNotOwned", err)
	}
}

// TestIdleTimeoutRefreshed: while a session uses its sandbox, the
// sandbox's time to live is pushed back: before a command once a third of
// the idle timeout has passed, and during a command that outlasts it.
func TestIdleTimeoutRefreshed(t *testing.T) {
	f := newFake(t)
	cfg := fakeConfig(f)
	cfg.IdleTimeout = 3 * time.Second
	p := newProvider(t, cfg)
	sb, ref, err := p.Create(t.Context(), "sesn_active", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	created := f.EndAt(ref.ID)
	base := f.Count(e2bfake.RouteTimeout)
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	if n := f.Count(e2bfake.RouteTimeout) - base; n != 0 {
		t.Errorf("%d refreshes right after creation, want none", n)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	if n := f.Count(e2bfake.RouteTimeout) - base; n != 1 {
		t.Errorf("%d refreshes before a command after idle/3, want 1", n)
	}
	touched := f.EndAt(ref.ID)
	if !touched.After(created) {
		t.Errorf("time to live %v not pushed back from %v", touched, created)
	}
	// A command longer than the idle timeout keeps the sandbox alive.
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "sleep 3.5; echo done"})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "done" {
		t.Fatalf("long command = %+v, %v", res, err)
	}
	if n := f.Count(e2bfake.RouteTimeout) - base; n < 3 {
		t.Errorf("%d refreshes after a 3.5s command with a 3s idle timeout, want at least 3", n)
	}
	if !f.EndAt(ref.ID).After(touched.Add(2 * time.Second)) {
		t.Errorf("time to live %v not pushed back during the long command (was %v)", f.EndAt(ref.ID), touched)
	}
}

// TestListPages: List and Create's lookup by label follow X-Next-Token
// through a server that answers at most two sandboxes a page.
func TestListPages(t *testing.T) {
	f := e2bfake.New(t, e2bfake.Options{APIKey: testKey, AccessTokens: true, MaxPageSize: 2})
	p := newProvider(t, fakeConfig(f))
	want := map[sandbox.Ref]bool{}
	for i := range 5 {
		_, ref, err := p.Create(t.Context(), fmt.Sprintf("sesn_paged_%d", i), sandbox.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		want[ref] = true
	}
	before := f.Count(e2bfake.RouteList)
	owned, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owned {
		delete(want, o.Ref)
	}
	if len(owned) != 5 || len(want) != 0 {
		t.Errorf("List = %d sandboxes, missing %v", len(owned), want)
	}
	if pages := f.Count(e2bfake.RouteList) - before; pages != 3 {
		t.Errorf("List made %d list requests, want 3 pages", pages)
	}
}

func TestRetriesTransientErrors(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, fakeConfig(f))
	f.Fail(e2bfake.RouteList, 503, 2, "")
	f.Fail(e2bfake.RouteCreate, 429, 1, "0")
	start := time.Now()
	sb, ref, err := p.Create(t.Context(), "sesn_retry", sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create through transient errors = %v", err)
	}
	if got := f.Count(e2bfake.RouteList); got != 4 { // 2 failed + 1 before create + 1 after
		t.Errorf("list requests = %d, want 4", got)
	}
	if got := f.Count(e2bfake.RouteCreate); got != 2 {
		t.Errorf("create requests = %d, want 2 (one 429, one success)", got)
	}
	if len(f.IDs()) != 1 {
		t.Errorf("fake holds %d sandboxes, want 1", len(f.IDs()))
	}
	f.Fail(e2bfake.RouteFilesGet, 502, 1, "")
	f.Fail(e2bfake.RouteFilesPost, 500, 2, "")
	f.Fail(e2bfake.RouteGet, 429, 1, "1")
	if err := sb.WriteFile(t.Context(), "f.txt", []byte("ok"), 0o644); err != nil {
		t.Fatalf("WriteFile through 500s = %v", err)
	}
	if got, err := sb.ReadFile(t.Context(), "f.txt"); err != nil || string(got) != "ok" {
		t.Fatalf("ReadFile through a 502 = %q, %v", got, err)
	}
	getStart := time.Now()
	if _, err := p.Attach(t.Context(), "sesn_retry", ref); err != nil {
		t.Fatalf("Attach through a 429 = %v", err)
	}
	if d := time.Since(getStart); d < time.Second {
		t.Errorf("Attach after a 429 with Retry-After: 1 took %v, want at least 1s", d)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("retries took %v", d)
	}
	// Retries are bounded: a persistent failure surfaces.
	f.Fail(e2bfake.RouteGet, 500, 100, "")
	if _, err := p.Attach(t.Context(), "sesn_retry", ref); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("Attach through persistent 500s = %v, want an HTTP 500 error", err)
	}
	if got := f.Count(e2bfake.RouteGet); got < 2+5 {
		t.Errorf("get requests = %d, want the retries counted", got)
	}
}

func TestMalformedStreamFrame(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, fakeConfig(f))
	sb, _, err := p.Create(t.Context(), "sesn_malformed", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	f.MalformNextStreams(1)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "echo hi"})
	if !errors.Is(err, e2bproto.ErrProtocol) {
		t.Errorf("Exec with a malformed frame = %v, want ErrProtocol", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Exec with a malformed frame took %v, want a quick failure", d)
	}
	if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo ok"}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("Exec after the malformed stream = %v, %v", res, err)
	}
}

func TestFactoryErrors(t *testing.T) {
	_, err := sandboxe2b.Factory.New(t.Context(), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), sandboxe2b.EnvAPIKey) {
		t.Errorf("Factory.New without %s = %v, want an error naming it", sandboxe2b.EnvAPIKey, err)
	}
	env := map[string]string{
		sandboxe2b.EnvAPIKey:      "k",
		sandboxe2b.EnvAPIURL:      "ftp://x",
		sandboxe2b.EnvIdleTimeout: "soon",
	}
	_, err = sandboxe2b.Factory.New(t.Context(), func(k string) string { return env[k] })
	for _, v := range []string{sandboxe2b.EnvAPIURL, sandboxe2b.EnvIdleTimeout} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("Factory.New with invalid %s = %v, want an error naming it", v, err)
		}
	}
	env = map[string]string{sandboxe2b.EnvAPIKey: "k", sandboxe2b.EnvIdleTimeout: "30m", sandboxe2b.EnvTemplateID: "tpl"}
	p, err := sandboxe2b.Factory.New(t.Context(), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("Factory.New = %v", err)
	}
	if p.Name() != sandboxe2b.Name {
		t.Errorf("Name() = %q", p.Name())
	}
	cfg := p.(*e2bproto.Provider).Config()
	if cfg.IdleTimeout != 30*time.Minute || cfg.TemplateID != "tpl" || cfg.APIURL != sandboxe2b.DefaultAPIURL {
		t.Errorf("config = %+v", cfg)
	}
}

func TestLiveConformance(t *testing.T) {
	if os.Getenv("MANGO_LIVE_E2B") != "1" {
		t.Skip("live E2B conformance is opt-in: set MANGO_LIVE_E2B=1 and E2B_API_KEY (creates billable sandboxes)")
	}
	if os.Getenv(sandboxe2b.EnvAPIKey) == "" {
		t.Skipf("MANGO_LIVE_E2B=1 but %s is not set", sandboxe2b.EnvAPIKey)
	}
	if _, err := sandboxe2b.ConfigFromEnv(os.Getenv); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T) sandbox.Provider {
			p, err := sandboxe2b.Factory.New(t.Context(), os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	})
}

// genReader yields n pseudo-random bytes, hashing what it yields.
type genReader struct {
	rng  *rand.ChaCha8
	n    int64
	hash hash.Hash
}

func newGenReader(n int64) *genReader {
	return &genReader{rng: rand.NewChaCha8([32]byte{1, 2, 3}), n: n, hash: sha256.New()}
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.n == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.n {
		p = p[:g.n]
	}
	_, _ = g.rng.Read(p)
	g.hash.Write(p)
	g.n -= int64(len(p))
	return len(p), nil
}

func (g *genReader) sum() string { return hex.EncodeToString(g.hash.Sum(nil)) }

// TestPutFileStreams checks that a 50 MiB PutFile reaches envd as a stream
// (the fake records every byte) without the process allocating anything
// near the file's size, and that GetFile streams it back.
func TestPutFileStreams(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, fakeConfig(f))
	sb, ref, err := p.Create(t.Context(), "sesn_stream", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	ft := sb.(sandbox.FileTransfer)
	const size = 50 << 20
	gen := newGenReader(size)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := ft.PutFile(t.Context(), "big.bin", gen, size, 0o600); err != nil {
		t.Fatalf("PutFile(big.bin, 50 MiB) = %v, want no error", err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("PutFile of 50 MiB allocated %d MiB, want under 16 MiB (a stream)", grew>>20)
	}
	up, ok := f.Upload(ref.ID, path.Join(sb.Root(), "big.bin"))
	if !ok || up.Bytes != size || up.SHA256 != gen.sum() {
		t.Errorf("fake received %+v (recorded %v), want %d bytes with sha256 %s", up, ok, size, gen.sum())
	}
	if got := strings.TrimSpace(run(t, sb, "stat -c %a big.bin")); got != "600" {
		t.Errorf("mode after PutFile(0600) = %s, want 600", got)
	}
	rc, n, err := ft.GetFile(t.Context(), "big.bin")
	if err != nil {
		t.Fatalf("GetFile(big.bin) = %v, want no error", err)
	}
	defer func() { _ = rc.Close() }()
	h := sha256.New()
	copied, err := io.Copy(h, rc)
	if err != nil || n != size || copied != size || hex.EncodeToString(h.Sum(nil)) != gen.sum() {
		t.Errorf("GetFile: size %d, read %d bytes (err %v), sha256 %x; want %d bytes, sha256 %s", n, copied, err, h.Sum(nil), size, gen.sum())
	}
}

// TestPutFileWrongSize checks that a reader shorter or longer than the
// announced size fails the upload.
func TestPutFileWrongSize(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, fakeConfig(f))
	sb, _, err := p.Create(t.Context(), "sesn_size", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	ft := sb.(sandbox.FileTransfer)
	for _, tc := range []struct {
		data string
		size int64
	}{{"short", 10}, {"too long", 3}} {
		if err := ft.PutFile(t.Context(), "x.txt", strings.NewReader(tc.data), tc.size, 0o644); err == nil {
			t.Errorf("PutFile(%q, size %d) = nil, want an error", tc.data, tc.size)
		}
	}
}

// TestSessionPaths checks files at /mnt/session and /workspace paths,
// listing with odd names, removal and escapes.
func TestSessionPaths(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, fakeConfig(f))
	sb, _, err := p.Create(t.Context(), "sesn_paths", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	ft := sb.(sandbox.FileTransfer)
	ctx := t.Context()
	if n := f.ProcessesAs("root"); n != 0 {
		t.Fatalf("%d processes ran as root before any session path was used, want 0", n)
	}
	if err := ft.PutFile(ctx, sandbox.UploadsDir+"/a.csv", strings.NewReader("a,b\n"), 4, 0o444); err != nil {
		t.Fatalf("PutFile(uploads/a.csv) = %v", err)
	}
	// The envd user cannot create /mnt/session: root sets it up, once.
	if err := sb.WriteFile(ctx, sandbox.OutputsDir+"/first.txt", []byte("1"), 0o644); err != nil {
		t.Fatalf("WriteFile(outputs/first.txt) = %v", err)
	}
	if n := f.ProcessesAs("root"); n != 1 {
		t.Errorf("%d processes ran as root after two session-path writes, want 1 (the session directory setup)", n)
	}
	if err := ft.RemoveAll(ctx, sandbox.OutputsDir+"/first.txt"); err != nil {
		t.Fatalf("RemoveAll(outputs/first.txt) = %v", err)
	}
	if got, err := sb.ReadFile(ctx, sandbox.UploadsDir+"/a.csv"); err != nil || string(got) != "a,b\n" {
		t.Errorf("ReadFile(uploads/a.csv) = %q, %v; want %q", got, err, "a,b\n")
	}
	for name, data := range map[string]string{"r.txt": "result", "with space/x y.txt": "spaced", "deep/er/z": ""} {
		if err := sb.WriteFile(ctx, sandbox.OutputsDir+"/"+name, []byte(data), 0o644); err != nil {
			t.Fatalf("WriteFile(outputs/%s) = %v", name, err)
		}
	}
	got, err := ft.ListFiles(ctx, sandbox.OutputsDir)
	if err != nil {
		t.Fatalf("ListFiles(outputs) = %v", err)
	}
	want := []string{sandbox.OutputsDir + "/deep/er/z", sandbox.OutputsDir + "/r.txt", sandbox.OutputsDir + "/with space/x y.txt"}
	var paths []string
	for _, fi := range got {
		paths = append(paths, fi.Path)
	}
	if !slices.Equal(paths, want) || got[1].Size != 6 || got[1].ModTime.IsZero() {
		t.Errorf("ListFiles(outputs) = %+v, want paths %q with r.txt of 6 bytes and a time", got, want)
	}
	if err := sb.WriteFile(ctx, "/workspace/repo/main.go", []byte("package main"), 0o644); err != nil {
		t.Fatalf("WriteFile(/workspace/repo/main.go) = %v", err)
	}
	if got, err := sb.ReadFile(ctx, "repo/main.go"); err != nil || string(got) != "package main" {
		t.Errorf("ReadFile(repo/main.go) after a write to /workspace/repo/main.go = %q, %v", got, err)
	}
	if got, err := ft.ListFiles(ctx, "/workspace/repo"); err != nil || len(got) != 1 || got[0].Path != "/workspace/repo/main.go" {
		t.Errorf("ListFiles(/workspace/repo) = %+v, %v; want /workspace/repo/main.go", got, err)
	}
	if err := ft.RemoveAll(ctx, sandbox.OutputsDir); err != nil {
		t.Fatalf("RemoveAll(outputs) = %v", err)
	}
	if got, err := ft.ListFiles(ctx, sandbox.OutputsDir); err != nil || len(got) != 0 {
		t.Errorf("ListFiles after RemoveAll = %+v, %v; want empty, nil", got, err)
	}
	if err := ft.RemoveAll(ctx, sandbox.OutputsDir); err != nil {
		t.Errorf("RemoveAll of a missing dir = %v, want nil", err)
	}
	if _, _, err := ft.GetFile(ctx, sandbox.OutputsDir+"/r.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("GetFile of a removed file = %v, want fs.ErrNotExist", err)
	}
	for _, bad := range []string{"/etc/x", "../x", "/mnt/sessionx/y", "/mnt/x"} {
		if err := ft.PutFile(ctx, bad, strings.NewReader("x"), 1, 0o644); !errors.Is(err, sandbox.ErrPathEscape) {
			t.Errorf("PutFile(%q) = %v, want ErrPathEscape", bad, err)
		}
	}
}

func run(t *testing.T, sb sandbox.Sandbox, command string) string {
	t.Helper()
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: command})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(%q) = %+v, %v; want exit code 0", command, res, err)
	}
	return string(res.Stdout)
}
