package sandboxdaytona_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdaytona"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdaytona/daytonafake"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
)

func newFake(t *testing.T) *daytonafake.Server {
	t.Helper()
	f := daytonafake.New(t.TempDir())
	t.Cleanup(f.Close)
	return f
}

// testInstallation is the installation id of the tests' providers.
const testInstallation = "test-installation"

func newProvider(t *testing.T, f *daytonafake.Server) *sandboxdaytona.Provider {
	t.Helper()
	return newProviderOf(t, f, testInstallation)
}

func newProviderOf(t *testing.T, f *daytonafake.Server, installation string) *sandboxdaytona.Provider {
	t.Helper()
	p, err := sandboxdaytona.New(sandboxdaytona.Config{
		Installation: installation,
		APIKey:       daytonafake.APIKey,
		APIURL:       f.APIURL(),
		PollInterval: 10 * time.Millisecond,
		RetryBase:    10 * time.Millisecond,
		RetryMax:     40 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	f := newFake(t)
	sandboxtest.Run(t, sandboxtest.Harness{
		New:     func(t *testing.T, installation string) sandbox.Provider { return newProviderOf(t, f, installation) },
		Unlabel: func(_ *testing.T, ref sandbox.Ref) { f.SetLabel(ref.ID, sandboxdaytona.LabelInstallation, "") },
		Spec:    sandbox.Spec{Env: map[string]string{"MANGO_SPEC_VAR": "from spec 'quoted'"}},
	})
}

func create(t *testing.T, p *sandboxdaytona.Provider, key string) (sandbox.Sandbox, sandbox.Ref) {
	t.Helper()
	sb, ref, err := p.Create(t.Context(), key, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	return sb, ref
}

// TestListPages: List and Create's lookup by label follow nextCursor
// through a server that answers at most two sandboxes a page.
func TestListPages(t *testing.T) {
	f := newFake(t)
	f.MaxPageSize = 2
	p := newProvider(t, f)
	want := map[sandbox.Ref]bool{}
	for i := range 5 {
		_, ref := create(t, p, fmt.Sprintf("sesn_paged_%d", i))
		want[ref] = true
	}
	before := f.Count(http.MethodGet, "/sandbox")
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
	if pages := f.Count(http.MethodGet, "/sandbox") - before; pages != 3 {
		t.Errorf("List made %d list requests, want 3 pages", pages)
	}
}

func TestCreateRequest(t *testing.T) {
	f := newFake(t)
	p, err := sandboxdaytona.New(sandboxdaytona.Config{
		APIKey: daytonafake.APIKey, APIURL: f.APIURL(), Target: "eu", Image: "debian:12",
		AutoPauseMinutes: 7, PollInterval: 10 * time.Millisecond, Installation: testInstallation,
	})
	if err != nil {
		t.Fatal(err)
	}
	key := "sesn_request"
	_, ref := create(t, p, key)
	body := f.CreateRequest(ref.ID)
	hash := sandbox.KeyHash(key)
	if body["name"] != "mango-"+hash {
		t.Errorf("name = %v, want mango-%s", body["name"], hash)
	}
	labels, _ := body["labels"].(map[string]any)
	if labels["mango.session_key_hash"] != hash || labels["mango.managed"] != "true" || labels["mango.installation"] != testInstallation {
		t.Errorf("labels = %v", labels)
	}
	if body["target"] != "eu" || body["autoStopInterval"] != 7.0 || body["autoDeleteInterval"] != -1.0 {
		t.Errorf("target/autoStop/autoDelete = %v/%v/%v", body["target"], body["autoStopInterval"], body["autoDeleteInterval"])
	}
	bi, _ := body["buildInfo"].(map[string]any)
	if bi["dockerfileContent"] != "FROM debian:12\n" {
		t.Errorf("buildInfo = %v", bi)
	}
	for k, v := range body {
		if s, ok := v.(string); ok && strings.Contains(s, key) {
			t.Errorf("create request field %s carries the raw session key", k)
		}
	}
}

func TestAttachExpired(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f)
	key := "sesn_expired"
	sb, ref := create(t, p, key)
	f.Expire(ref.ID)
	if _, err := newProvider(t, f).Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to an expired sandbox = %v, want ErrNotFound", err)
	}
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Exec in an expired sandbox = %v, want ErrNotFound", err)
	}
	if _, err := sb.ReadFile(t.Context(), "x"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("ReadFile in an expired sandbox = %v, want ErrNotFound", err)
	}
}

func TestAttachRelabelled(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f)
	key := "sesn_relabelled"
	_, ref := create(t, p, key)
	f.SetLabel(ref.ID, "mango.session_key_hash", sandbox.KeyHash("sesn_someone_else"))
	if _, err := p.Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach to a sandbox labelled for another session = %v, want ErrNotOwned", err)
	}
	// Create for the key finds the name taken by a sandbox labelled for
	// someone else: refused, not adopted.
	if _, _, err := p.Create(t.Context(), key, sandbox.Spec{}); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Create with the name taken by another session's sandbox = %v, want ErrNotOwned", err)
	}
}

func TestResumeStopped(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f)
	key := "sesn_stopped"
	sb, ref := create(t, p, key)
	if err := sb.WriteFile(t.Context(), "kept.txt", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.Stop(ref.ID)
	att, err := newProvider(t, f).Attach(t.Context(), key, ref)
	if err != nil {
		t.Fatalf("Attach to a stopped sandbox = %v, want it started again", err)
	}
	if got, err := att.ReadFile(t.Context(), "kept.txt"); err != nil || string(got) != "kept" {
		t.Errorf("ReadFile after resume = %q, %v", got, err)
	}
	// An already attached handle resumes on its next call too.
	f.Stop(ref.ID)
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "cat kept.txt"})
	if err != nil || string(res.Stdout) != "kept" {
		t.Errorf("Exec after auto-stop = %v, %v; want the sandbox resumed", res, err)
	}
	if st := f.State(ref.ID); st != "started" {
		t.Errorf("state after resume = %q", st)
	}
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name, method, path string
		status             int
		retryAfter         string
	}{
		{"get 503", "GET", "/api/sandbox/", 503, ""},
		{"list 429 retry-after", "GET", "/api/sandbox", 429, "0"},
		{"create 500", "POST", "/api/sandbox", 500, ""},
		{"download 502", "GET", "/files/download", 502, ""},
		{"execute 429", "POST", "/process/execute", 429, "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			p := newProvider(t, f)
			key := "sesn_retry"
			sb, ref := create(t, p, key)
			if err := sb.WriteFile(t.Context(), "f.txt", []byte("data"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := f.Count(tt.method, tt.path)
			f.FailNext(tt.method, tt.path, 2, tt.status, tt.retryAfter)
			switch tt.path {
			case "/files/download":
				if got, err := sb.ReadFile(t.Context(), "f.txt"); err != nil || string(got) != "data" {
					t.Fatalf("ReadFile = %q, %v", got, err)
				}
			case "/process/execute":
				if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo hi"}); err != nil || string(res.Stdout) != "hi\n" {
					t.Fatalf("Exec = %v, %v", res, err)
				}
			case "/api/sandbox":
				if tt.method == "POST" {
					f.Expire(ref.ID)
				}
				if _, ref2, err := newProvider(t, f).Create(t.Context(), key, sandbox.Spec{}); err != nil {
					t.Fatalf("Create = %v", err)
				} else if tt.method == "GET" && ref2 != ref {
					t.Fatalf("Create = %v, want %v", ref2, ref)
				}
			default:
				if _, err := newProvider(t, f).Attach(t.Context(), key, ref); err != nil {
					t.Fatalf("Attach = %v", err)
				}
			}
			// Two failures, then success: at least three attempts.
			if got := f.Count(tt.method, tt.path) - before; got < 3 {
				t.Errorf("%d requests to %s %s, want at least 3 (2 failures retried)", got, tt.method, tt.path)
			}
		})
	}
}

func TestRetryGivesUp(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f)
	_, ref := create(t, p, "sesn_giveup")
	f.FailNext("GET", "/api/sandbox/", 100, 503, "")
	before := f.Count("GET", "/api/sandbox/")
	_, err := p.Attach(t.Context(), "sesn_giveup", ref)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Attach with a failing service = %v, want the 503 reported", err)
	}
	if got := f.Count("GET", "/api/sandbox/") - before; got != 5 {
		t.Errorf("%d attempts, want 5 (1 + 4 retries)", got)
	}
	// Client errors are not retried.
	f2 := newFake(t)
	p2 := newProvider(t, f2)
	_, ref2 := create(t, p2, "sesn_giveup")
	f2.FailNext("GET", "/api/sandbox/", 100, 403, "")
	before = f2.Count("GET", "/api/sandbox/")
	if _, err := p2.Attach(t.Context(), "sesn_giveup", ref2); err == nil {
		t.Error("Attach with 403 succeeded")
	}
	if got := f2.Count("GET", "/api/sandbox/") - before; got != 1 {
		t.Errorf("403 was sent %d times, want 1", got)
	}
}

func TestExecuteNotRetriedOn5xx(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f)
	sb, _ := create(t, p, "sesn_noretry")
	f.FailNext("POST", "/process/execute", 1, 502, "")
	before := f.Count("POST", "/process/execute")
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo once >> once.txt"}); err == nil {
		t.Error("Exec with a 502 succeeded")
	}
	// One failed execute plus the kill; never a second run of the command.
	if got := f.Count("POST", "/process/execute") - before; got > 2 {
		t.Errorf("%d executes, want at most 2 (the command and its kill)", got)
	}
}

func TestMalformedResponse(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f)
	sb, _ := create(t, p, "sesn_malformed")
	f.MalformNext("POST", "/process/execute", 1)
	start := time.Now()
	_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo hi"})
	if err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("Exec with a malformed response = %v, want a clear malformed-response error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Exec with a malformed response took %v", d)
	}
	f.MalformNext("GET", "/api/sandbox/", 1)
	if _, err := p.Attach(t.Context(), "sesn_malformed", sb.Ref()); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("Attach with a malformed response = %v, want a malformed-response error", err)
	}
	// The sandbox still works afterwards.
	if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo ok"}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("Exec after a malformed response = %v, %v", res, err)
	}
}

func TestUnauthorized(t *testing.T) {
	f := newFake(t)
	p, err := sandboxdaytona.New(sandboxdaytona.Config{APIKey: "wrong", APIURL: f.APIURL(), Installation: testInstallation})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Create(t.Context(), "sesn_auth", sandbox.Spec{}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Create with a wrong key = %v, want a 401 error", err)
	}
}

func TestFactoryConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	_, err := sandboxdaytona.Factory.New(t.Context(), testInstallation, env(nil))
	if err == nil || !strings.Contains(err.Error(), "DAYTONA_API_KEY") {
		t.Errorf("Factory.New without a key = %v, want an error naming DAYTONA_API_KEY", err)
	}
	_, err = sandboxdaytona.Factory.New(t.Context(), testInstallation, env(map[string]string{
		"DAYTONA_SNAPSHOT": "s", "DAYTONA_IMAGE": "i", "DAYTONA_AUTO_PAUSE_MINUTES": "soon", "DAYTONA_API_URL": "ftp://x",
	}))
	for _, name := range []string{"DAYTONA_API_KEY", "DAYTONA_SNAPSHOT", "DAYTONA_IMAGE", "DAYTONA_AUTO_PAUSE_MINUTES", "DAYTONA_API_URL"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Factory.New with bad configuration = %v, want it to name %s", err, name)
		}
	}
	p, err := sandboxdaytona.Factory.New(t.Context(), testInstallation, env(map[string]string{"DAYTONA_API_KEY": "k", "DAYTONA_AUTO_PAUSE_MINUTES": "0"}))
	if err != nil || p.Name() != "daytona" {
		t.Errorf("Factory.New = %v, %v", p, err)
	}
	if sandboxdaytona.Factory.Traits.RunsOnHost || sandboxdaytona.Factory.Traits.HostBound {
		t.Errorf("Traits = %+v, want a remote provider", sandboxdaytona.Factory.Traits)
	}
}

func TestLiveConformance(t *testing.T) {
	if os.Getenv("MANGO_LIVE_DAYTONA") != "1" {
		t.Skip("live Daytona conformance is opt-in: set MANGO_LIVE_DAYTONA=1 and DAYTONA_API_KEY (creates billable sandboxes)")
	}
	if os.Getenv(sandboxdaytona.EnvAPIKey) == "" {
		t.Skip("MANGO_LIVE_DAYTONA=1 but DAYTONA_API_KEY is not set: skipping the live Daytona conformance run")
	}
	cfg, err := sandboxdaytona.ConfigFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Labels = map[string]string{"mango.test": "live-conformance"}
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider {
			cfg := cfg
			cfg.Installation = installation
			p, err := sandboxdaytona.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	})
	_ = context.Background
}
