package sandboxe2b_test

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// testInstallation is the installation id of the tests' providers.
const testInstallation = "test-installation"

func fakeConfig(f *e2bfake.Server) e2bproto.Config {
	cfg := sandboxe2b.Defaults()
	cfg.APIURL = f.URL
	cfg.APIKey = testKey
	cfg.Installation = testInstallation
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
		New: func(t *testing.T, installation string) sandbox.Provider {
			cfg := fakeConfig(f)
			cfg.Installation = installation
			return newProvider(t, cfg)
		},
		Unlabel: func(_ *testing.T, ref sandbox.Ref) { f.SetMetadata(ref.ID, e2bproto.LabelInstallation, "") },
		Spec:    sandbox.Spec{Env: map[string]string{"MANGO_SPEC_VAR": "from spec"}},
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
	if err != nil || len(owned) != 1 || owned[0].KeyHash != sandbox.KeyHash(key) || owned[0].Installation != testInstallation {
		t.Fatalf("List = %+v, %v; want one sandbox labelled with the key hash and installation %q", owned, err, testInstallation)
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

// letIdleThirdPass lets a third of the idle timeout (and a margin) pass
// on the real clock. The refresh rule is "a third of the idle timeout since
// the last use", read from time.Now in the provider, and the provider talks
// HTTP to the fake (no synctest bubble): only real time passing can make a
// command the first after idle/3.
func letIdleThirdPass(idle time.Duration) {
	time.Sleep(idle/3 + 100*time.Millisecond)
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
	letIdleThirdPass(cfg.IdleTimeout)
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
	_, err := sandboxe2b.Factory.New(t.Context(), testInstallation, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), sandboxe2b.EnvAPIKey) {
		t.Errorf("Factory.New without %s = %v, want an error naming it", sandboxe2b.EnvAPIKey, err)
	}
	env := map[string]string{
		sandboxe2b.EnvAPIKey:      "k",
		sandboxe2b.EnvAPIURL:      "ftp://x",
		sandboxe2b.EnvIdleTimeout: "soon",
	}
	_, err = sandboxe2b.Factory.New(t.Context(), testInstallation, func(k string) string { return env[k] })
	for _, v := range []string{sandboxe2b.EnvAPIURL, sandboxe2b.EnvIdleTimeout} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("Factory.New with invalid %s = %v, want an error naming it", v, err)
		}
	}
	env = map[string]string{sandboxe2b.EnvAPIKey: "k", sandboxe2b.EnvIdleTimeout: "30m", sandboxe2b.EnvTemplateID: "tpl"}
	p, err := sandboxe2b.Factory.New(t.Context(), testInstallation, func(k string) string { return env[k] })
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
		New: func(t *testing.T, installation string) sandbox.Provider {
			p, err := sandboxe2b.Factory.New(t.Context(), installation, os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	})
}

// TestPutFileStreams checks that a 50 MiB PutFile reaches envd as a stream
// (the fake records every byte), see [sandboxtest.CheckStreamingTransfer].
func TestPutFileStreams(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, fakeConfig(f))
	sb, ref, err := p.Create(t.Context(), "sesn_stream", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	sandboxtest.CheckStreamingTransfer(t, sb, func(p string) (int64, string, bool) {
		up, ok := f.Upload(ref.ID, p)
		return up.Bytes, up.SHA256, ok
	})
}

// TestSessionPaths checks that the envd user's session directory is set up
// by root exactly once, then files at /mnt/session and /workspace paths
// (see [sandboxtest.CheckSessionPaths]).
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
	if err := ft.PutFile(ctx, sandbox.UploadsDir+"/first.csv", strings.NewReader("1\n"), 2, 0o444); err != nil {
		t.Fatalf("PutFile(uploads/first.csv) = %v", err)
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
	sandboxtest.CheckSessionPaths(t, sb)
	if n := f.ProcessesAs("root"); n != 1 {
		t.Errorf("%d processes ran as root after the session-path checks, want still 1 (the setup)", n)
	}
}

// TestMemoryPathSetsUpSession checks that a first use of the memory root
// (before any /mnt/session path) runs root's setup, which creates
// /mnt/memory for the envd user, and that the setup runs once for both
// roots.
func TestMemoryPathSetsUpSession(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, fakeConfig(f))
	sb, _, err := p.Create(t.Context(), "sesn_memory_paths", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	ft := sb.(sandbox.FileTransfer)
	name := sandbox.MemoryDir + "/store/notes.md"
	if err := ft.PutFile(t.Context(), name, strings.NewReader("n\n"), 2, 0o644); err != nil {
		t.Fatalf("PutFile(%q) = %v, want no error", name, err)
	}
	if n := f.ProcessesAs("root"); n != 1 {
		t.Errorf("%d processes ran as root after a first memory-path write, want 1 (the setup)", n)
	}
	if err := sb.WriteFile(t.Context(), sandbox.OutputsDir+"/r.txt", []byte("r"), 0o644); err != nil {
		t.Fatalf("WriteFile(outputs/r.txt) = %v", err)
	}
	if n := f.ProcessesAs("root"); n != 1 {
		t.Errorf("%d processes ran as root after a session-path write, want still 1", n)
	}
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "cat " + name + " && test -d " + sandbox.UploadsDir + " && echo setup"})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "n\nsetup\n" {
		t.Errorf("cat %s and test -d uploads = %+v, %v; want %q", name, res, err, "n\nsetup\n")
	}
}
