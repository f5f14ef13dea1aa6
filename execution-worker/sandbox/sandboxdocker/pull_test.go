package sandboxdocker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker/dockertest"
)

const (
	regUser = "mango"
	regPass = "s3cret-pass"
)

// authRegistry serves an in-process registry on 127.0.0.1 behind basic
// auth and counts the requests that carried the right credentials.
type authRegistry struct {
	host string
	ok   atomic.Int64
}

func startRegistry(t *testing.T) *authRegistry {
	t.Helper()
	r := &authRegistry{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, pass, ok := req.BasicAuth()
		if !ok || user != regUser || pass != regPass {
			w.Header().Set("WWW-Authenticate", `Basic realm="mango-test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		r.ok.Add(1)
		reg.ServeHTTP(w, req)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.host = ln.Addr().String()
	return r
}

// pushSandboxImage pushes an image with the sandbox root file system to the
// registry, built with go-containerregistry (no daemon involved).
func pushSandboxImage(t *testing.T, ref string) {
	t.Helper()
	layerTar, err := dockertest.RootFSLayer()
	if err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{
		Env:        []string{"PATH=" + dockertest.Path},
		WorkingDir: "/workspace",
		Cmd:        []string{"sleep", "infinity"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithAuth(&authn.Basic{Username: regUser, Password: regPass}), remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

func removeImage(t *testing.T, cli *client.Client, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dockertest.CleanupCase(ctx, cli, t); err != nil {
		t.Errorf("cleanup of test containers: %v", err)
	}
	if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		t.Errorf("remove image %s: %v", ref, err)
	}
}

// writeDockerConfig writes config.json into a fresh directory, points
// DOCKER_CONFIG at it and returns the directory.
func writeDockerConfig(t *testing.T, cfg any) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
	return dir
}

// installHelper puts docker-credential-<helper> printing the given
// credentials in a fresh directory at the front of PATH.
func installHelper(t *testing.T, helper, user, secret string) {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\n" +
		"[ \"$1\" = get ] || exit 1\n" +
		"read -r server\n" +
		"printf '{\"ServerURL\":\"%s\",\"Username\":\"" + user + "\",\"Secret\":\"" + secret + "\"}\\n' \"$server\"\n"
	if err := os.WriteFile(filepath.Join(dir, "docker-credential-"+helper), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func providerFromEnv(t *testing.T) *sandboxdocker.Provider {
	t.Helper()
	cfg, err := sandboxdocker.ConfigFromEnv(nil)
	if err != nil {
		t.Fatal(err)
	}
	return newProvider(t, cfg)
}

// TestPullWithCredentials pulls the sandbox image from a registry behind
// basic auth, with credentials from inline auths, credHelpers and
// credsStore, and checks the errors for wrong or unavailable credentials.
// Not parallel: it sets DOCKER_CONFIG and PATH.
func TestPullWithCredentials(t *testing.T) {
	cli := daemon(t)
	reg := startRegistry(t)
	image := reg.host + "/mango-sandbox:test"
	pushSandboxImage(t, image)
	removeImage(t, cli, image)
	t.Cleanup(func() { removeImage(t, cli, image) })

	inline := func(user, pass string) map[string]any {
		return map[string]any{"auths": map[string]any{
			reg.host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))},
		}}
	}
	pullOK := func(t *testing.T) {
		t.Helper()
		before := reg.ok.Load()
		sb, _, err := providerFromEnv(t).Create(t.Context(), newKey(t), sandbox.Spec{Image: image})
		if err != nil {
			t.Fatalf("Create with image %s: %v", image, err)
		}
		if got := mustExec(t, sb, "echo pulled && ls /bin/grep"); got != "pulled\n/bin/grep\n" {
			t.Errorf("Exec in the pulled image printed %q", got)
		}
		if reg.ok.Load() == before {
			t.Error("the registry saw no authenticated request")
		}
		removeImage(t, cli, image)
	}
	pullFails := func(t *testing.T, want ...string) {
		t.Helper()
		_, _, err := providerFromEnv(t).Create(t.Context(), newKey(t), sandbox.Spec{Image: image})
		if err == nil {
			removeImage(t, cli, image)
			t.Fatalf("Create with image %s succeeded, want an error", image)
		}
		t.Logf("Create error: %v", err)
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Create error = %q, want it to mention %q", err, w)
			}
		}
		if _, err := cli.ImageInspect(t.Context(), image); !cerrdefs.IsNotFound(err) {
			t.Errorf("image %s present after a failed pull (inspect: %v)", image, err)
		}
	}

	t.Run("InlineAuths", func(t *testing.T) {
		writeDockerConfig(t, inline(regUser, regPass))
		pullOK(t)
	})
	t.Run("InlineUsernamePassword", func(t *testing.T) {
		writeDockerConfig(t, map[string]any{"auths": map[string]any{
			"http://" + reg.host + "/v2/": map[string]string{"username": regUser, "password": regPass},
		}})
		pullOK(t)
	})
	t.Run("WrongPassword", func(t *testing.T) {
		writeDockerConfig(t, inline(regUser, "wrong"))
		pullFails(t, "authentication", reg.host, `"mango"`)
	})
	t.Run("NoCredentials", func(t *testing.T) {
		writeDockerConfig(t, map[string]any{})
		pullFails(t, "authentication", reg.host, "without credentials")
	})
	t.Run("CredHelpers", func(t *testing.T) {
		installHelper(t, "mangotest", regUser, regPass)
		writeDockerConfig(t, map[string]any{
			"credsStore":  "absent-store", // the per-registry helper wins
			"credHelpers": map[string]string{reg.host: "mangotest"},
		})
		pullOK(t)
	})
	t.Run("CredsStore", func(t *testing.T) {
		installHelper(t, "mangostore", regUser, regPass)
		writeDockerConfig(t, map[string]any{"credsStore": "mangostore"})
		pullOK(t)
	})
	t.Run("MissingHelper", func(t *testing.T) {
		writeDockerConfig(t, map[string]any{"credHelpers": map[string]string{reg.host: "mango-not-installed"}})
		pullFails(t, "docker-credential-mango-not-installed", reg.host, "not installed")
	})
}
