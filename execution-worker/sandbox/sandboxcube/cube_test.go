package sandboxcube_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/e2bproto"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxcube"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxe2b/e2bfake"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
)

// fakeEnv configures the provider through its real environment variables:
// no wildcard DNS, so envd is reached through CUBE_PROXY_ADDR with the
// sandbox host in the Host header.
func fakeEnv(f *e2bfake.Server, key string) func(string) string {
	env := map[string]string{
		sandboxcube.EnvAPIURL:     f.URL,
		sandboxcube.EnvTemplateID: "tpl-cube",
		sandboxcube.EnvAPIKey:     key,
		sandboxcube.EnvDomain:     f.Domain,
		sandboxcube.EnvProxyAddr:  f.Addr,
	}
	return func(k string) string { return env[k] }
}

// testInstallation is the installation id of the tests' providers.
const testInstallation = "test-installation"

func newFake(t *testing.T, key string) *e2bfake.Server {
	// Cube: Bearer auth, no envd access token, no domain in answers.
	return e2bfake.New(t, e2bfake.Options{APIKey: key, Bearer: true, Domain: "cube.test", OmitDomain: true})
}

func TestConformance(t *testing.T) {
	f := newFake(t, "cube-key")
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider {
			p, err := sandboxcube.Factory.New(t.Context(), installation, fakeEnv(f, "cube-key"))
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Unlabel: func(_ *testing.T, ref sandbox.Ref) { f.SetMetadata(ref.ID, e2bproto.LabelInstallation, "") },
		Spec:    sandbox.Spec{Env: map[string]string{"MANGO_SPEC_VAR": "cube"}},
	})
}

func TestWithoutAuth(t *testing.T) {
	f := newFake(t, "")
	p, err := sandboxcube.Factory.New(t.Context(), testInstallation, fakeEnv(f, ""))
	if err != nil {
		t.Fatal(err)
	}
	sb, ref, err := p.Create(t.Context(), "sesn_noauth", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo hi"}); err != nil || string(res.Stdout) != "hi\n" {
		t.Fatalf("Exec = %v, %v", res, err)
	}
	f.Kill(ref.ID)
	if _, err := p.Attach(t.Context(), "sesn_noauth", ref); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to an expired sandbox = %v, want ErrNotFound", err)
	}
}

func TestWrongKeyRejected(t *testing.T) {
	f := newFake(t, "right")
	p, err := sandboxcube.Factory.New(t.Context(), testInstallation, fakeEnv(f, "wrong"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Create(t.Context(), "sesn_x", sandbox.Spec{}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Create with a wrong key = %v, want HTTP 401", err)
	}
}

func TestConfig(t *testing.T) {
	_, err := sandboxcube.Factory.New(t.Context(), testInstallation, func(string) string { return "" })
	for _, v := range []string{sandboxcube.EnvAPIURL, sandboxcube.EnvTemplateID} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("Factory.New without config = %v, want an error naming %s", err, v)
		}
	}
	env := map[string]string{
		sandboxcube.EnvAPIURL: "http://10.0.0.5:3000", sandboxcube.EnvTemplateID: "t",
		sandboxcube.EnvProxyAddr: "nonsense", sandboxcube.EnvAuthHeader: "basic", sandboxcube.EnvIdleTimeout: "1s",
	}
	_, err = sandboxcube.ConfigFromEnv(func(k string) string { return env[k] })
	for _, v := range []string{sandboxcube.EnvProxyAddr, sandboxcube.EnvAuthHeader, sandboxcube.EnvIdleTimeout} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("invalid %s: error %v does not name it", v, err)
		}
	}
	env = map[string]string{sandboxcube.EnvAPIURL: "http://10.0.0.5:3000", sandboxcube.EnvTemplateID: "t"}
	cfg, err := sandboxcube.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if base, host := cfg.EnvdEndpoint("sbx1", ""); base != "https://49983-sbx1.cube.app" || host != "" {
		t.Errorf("wildcard DNS endpoint = %q, %q", base, host)
	}
	env[sandboxcube.EnvProxyAddr] = "192.168.1.10:80"
	cfg, err = sandboxcube.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if base, host := cfg.EnvdEndpoint("sbx1", ""); base != "http://192.168.1.10:80" || host != "49983-sbx1.cube.app" {
		t.Errorf("proxy endpoint = %q, %q", base, host)
	}
	if cfg.Auth != e2bproto.AuthBearer || cfg.APIKey != "" {
		t.Errorf("auth = %v %q, want optional bearer", cfg.Auth, cfg.APIKey)
	}
}

func TestLiveConformance(t *testing.T) {
	if os.Getenv("MANGO_LIVE_CUBE") != "1" {
		t.Skip("live CubeSandbox conformance is opt-in: set MANGO_LIVE_CUBE=1, CUBE_API_URL and CUBE_TEMPLATE_ID")
	}
	if os.Getenv(sandboxcube.EnvAPIURL) == "" || os.Getenv(sandboxcube.EnvTemplateID) == "" {
		t.Skipf("MANGO_LIVE_CUBE=1 but %s or %s is not set", sandboxcube.EnvAPIURL, sandboxcube.EnvTemplateID)
	}
	sandboxtest.Run(t, sandboxtest.Harness{
		New: func(t *testing.T, installation string) sandbox.Provider {
			p, err := sandboxcube.Factory.New(t.Context(), installation, os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	})
}

// TestPutFileStreams checks that a 50 MiB PutFile reaches Cube's envd as
// one stream of exactly its bytes, and that GetFile returns them.
func TestPutFileStreams(t *testing.T) {
	f := newFake(t, "cube-key")
	p, err := sandboxcube.Factory.New(t.Context(), testInstallation, fakeEnv(f, "cube-key"))
	if err != nil {
		t.Fatal(err)
	}
	sb, ref, err := p.Create(t.Context(), "sesn_cube_stream", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	ft, ok := sb.(sandbox.FileTransfer)
	if !ok {
		t.Fatalf("%T does not implement sandbox.FileTransfer", sb)
	}
	const size = 50 << 20
	data := rand.NewChaCha8([32]byte{7})
	sum := sha256.New()
	src := io.TeeReader(io.LimitReader(data, size), sum)
	if err := ft.PutFile(t.Context(), sandbox.UploadsDir+"/big.bin", src, size, 0o444); err != nil {
		t.Fatalf("PutFile(uploads/big.bin, 50 MiB) = %v, want no error", err)
	}
	want := hex.EncodeToString(sum.Sum(nil))
	if up, ok := f.Upload(ref.ID, sandbox.UploadsDir+"/big.bin"); !ok || up.Bytes != size || up.SHA256 != want {
		t.Errorf("fake received %+v (recorded %v), want %d bytes with sha256 %s", up, ok, size, want)
	}
	rc, n, err := ft.GetFile(t.Context(), sandbox.UploadsDir+"/big.bin")
	if err != nil {
		t.Fatalf("GetFile = %v", err)
	}
	defer func() { _ = rc.Close() }()
	h := sha256.New()
	if copied, err := io.Copy(h, rc); err != nil || n != size || copied != size || hex.EncodeToString(h.Sum(nil)) != want {
		t.Errorf("GetFile: size %d, read %d (err %v), want %d bytes with sha256 %s", n, copied, err, size, want)
	}
}
