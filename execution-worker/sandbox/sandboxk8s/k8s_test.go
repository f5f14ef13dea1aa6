package sandboxk8s_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxk8s"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxk8s/k8sfake"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
)

const ns = "agents"

func newFake(t *testing.T) *k8sfake.Server {
	t.Helper()
	f := k8sfake.New(t.TempDir())
	t.Cleanup(f.Close)
	return f
}

// config is a provider configuration against f; edit adjusts it.
func config(f *k8sfake.Server, edit func(*sandboxk8s.Config)) sandboxk8s.Config {
	cfg := sandboxk8s.Config{
		Installation: testInstallation,
		Namespace:    ns,
		Image:        "registry.example/python-runtime-sandbox:v1",
		RouterURL:    f.RouterURL(),
		REST:         f.RESTConfig(),
		PollInterval: 10 * time.Millisecond,
		RetryBase:    10 * time.Millisecond,
		RetryMax:     40 * time.Millisecond,
	}
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

func newProvider(t *testing.T, f *k8sfake.Server, edit func(*sandboxk8s.Config)) *sandboxk8s.Provider {
	t.Helper()
	p, err := sandboxk8s.New(config(f, edit))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testInstallation is the installation id of the tests' providers.
const testInstallation = "test-installation"

// unlabel returns a Harness.Unlabel removing the installation label of a
// resource of f, as a version before installation ids created it.
func unlabel(f *k8sfake.Server) func(*testing.T, sandbox.Ref) {
	return func(_ *testing.T, ref sandbox.Ref) {
		plural := k8sfake.Sandboxes
		if strings.HasPrefix(ref.ID, "sandboxclaim/") {
			plural = k8sfake.SandboxClaims
		}
		f.SetLabel(plural, ns, name(ref), sandboxk8s.LabelInstallation, "")
	}
}

func TestConformance(t *testing.T) {
	f := newFake(t)
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider {
			return newProvider(t, f, func(c *sandboxk8s.Config) { c.Installation = installation })
		},
		Unlabel: unlabel(f),
		Spec:    sandbox.Spec{Env: map[string]string{"MANGO_SPEC_VAR": "from spec 'quoted'"}},
	})
}

func TestConformanceWarmPool(t *testing.T) {
	f := newFake(t)
	f.SetWarmPools("python-pool")
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider {
			return newProvider(t, f, func(c *sandboxk8s.Config) { c.Image, c.WarmPool, c.Installation = "", "python-pool", installation })
		},
		Unlabel: unlabel(f),
		Spec:    sandbox.Spec{Env: map[string]string{"MANGO_SPEC_VAR": "from spec 'quoted'"}},
	})
}

func create(t *testing.T, p *sandboxk8s.Provider, key string) (sandbox.Sandbox, sandbox.Ref) {
	t.Helper()
	sb, ref, err := p.Create(t.Context(), key, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	return sb, ref
}

// name is the resource name of ref.
func name(ref sandbox.Ref) string {
	_, n, _ := strings.Cut(ref.ID, "/")
	return n
}

func TestCreateRequest(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(c *sandboxk8s.Config) { c.Labels = map[string]string{"team": "a"} })
	key := "sesn_request"
	_, ref, err := p.Create(t.Context(), key, sandbox.Spec{Env: map[string]string{"B": "2", "A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	hash := sandbox.KeyHash(key)
	if want := "sandbox/mango-" + hash; ref.ID != want {
		t.Errorf("Ref.ID = %q, want %q", ref.ID, want)
	}
	obj := f.Object(k8sfake.Sandboxes, ns, "mango-"+hash)
	if obj == nil {
		t.Fatalf("no Sandbox mango-%s in namespace %s; have %v", hash, ns, f.Names(k8sfake.Sandboxes, ns))
	}
	labels := obj["metadata"].(map[string]any)["labels"].(map[string]any)
	if labels["mango.session_key_hash"] != hash || labels["app.kubernetes.io/managed-by"] != "mango" || labels["team"] != "a" {
		t.Errorf("labels = %v", labels)
	}
	pod := obj["spec"].(map[string]any)["podTemplate"].(map[string]any)["spec"].(map[string]any)
	if pod["automountServiceAccountToken"] != false {
		t.Errorf("automountServiceAccountToken = %v, want false", pod["automountServiceAccountToken"])
	}
	c := pod["containers"].([]any)[0].(map[string]any)
	if c["image"] != "registry.example/python-runtime-sandbox:v1" {
		t.Errorf("image = %v", c["image"])
	}
	if got := fmt.Sprint(c["env"]); got != "[map[name:A value:1] map[name:B value:2]]" {
		t.Errorf("env = %s, want A and B sorted", got)
	}
	raw := fmt.Sprint(obj)
	if strings.Contains(raw, key) {
		t.Errorf("the Sandbox carries the raw session key: %s", raw)
	}
	h := f.RouterHeaders()
	if h.Get("X-Sandbox-Id") != "mango-"+hash || h.Get("X-Sandbox-Namespace") != ns || h.Get("X-Sandbox-Port") != "8888" || h.Get("X-Sandbox-Pod-Ip") == "" {
		t.Errorf("router headers = %v, want the sandbox name, namespace, port 8888 and a pod IP", h)
	}
}

func TestClaimRequest(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(c *sandboxk8s.Config) { c.Image, c.WarmPool = "", "python-pool" })
	key := "sesn_claim"
	_, ref, err := p.Create(t.Context(), key, sandbox.Spec{Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	n := "mango-" + sandbox.KeyHash(key)
	if ref.ID != "sandboxclaim/"+n {
		t.Errorf("Ref.ID = %q, want sandboxclaim/%s", ref.ID, n)
	}
	obj := f.Object(k8sfake.SandboxClaims, ns, n)
	spec, _ := obj["spec"].(map[string]any)
	if fmt.Sprint(spec) != "map[env:[map[name:A value:1]] warmPoolRef:map[name:python-pool]]" {
		t.Errorf("claim spec = %v", spec)
	}
	if _, _, err := p.Create(t.Context(), "sesn_claim_image", sandbox.Spec{Image: "other"}); err == nil {
		t.Error("Create with a Spec.Image in warm pool mode succeeded, want an error")
	}
}

func TestClaimNeverReady(t *testing.T) {
	f := newFake(t)
	f.SetWarmPools("python-pool")
	p := newProvider(t, f, func(c *sandboxk8s.Config) {
		c.Image, c.WarmPool, c.ReadyTimeout = "", "missing-pool", 300*time.Millisecond
	})
	start := time.Now()
	_, _, err := p.Create(t.Context(), "sesn_never", sandbox.Spec{})
	if err == nil || !strings.Contains(err.Error(), "not ready within") || !strings.Contains(err.Error(), "WarmPoolNotFound") {
		t.Errorf("Create against a missing warm pool = %v, want a readiness timeout naming WarmPoolNotFound", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Create took %v with a 300ms ready timeout", d)
	}
}

func TestAttachVanished(t *testing.T) {
	for _, tt := range []struct {
		name   string
		remove func(f *k8sfake.Server, n string)
	}{
		{"killed", func(f *k8sfake.Server, n string) { f.Vanish(k8sfake.Sandboxes, ns, n) }},
		{"expired", func(f *k8sfake.Server, n string) { f.Finish(ns, n, "SandboxExpired") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			p := newProvider(t, f, nil)
			key := "sesn_vanished"
			sb, ref := create(t, p, key)
			tt.remove(f, name(ref))
			if _, err := newProvider(t, f, nil).Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("Attach to a %s sandbox = %v, want ErrNotFound", tt.name, err)
			}
			if tt.name == "killed" {
				if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true"}); !errors.Is(err, sandbox.ErrNotFound) {
					t.Errorf("Exec in a killed sandbox = %v, want ErrNotFound", err)
				}
				if _, err := sb.ReadFile(t.Context(), "x"); !errors.Is(err, sandbox.ErrNotFound) {
					t.Errorf("ReadFile in a killed sandbox = %v, want ErrNotFound", err)
				}
			}
		})
	}
}

func TestAttachVanishedClaim(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(c *sandboxk8s.Config) { c.Image, c.WarmPool = "", "pool" })
	key := "sesn_vanished_claim"
	_, ref := create(t, p, key)
	f.Vanish(k8sfake.SandboxClaims, ns, name(ref))
	if _, err := p.Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to a vanished claim = %v, want ErrNotFound", err)
	}
	if got := f.Names(k8sfake.Sandboxes, ns); len(got) != 0 {
		t.Errorf("Sandboxes left after their claim vanished: %v", got)
	}
}

func TestAttachRelabelled(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	key := "sesn_relabelled"
	_, ref := create(t, p, key)
	f.SetLabel(k8sfake.Sandboxes, ns, name(ref), "mango.session_key_hash", sandbox.KeyHash("sesn_someone_else"))
	if _, err := p.Attach(t.Context(), key, ref); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach to a sandbox labelled for another session = %v, want ErrNotOwned", err)
	}
	// The deterministic name is taken by a resource labelled for someone
	// else: refused, not adopted.
	if _, _, err := p.Create(t.Context(), key, sandbox.Spec{}); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Create with the name taken by another session's sandbox = %v, want ErrNotOwned", err)
	}
	// Not managed by Mango: DestroyRef refuses too.
	f.SetLabel(k8sfake.Sandboxes, ns, name(ref), "app.kubernetes.io/managed-by", "someone")
	if err := p.DestroyRef(t.Context(), ref); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("DestroyRef of a resource not managed by Mango = %v, want ErrNotOwned", err)
	}
}

func TestAttachMalformedRef(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	for _, id := range []string{"", "mango-x", "pod/mango-x", "sandbox/", "sandbox/Not_A_Name"} {
		if _, err := p.Attach(t.Context(), "sesn_x", sandbox.Ref{Provider: "k8s", ID: id}); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Attach(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name, method, path string
		status             int
		retryAfter         string
	}{
		{"get 503", "GET", "/sandboxes/mango-", 503, ""},
		{"get 500", "GET", "/sandboxes/mango-", 500, ""},
		{"list 429", "GET", "/namespaces/agents/sandboxes", 429, ""},
		{"create 503", "POST", "/namespaces/agents/sandboxes", 503, ""},
		{"router download 502", "GET", "/download/", 502, ""},
		{"router upload 503", "POST", "/upload", 503, ""},
		{"router execute 429", "POST", "/execute", 429, "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			p := newProvider(t, f, nil)
			key := "sesn_retry"
			sb, ref := create(t, p, key)
			if err := sb.WriteFile(t.Context(), "f.txt", []byte("data"), 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.method == "POST" && tt.path == "/namespaces/agents/sandboxes" {
				f.Vanish(k8sfake.Sandboxes, ns, name(ref))
			}
			before := f.Count(tt.method, tt.path)
			f.FailNext(tt.method, tt.path, 2, tt.status, tt.retryAfter)
			switch tt.path {
			case "/download/":
				if got, err := sb.ReadFile(t.Context(), "f.txt"); err != nil || string(got) != "data" {
					t.Fatalf("ReadFile = %q, %v", got, err)
				}
			case "/upload":
				if err := sb.WriteFile(t.Context(), "g.txt", []byte("more"), 0o644); err != nil {
					t.Fatalf("WriteFile = %v", err)
				}
			case "/execute":
				if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo hi"}); err != nil || string(res.Stdout) != "hi\n" {
					t.Fatalf("Exec = %v, %v", res, err)
				}
			case "/namespaces/agents/sandboxes":
				if _, ref2, err := newProvider(t, f, nil).Create(t.Context(), key, sandbox.Spec{}); err != nil {
					t.Fatalf("Create = %v", err)
				} else if ref2 != ref {
					t.Fatalf("Create = %v, want %v", ref2, ref)
				}
			default:
				if _, err := newProvider(t, f, nil).Attach(t.Context(), key, ref); err != nil {
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

func TestRetryBackoff(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(c *sandboxk8s.Config) { c.RetryBase, c.RetryMax = 100*time.Millisecond, time.Second })
	key := "sesn_backoff"
	_, ref := create(t, p, key)
	f.FailNext("GET", "/sandboxes/mango-", 3, 503, "")
	start := time.Now()
	if _, err := p.Attach(t.Context(), key, ref); err != nil {
		t.Fatalf("Attach = %v", err)
	}
	// Backoffs of 100, 200 and 400ms.
	if d := time.Since(start); d < 700*time.Millisecond {
		t.Errorf("three retries took %v, want at least 700ms of exponential backoff", d)
	}
}

func TestRetryGivesUp(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	key := "sesn_giveup"
	sb, ref := create(t, p, key)
	f.FailNext("GET", "/sandboxes/mango-", 100, 503, "")
	before := f.Count("GET", "/sandboxes/mango-")
	_, err := p.Attach(t.Context(), key, ref)
	if err == nil || !strings.Contains(err.Error(), "giving up after 5 attempts") {
		t.Errorf("Attach with a failing API server = %v, want an error saying it gave up after 5 attempts", err)
	}
	if got := f.Count("GET", "/sandboxes/mango-") - before; got != 5 {
		t.Errorf("%d attempts, want 5 (1 + 4 retries)", got)
	}
	f.FailNext("GET", "/download/", 100, 503, "")
	if err := sb.WriteFile(t.Context(), "f.txt", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.ReadFile(t.Context(), "f.txt"); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "giving up") {
		t.Errorf("ReadFile with a failing router = %v, want the 503 and the retries reported", err)
	}
	// Client errors are not retried.
	f2 := newFake(t)
	p2 := newProvider(t, f2, nil)
	_, ref2 := create(t, p2, key)
	f2.FailNext("GET", "/sandboxes/mango-", 100, 403, "")
	before = f2.Count("GET", "/sandboxes/mango-")
	if _, err := p2.Attach(t.Context(), key, ref2); err == nil {
		t.Error("Attach with 403 succeeded")
	}
	if got := f2.Count("GET", "/sandboxes/mango-") - before; got != 1 {
		t.Errorf("403 was sent %d times, want 1", got)
	}
}

func TestExecuteNotRetriedOn5xx(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	sb, _ := create(t, p, "sesn_noretry")
	f.FailNext("POST", "/execute", 1, 500, "")
	before := f.Count("POST", "/execute")
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo once >> once.txt"}); err == nil {
		t.Error("Exec with a 500 succeeded")
	}
	// One failed execute plus the kill; never a second run of the command.
	if got := f.Count("POST", "/execute") - before; got > 2 {
		t.Errorf("%d executes, want at most 2 (the command and its kill)", got)
	}
}

func TestMalformedResponses(t *testing.T) {
	tests := []struct {
		name, method, path string
		truncated          bool
		call               func(t *testing.T, p *sandboxk8s.Provider, sb sandbox.Sandbox) error
	}{
		{"execute body", "POST", "/execute", false, func(t *testing.T, _ *sandboxk8s.Provider, sb sandbox.Sandbox) error {
			_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo hi"})
			return err
		}},
		{"execute truncated", "POST", "/execute", true, func(t *testing.T, _ *sandboxk8s.Provider, sb sandbox.Sandbox) error {
			_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo hi"})
			return err
		}},
		{"download truncated", "GET", "/download/", true, func(t *testing.T, _ *sandboxk8s.Provider, sb sandbox.Sandbox) error {
			_, err := sb.ReadFile(t.Context(), "f.txt")
			return err
		}},
		{"get sandbox", "GET", "/sandboxes/mango-", false, func(t *testing.T, p *sandboxk8s.Provider, sb sandbox.Sandbox) error {
			_, err := p.Attach(t.Context(), "sesn_malformed", sb.Ref())
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			p := newProvider(t, f, nil)
			sb, _ := create(t, p, "sesn_malformed")
			if err := sb.WriteFile(t.Context(), "f.txt", []byte("data"), 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.truncated {
				f.TruncateNext(tt.method, tt.path, 1)
			} else {
				f.MalformNext(tt.method, tt.path, 1)
			}
			start := time.Now()
			err := tt.call(t, p, sb)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the call took %v", d)
			}
			switch {
			case tt.path == "/download/":
				// A cut download is a transport error, retried: the call
				// succeeds with the whole file.
				if err != nil {
					t.Errorf("ReadFile after a truncated download = %v, want it retried", err)
				}
			case err == nil:
				t.Error("the call succeeded, want an error")
			case !tt.truncated && !strings.Contains(err.Error(), "malformed"):
				t.Errorf("error = %v, want it to say the response is malformed", err)
			case tt.truncated && !strings.Contains(err.Error(), "EOF"):
				t.Errorf("error = %v, want it to report the cut body", err)
			}
			// The sandbox still works afterwards.
			if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo ok"}); err != nil || string(res.Stdout) != "ok\n" {
				t.Errorf("Exec afterwards = %v, %v", res, err)
			}
		})
	}
}

func TestListPagination(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(c *sandboxk8s.Config) { c.PageSize = 2 })
	want := map[string]string{}
	for i := range 5 {
		key := fmt.Sprintf("sesn_page_%d", i)
		_, ref := create(t, p, key)
		want[ref.ID] = sandbox.KeyHash(key)
	}
	before := f.Count("GET", "/namespaces/agents/sandboxes")
	owned, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Count("GET", "/namespaces/agents/sandboxes") - before; got != 3 {
		t.Errorf("List made %d requests for 5 resources in pages of 2, want 3", got)
	}
	if len(owned) != len(want) {
		t.Fatalf("List = %d resources, want %d: %v", len(owned), len(want), owned)
	}
	for _, o := range owned {
		if want[o.Ref.ID] != o.KeyHash || o.CreatedAt.IsZero() {
			t.Errorf("List entry %+v: want KeyHash %q and a creation time", o, want[o.Ref.ID])
		}
	}
}

func TestReadWriteOddNames(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	sb, _ := create(t, p, "sesn_names")
	for _, n := range []string{"100%41.txt", "with space/and 'quote'.txt", "a%2Fb", "ünïcödé.bin"} {
		data := []byte("content of " + n + "\x00\xff")
		if err := sb.WriteFile(t.Context(), n, data, 0o600); err != nil {
			t.Fatalf("WriteFile(%q) = %v", n, err)
		}
		if got, err := sb.ReadFile(t.Context(), n); err != nil || string(got) != string(data) {
			t.Errorf("ReadFile(%q) = %q, %v; want %q", n, got, err, data)
		}
	}
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "stat -c %a 100%41.txt"})
	if err != nil || string(res.Stdout) != "600\n" {
		t.Errorf("mode of a new file written with 0600 = %v, %v", res, err)
	}
}

func TestExecLongScriptAndBinaryOutput(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	sb, _ := create(t, p, "sesn_long")
	// Longer than one argument may be: staged through an upload.
	long := "printf '%s' '" + strings.Repeat("x", 200<<10) + "' | wc -c"
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: long})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != fmt.Sprint(200<<10) {
		t.Fatalf("a 200 KiB command = %v, %v", res, err)
	}
	// Output that is not UTF-8 survives the runtime's text decoding.
	res, err = sb.Exec(t.Context(), sandbox.ExecRequest{Command: `printf '\377\000\r\n'`})
	if err != nil || string(res.Stdout) != "\xff\x00\r\n" {
		t.Fatalf("binary output = %q, %v", res.Stdout, err)
	}
	if got, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "ls -A"}); err != nil || strings.Contains(string(got.Stdout), ".mango") {
		t.Errorf("staged files left in the workspace: %q, %v", got.Stdout, err)
	}
}

func TestRuntimeTimeout(t *testing.T) {
	f := newFake(t)
	f.SetExecTimeout(300 * time.Millisecond)
	p := newProvider(t, f, nil)
	sb, _ := create(t, p, "sesn_runtime_timeout")
	_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "sleep 5", Timeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("Exec past the runtime's own timeout = %v, want the runtime's error", err)
	}
}

func TestRouterUnreachable(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(c *sandboxk8s.Config) { c.RuntimePort = 9999 })
	_, _, err := p.Create(t.Context(), "sesn_port", sandbox.Spec{})
	if err == nil || !strings.Contains(err.Error(), "Could not connect to the backend sandbox") {
		t.Errorf("Create with the runtime on another port = %v, want the router's 502", err)
	}
}

func TestUnauthorized(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(c *sandboxk8s.Config) { c.REST.BearerToken = "wrong" })
	if _, _, err := p.Create(t.Context(), "sesn_auth", sandbox.Spec{}); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("Create with a wrong token = %v, want Unauthorized", err)
	}
}

func TestFactoryConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	_, err := sandboxk8s.Factory.New(t.Context(), testInstallation, env(nil))
	for _, name := range []string{"MANGO_K8S_ROUTER_URL", "MANGO_K8S_WARM_POOL", "MANGO_K8S_IMAGE"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Factory.New without configuration = %v, want an error naming %s", err, name)
		}
	}
	_, err = sandboxk8s.Factory.New(t.Context(), testInstallation, env(map[string]string{
		"MANGO_K8S_ROUTER_URL": "ftp://x", "MANGO_K8S_WARM_POOL": "p", "MANGO_K8S_IMAGE": "i",
		"MANGO_K8S_NAMESPACE": "Not_A_Namespace", "MANGO_K8S_RUNTIME_PORT": "0", "MANGO_K8S_READY_TIMEOUT": "soon",
		"MANGO_K8S_KUBECONFIG": "/nonexistent/kubeconfig", "MANGO_SANDBOX_EXEC_TIMEOUT": "-1s",
	}))
	for _, name := range []string{"MANGO_K8S_ROUTER_URL", "MANGO_K8S_WARM_POOL", "MANGO_K8S_NAMESPACE", "MANGO_K8S_RUNTIME_PORT", "MANGO_K8S_READY_TIMEOUT", "MANGO_K8S_KUBECONFIG", "MANGO_SANDBOX_EXEC_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Factory.New with bad configuration = %v, want it to name %s", err, name)
		}
	}
	kubeconfig := t.TempDir() + "/kubeconfig"
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := sandboxk8s.Factory.New(t.Context(), testInstallation, env(map[string]string{
		"MANGO_K8S_ROUTER_URL": "http://127.0.0.1:1", "MANGO_K8S_IMAGE": "i", "MANGO_K8S_KUBECONFIG": kubeconfig,
	}))
	if err != nil || p.Name() != "k8s" {
		t.Errorf("Factory.New = %v, %v", p, err)
	}
	if sandboxk8s.Factory.Traits.RunsOnHost || sandboxk8s.Factory.Traits.HostBound {
		t.Errorf("Traits = %+v, want a remote provider", sandboxk8s.Factory.Traits)
	}
}

// TestLiveConformance runs the suite against a real cluster: the
// kubeconfig of MANGO_K8S_KUBECONFIG, KUBECONFIG or ~/.kube/config (or the
// in-cluster service account), the router at MANGO_K8S_ROUTER_URL, and
// MANGO_K8S_IMAGE or MANGO_K8S_WARM_POOL.
func TestLiveConformance(t *testing.T) {
	if os.Getenv("MANGO_LIVE_K8S") != "1" {
		t.Skip("live Kubernetes Agent Sandbox conformance is opt-in: set MANGO_LIVE_K8S=1, MANGO_K8S_ROUTER_URL, MANGO_K8S_IMAGE or MANGO_K8S_WARM_POOL, and a kubeconfig (creates pods in MANGO_K8S_NAMESPACE)")
	}
	if os.Getenv(sandboxk8s.EnvRouterURL) == "" {
		t.Skip("MANGO_LIVE_K8S=1 but MANGO_K8S_ROUTER_URL is not set: skipping the live Kubernetes conformance run")
	}
	cfg, err := sandboxk8s.ConfigFromEnv(os.Getenv)
	if err != nil {
		t.Skipf("MANGO_LIVE_K8S=1 but the configuration is incomplete: %v", err)
	}
	cfg.Installation = testInstallation
	if _, err := sandboxk8s.New(cfg); err != nil {
		t.Skipf("MANGO_LIVE_K8S=1 but no cluster is configured: %v", err)
	}
	cfg.Labels = map[string]string{"mango.test": "live-conformance"}
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider {
			cfg := cfg
			cfg.Installation = installation
			p, err := sandboxk8s.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	})
}
