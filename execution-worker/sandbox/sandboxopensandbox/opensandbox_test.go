package sandboxopensandbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxopensandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxopensandbox/opensandboxfake"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
)

// testInstallation is the installation id of the tests' providers.
const testInstallation = "test-installation"

func newProvider(t *testing.T, fake *opensandboxfake.Server) *sandboxopensandbox.Provider {
	t.Helper()
	return newProviderOf(t, fake, testInstallation)
}

func newProviderOf(t *testing.T, fake *opensandboxfake.Server, installation string) *sandboxopensandbox.Provider {
	t.Helper()
	p, err := sandboxopensandbox.New(sandboxopensandbox.Config{
		Installation: installation,
		Domain:       fake.Host(),
		APIKey:       fake.APIKey,
		PollInterval: 5 * time.Millisecond,
		RetryBase:    10 * time.Millisecond,
		RetryMax:     50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	fake := opensandboxfake.New(t)
	fake.APIKey = "test-key"
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider { return newProviderOf(t, fake, installation) },
		Unlabel: func(_ *testing.T, ref sandbox.Ref) {
			fake.SetMetadata(ref.ID, sandboxopensandbox.LabelInstallation, "")
		},
		Spec: sandbox.Spec{Env: map[string]string{"MANGO_SPEC_VAR": "from spec"}},
	})
}

func create(t *testing.T, p *sandboxopensandbox.Provider, key string) (sandbox.Sandbox, sandbox.Ref) {
	t.Helper()
	sb, ref, err := p.Create(t.Context(), key, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = p.DestroyRef(context.Background(), ref) })
	return sb, ref
}

func TestAttachExpiredOrKilled(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	_, expired := create(t, p, "expired")
	_, killed := create(t, p, "killed")
	fake.Expire(expired.ID)
	fake.Kill(killed.ID)
	if _, err := p.Attach(t.Context(), "expired", expired); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to an expired sandbox = %v, want ErrNotFound", err)
	}
	if _, err := p.Attach(t.Context(), "killed", killed); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to a killed sandbox = %v, want ErrNotFound", err)
	}
}

func TestExecAfterRemoteKillIsNotFound(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	sb, ref := create(t, p, "k")
	fake.Kill(ref.ID)
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Exec in a killed sandbox = %v, want ErrNotFound", err)
	}
	if _, err := sb.ReadFile(t.Context(), "x"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("ReadFile in a killed sandbox = %v, want ErrNotFound", err)
	}
}

func TestForeignLabelRejected(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	_, ref := create(t, p, "owner")
	fake.SetMetadata(ref.ID, sandboxopensandbox.LabelKeyHash, sandbox.KeyHash("someone else"))
	if _, err := p.Attach(t.Context(), "owner", ref); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach to a sandbox relabelled for another session = %v, want ErrNotOwned", err)
	}
	fake.SetMetadata(ref.ID, sandboxopensandbox.LabelKeyHash, sandbox.KeyHash("owner"))
	fake.SetMetadata(ref.ID, sandboxopensandbox.LabelManaged, "false")
	if _, err := p.Attach(t.Context(), "owner", ref); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach to an unmanaged sandbox = %v, want ErrNotOwned", err)
	}
	if err := p.DestroyRef(t.Context(), ref); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("DestroyRef of an unmanaged sandbox = %v, want ErrNotOwned", err)
	}
	fake.SetMetadata(ref.ID, sandboxopensandbox.LabelManaged, "true")
}

func TestRetriesTransientErrors(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusInternalServerError} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			fake := opensandboxfake.New(t)
			p := newProvider(t, fake)
			_, ref := create(t, p, "retry")
			before := fake.Requests(http.MethodGet, "/v1/sandboxes/"+ref.ID)
			fake.Fail(http.MethodGet, "/v1/sandboxes/"+ref.ID, status, 3, "")
			start := time.Now()
			if _, err := p.Attach(t.Context(), "retry", ref); err != nil {
				t.Fatalf("Attach with 3 transient %d answers = %v, want success", status, err)
			}
			// 3 failures + 1 success for the GET, plus 1 for the endpoint.
			if got := fake.Requests(http.MethodGet, "/v1/sandboxes/"+ref.ID) - before; got != 5 {
				t.Errorf("requests = %d, want 5 (3 failed, 1 retried GET, 1 endpoint)", got)
			}
			// Backoff 10ms, 20ms, 40ms.
			if elapsed := time.Since(start); elapsed < 70*time.Millisecond {
				t.Errorf("3 retries took %v, want backoff of at least 70ms", elapsed)
			}
		})
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	_, ref := create(t, p, "ra")
	fake.Fail(http.MethodGet, "/v1/sandboxes/"+ref.ID, http.StatusTooManyRequests, 1, "1")
	start := time.Now()
	if _, err := p.Attach(t.Context(), "ra", ref); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed < time.Second {
		t.Errorf("Attach after Retry-After: 1 took %v, want at least 1s", elapsed)
	}
}

func TestRetriesGiveUp(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	_, ref := create(t, p, "giveup")
	fake.Fail(http.MethodGet, "/v1/sandboxes/"+ref.ID, http.StatusBadGateway, 100, "")
	before := fake.Requests(http.MethodGet, "/v1/sandboxes/"+ref.ID)
	_, err := p.Attach(t.Context(), "giveup", ref)
	if err == nil || !strings.Contains(err.Error(), "502") {
		t.Errorf("Attach against a failing server = %v, want an HTTP 502 error", err)
	}
	if got := fake.Requests(http.MethodGet, "/v1/sandboxes/"+ref.ID) - before; got != 5 {
		t.Errorf("requests = %d, want 5 attempts", got)
	}
}

func TestGiveUpNamesAttempts(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	_, ref := create(t, p, "attempts")
	fake.Fail(http.MethodGet, "/v1/sandboxes/"+ref.ID, http.StatusServiceUnavailable, 100, "")
	if _, err := p.Attach(t.Context(), "attempts", ref); err == nil || !strings.Contains(err.Error(), "HTTP 503, giving up after 5 attempts") {
		t.Errorf("Attach against a failing server = %v, want the status and 5 attempts named", err)
	}
	fake.Fail(http.MethodPost, "/v1/sandboxes", http.StatusInternalServerError, 1, "")
	if _, _, err := p.Create(t.Context(), "c", sandbox.Spec{}); err == nil || strings.Contains(err.Error(), "giving up") {
		t.Errorf("Create with a 500 = %v, want an error that does not claim retries", err)
	}
}

func TestCreateNotRetriedOn500(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	fake.Fail(http.MethodPost, "/v1/sandboxes", http.StatusInternalServerError, 1, "")
	if _, _, err := p.Create(t.Context(), "c", sandbox.Spec{}); err == nil {
		t.Fatal("Create with a 500 on POST succeeded, want the error (a create is not idempotent)")
	}
	if got := fake.Requests(http.MethodPost, "/v1/sandboxes"); got != 1 {
		t.Errorf("POST requests = %d, want 1", got)
	}
	fake.Fail(http.MethodPost, "/v1/sandboxes", http.StatusTooManyRequests, 1, "")
	_, ref, err := p.Create(t.Context(), "c", sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create after one 429 = %v, want success", err)
	}
	_ = p.DestroyRef(t.Context(), ref)
}

func TestMalformedStream(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	sb, _ := create(t, p, "malformed")
	fake.SetMalformedStream(true)
	start := time.Now()
	_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "malformed frame") {
		t.Errorf("Exec with a malformed stream = %v, want a malformed frame error", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("malformed stream took %v to fail, want it quick", elapsed)
	}
}

func TestPausedSandboxResumed(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	_, ref := create(t, p, "paused")
	fake.Pause(ref.ID)
	sb, err := p.Attach(t.Context(), "paused", ref)
	if err != nil {
		t.Fatalf("Attach to a paused sandbox = %v", err)
	}
	if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo ok"}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("Exec after resume = %v, %v", res, err)
	}
}

func TestServerProxy(t *testing.T) {
	fake := opensandboxfake.New(t)
	p, err := sandboxopensandbox.New(sandboxopensandbox.Config{Domain: fake.URL(), UseServerProxy: true, PollInterval: 5 * time.Millisecond,
		Installation: testInstallation})
	if err != nil {
		t.Fatal(err)
	}
	create(t, p, "proxy")
	if fake.ProxiedEndpoints() == 0 {
		t.Error("no endpoint request asked for use_server_proxy=true")
	}
}

func TestSetEgress(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	// Limited networking is requested at creation: the server then starts
	// the egress sidecar, deny-by-default from the first command.
	_, ref, err := p.Create(t.Context(), "egress", sandbox.Spec{Network: &sandbox.Network{AllowedHosts: []string{"pypi.org"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.DestroyRef(context.Background(), ref) })
	if err := p.SetEgress(t.Context(), ref, []string{"pypi.org", "*.github.com"}); err != nil {
		t.Fatalf("SetEgress: %v", err)
	}
	if err := p.SetEgress(t.Context(), ref, nil); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"pypi.org"}, {"pypi.org", "*.github.com"}, nil}
	pols := fake.Policies(ref.ID)
	if len(pols) != len(want) {
		t.Fatalf("policies = %+v, want %d", pols, len(want))
	}
	for i, pol := range pols {
		if pol.DefaultAction != "deny" || !slices.Equal(pol.Allowed(), want[i]) || len(pol.Egress) != len(want[i]) {
			t.Errorf("policy %d = %+v, want deny except exactly %v", i, pol, want[i])
		}
	}
	if err := p.SetEgress(t.Context(), sandbox.Ref{Provider: "docker", ID: ref.ID}, nil); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("SetEgress with a foreign ref = %v, want ErrNotOwned", err)
	}
	// A sandbox created unrestricted has no sidecar to take a policy.
	_, open := create(t, p, "open")
	if err := p.SetEgress(t.Context(), open, []string{"x.example"}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("SetEgress on a sandbox without sidecar = %v, want the 404 reported", err)
	}
	caps := p.Capabilities()
	if !slices.Contains(caps, sandbox.CapabilityLimitedNetworking) || !slices.Contains(caps, sandbox.CapabilityPackages) {
		t.Errorf("Capabilities = %v, want limited_networking and packages", caps)
	}
}

func TestOwnershipLabelIsHash(t *testing.T) {
	fake := opensandboxfake.New(t)
	p := newProvider(t, fake)
	key := "sesn_raw_key_value"
	create(t, p, key)
	if fake.Count(sandboxopensandbox.LabelKeyHash, sandbox.KeyHash(key)) != 1 {
		t.Error("no sandbox labelled with the key hash")
	}
	if fake.Count(sandboxopensandbox.LabelKeyHash, key) != 0 {
		t.Error("raw session key used as a label")
	}
}

// TestListPages: the reconciler's List and Create's lookup by label follow
// the pages of a server that answers at most two sandboxes a page.
func TestListPages(t *testing.T) {
	fake := opensandboxfake.New(t)
	fake.MaxPageSize = 2
	p := newProvider(t, fake)
	want := map[sandbox.Ref]bool{}
	for i := range 5 {
		_, ref := create(t, p, fmt.Sprintf("paged-%d", i))
		want[ref] = true
	}
	owned, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owned {
		delete(want, o.Ref)
	}
	if len(want) != 0 || len(owned) != 5 {
		t.Errorf("List = %d sandboxes, missing %v", len(owned), want)
	}
	// Create for the last key finds its sandbox (on page 3) again.
	if _, ref := create(t, p, "paged-4"); fake.Count(sandboxopensandbox.LabelKeyHash, sandbox.KeyHash("paged-4")) != 1 {
		t.Errorf("Create on a later page made a second sandbox (%v)", ref)
	}
	if pages := fake.Requests(http.MethodGet, "/v1/sandboxes"); pages < 3 {
		t.Errorf("%d list requests, want the pages followed", pages)
	}
}

func TestFactoryErrors(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	_, err := sandboxopensandbox.Factory.New(t.Context(), testInstallation, env(nil))
	if err == nil || !strings.Contains(err.Error(), sandboxopensandbox.EnvDomain) {
		t.Errorf("factory without %s = %v, want an error naming it", sandboxopensandbox.EnvDomain, err)
	}
	_, err = sandboxopensandbox.Factory.New(t.Context(), testInstallation, env(map[string]string{
		sandboxopensandbox.EnvUseServerProxy: "maybe",
		sandboxopensandbox.EnvExecTimeout:    "soon",
	}))
	for _, name := range []string{sandboxopensandbox.EnvDomain, sandboxopensandbox.EnvUseServerProxy, sandboxopensandbox.EnvExecTimeout} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("factory error %v does not name %s", err, name)
		}
	}
	p, err := sandboxopensandbox.Factory.New(t.Context(), testInstallation, env(map[string]string{sandboxopensandbox.EnvDomain: "localhost:1"}))
	if err != nil || p.Name() != sandboxopensandbox.Name {
		t.Errorf("factory with a domain = %v, %v; want a provider without contacting the server", p, err)
	}
	if sandboxopensandbox.Factory.Traits.RunsOnHost || sandboxopensandbox.Factory.Traits.HostBound {
		t.Error("remote provider must be neither RunsOnHost nor HostBound")
	}
}

// TestLiveConformance runs the suite against a real OpenSandbox server when
// MANGO_LIVE_OPENSANDBOX=1.
func TestLiveConformance(t *testing.T) {
	if os.Getenv("MANGO_LIVE_OPENSANDBOX") != "1" {
		t.Skip("live OpenSandbox test skipped: set MANGO_LIVE_OPENSANDBOX=1 and OPEN_SANDBOX_DOMAIN (and OPEN_SANDBOX_API_KEY) to run it")
	}
	cfg, err := sandboxopensandbox.ConfigFromEnv(os.Getenv)
	if err != nil {
		t.Skipf("MANGO_LIVE_OPENSANDBOX=1 but the configuration is incomplete: %v", err)
	}
	cfg.Labels = map[string]string{"mango.test": "live-conformance"}
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider {
			cfg := cfg
			cfg.Installation = installation
			p, err := sandboxopensandbox.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Spec: sandbox.Spec{Env: map[string]string{"MANGO_SPEC_VAR": "from spec"}},
	})
}
