package sandboxdocker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"
)

// dockerHubAuthKey is the key Docker uses for Docker Hub in config.json and
// with credential helpers.
const dockerHubAuthKey = "https://index.docker.io/v1/"

// helperTimeout bounds one credential helper call.
const helperTimeout = 30 * time.Second

// dockerConfigFile is the part of config.json the provider reads.
type dockerConfigFile struct {
	Auths       map[string]authEntry `json:"auths"`
	CredsStore  string               `json:"credsStore"`
	CredHelpers map[string]string    `json:"credHelpers"`
}

type authEntry struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
	RegistryToken string `json:"registrytoken"`
}

// RegistryHost returns the registry host of an image reference as Docker
// names it in config.json: "https://index.docker.io/v1/" for Docker Hub,
// else the host[:port] of the reference.
func RegistryHost(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("parse image reference %q: %w", image, err)
	}
	host := reference.Domain(named)
	if host == "docker.io" || host == "index.docker.io" {
		return dockerHubAuthKey, nil
	}
	return host, nil
}

// ResolveAuth returns the credentials for pulling image, looked up like the
// docker CLI does in dir/config.json (dir: DOCKER_CONFIG, or ~/.docker when
// empty): a per-registry credHelpers entry wins, then the credsStore helper,
// then inline auths (base64 "user:password" in auth, or username and
// password fields). Helpers are run as docker-credential-<name> found in
// PATH, with the protocol's "get" command. A configured helper that is not
// installed is an error naming it and the registry. No configuration, or no
// entry for the registry, yields empty credentials (an anonymous pull).
func ResolveAuth(ctx context.Context, dir, image string) (registry.AuthConfig, error) {
	host, err := RegistryHost(image)
	if err != nil {
		return registry.AuthConfig{}, err
	}
	file, cfgPath, err := loadDockerConfig(dir)
	if err != nil || file == nil {
		return registry.AuthConfig{}, err
	}
	if helper, ok := lookupHost(file.CredHelpers, host); ok && helper != "" {
		return helperGet(ctx, helper, host, "credHelpers", cfgPath)
	}
	if file.CredsStore != "" {
		ac, err := helperGet(ctx, file.CredsStore, host, "credsStore", cfgPath)
		if err != nil || ac.Username != "" || ac.IdentityToken != "" {
			return ac, err
		}
		// Like the docker CLI, fall back to inline entries when the store
		// has none for this registry.
	}
	entry, ok := lookupHost(file.Auths, host)
	if !ok {
		return registry.AuthConfig{}, nil
	}
	ac := registry.AuthConfig{
		Username:      entry.Username,
		Password:      entry.Password,
		IdentityToken: entry.IdentityToken,
		RegistryToken: entry.RegistryToken,
		ServerAddress: host,
	}
	if entry.Auth != "" {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(entry.Auth))
		if err != nil {
			return registry.AuthConfig{}, fmt.Errorf("registry %s in %s: auths.auth is not valid base64", host, cfgPath)
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			return registry.AuthConfig{}, fmt.Errorf("registry %s in %s: auths.auth is not user:password", host, cfgPath)
		}
		ac.Username, ac.Password = user, pass
	}
	return ac, nil
}

// loadDockerConfig reads dir/config.json; a missing file is no error.
func loadDockerConfig(dir string) (*dockerConfigFile, string, error) {
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, "", nil // no home, no config
		}
		dir = filepath.Join(home, ".docker")
	}
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, p, nil
	}
	if err != nil {
		return nil, p, fmt.Errorf("read docker config: %w", err)
	}
	var f dockerConfigFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, p, fmt.Errorf("parse docker config %s: %w", p, err)
	}
	return &f, p, nil
}

// lookupHost finds host in a config.json map whose keys may carry a scheme
// and a path ("https://registry.example.com/v1/").
func lookupHost[V any](m map[string]V, host string) (V, bool) {
	if v, ok := m[host]; ok {
		return v, true
	}
	want := hostOnly(host)
	for k, v := range m {
		if hostOnly(k) == want {
			return v, true
		}
	}
	var zero V
	return zero, false
}

func hostOnly(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	s, _, _ = strings.Cut(s, "/")
	if s == "index.docker.io" || s == "registry-1.docker.io" || s == "docker.io" {
		return "index.docker.io"
	}
	return s
}

// helperGet runs "docker-credential-<name> get" with host on stdin.
func helperGet(ctx context.Context, name, host, key, cfgPath string) (registry.AuthConfig, error) {
	bin := "docker-credential-" + name
	path, err := exec.LookPath(bin)
	if err != nil {
		return registry.AuthConfig{}, fmt.Errorf("docker credential helper %s for registry %s (%s in %s) is not installed: %w", bin, host, key, cfgPath, err)
	}
	ctx, cancel := context.WithTimeout(ctx, helperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "get")
	cmd.Stdin = strings.NewReader(host)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stdout.String() + " " + stderr.String())
		if strings.Contains(msg, "credentials not found") {
			return registry.AuthConfig{}, nil // the helper has none: anonymous
		}
		return registry.AuthConfig{}, fmt.Errorf("docker credential helper %s for registry %s: %w: %s", bin, host, err, msg)
	}
	var out struct {
		ServerURL string `json:"ServerURL"`
		Username  string `json:"Username"`
		Secret    string `json:"Secret"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return registry.AuthConfig{}, fmt.Errorf("docker credential helper %s for registry %s: invalid output: %w", bin, host, err)
	}
	ac := registry.AuthConfig{ServerAddress: host}
	if out.Username == "<token>" {
		ac.IdentityToken = out.Secret
	} else {
		ac.Username, ac.Password = out.Username, out.Secret
	}
	return ac, nil
}

// pull pulls image through the Engine API with credentials from the Docker
// config.
func (p *Provider) pull(ctx context.Context, image string) error {
	host, err := RegistryHost(image)
	if err != nil {
		return err
	}
	ac, err := ResolveAuth(ctx, p.cfg.DockerConfig, image)
	if err != nil {
		return fmt.Errorf("pull image %s: %w", image, err)
	}
	var encoded string
	if ac != (registry.AuthConfig{}) {
		if encoded, err = authconfig.Encode(ac); err != nil {
			return fmt.Errorf("pull image %s: encode credentials: %w", image, err)
		}
	}
	resp, err := p.cli.ImagePull(ctx, image, client.ImagePullOptions{RegistryAuth: encoded})
	if err == nil {
		err = resp.Wait(ctx)
		_ = resp.Close()
	}
	if err != nil {
		return pullError(image, host, ac, err)
	}
	return nil
}

func pullError(image, host string, ac registry.AuthConfig, err error) error {
	msg := strings.ToLower(err.Error())
	authFailed := cerrdefs.IsUnauthorized(err) || cerrdefs.IsPermissionDenied(err) ||
		strings.Contains(msg, "unauthorized") || strings.Contains(msg, "authentication required") ||
		strings.Contains(msg, "denied") || strings.Contains(msg, "no basic auth credentials")
	if !authFailed {
		return fmt.Errorf("pull image %s: %w", image, err)
	}
	who := "without credentials (none configured for it in the Docker config)"
	if ac.Username != "" {
		who = fmt.Sprintf("as user %q", ac.Username)
	} else if ac.IdentityToken != "" || ac.RegistryToken != "" {
		who = "with a token"
	}
	return fmt.Errorf("pull image %s: authentication to registry %s failed %s: %w", image, host, who, err)
}
