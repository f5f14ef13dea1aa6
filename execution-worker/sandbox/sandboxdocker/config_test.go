package sandboxdocker_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/registry"

	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    sandboxdocker.Config
		wantErr string // the variable named by the error
	}{
		{name: "empty", env: nil, want: sandboxdocker.Config{}},
		{
			name: "all set",
			env: map[string]string{
				"MANGO_SANDBOX_IMAGE": "example.com/sb:1", "MANGO_DOCKER_CPUS": "1.5",
				"MANGO_DOCKER_MEMORY": "512m", "MANGO_DOCKER_PIDS": "128", "MANGO_DOCKER_NETWORK": "bridge",
				"MANGO_SANDBOX_EXEC_TIMEOUT": "30s", "MANGO_SANDBOX_MAX_OUTPUT": "64k", "DOCKER_CONFIG": "/etc/docker-cfg",
			},
			want: sandboxdocker.Config{
				Image: "example.com/sb:1", CPUs: 1.5, Memory: 512 << 20, Pids: 128, Network: "bridge",
				ExecTimeout: 30 * time.Second, MaxOutput: 64 << 10, DockerConfig: "/etc/docker-cfg",
			},
		},
		{name: "memory in bytes", env: map[string]string{"MANGO_DOCKER_MEMORY": "1073741824"}, want: sandboxdocker.Config{Memory: 1 << 30}},
		{name: "zero means no limit", env: map[string]string{"MANGO_DOCKER_CPUS": "0", "MANGO_DOCKER_MEMORY": "0", "MANGO_DOCKER_PIDS": "0"}, want: sandboxdocker.Config{CPUs: -1, Memory: -1, Pids: -1}},
		{name: "bad cpus", env: map[string]string{"MANGO_DOCKER_CPUS": "lots"}, wantErr: "MANGO_DOCKER_CPUS"},
		{name: "negative cpus", env: map[string]string{"MANGO_DOCKER_CPUS": "-1"}, wantErr: "MANGO_DOCKER_CPUS"},
		{name: "bad memory", env: map[string]string{"MANGO_DOCKER_MEMORY": "1 gallon"}, wantErr: "MANGO_DOCKER_MEMORY"},
		{name: "tiny memory", env: map[string]string{"MANGO_DOCKER_MEMORY": "1k"}, wantErr: "MANGO_DOCKER_MEMORY"},
		{name: "bad pids", env: map[string]string{"MANGO_DOCKER_PIDS": "1.5"}, wantErr: "MANGO_DOCKER_PIDS"},
		{name: "bad network", env: map[string]string{"MANGO_DOCKER_NETWORK": "host"}, wantErr: "MANGO_DOCKER_NETWORK"},
		{name: "labels", env: map[string]string{"MANGO_DOCKER_LABELS": "install=eu-1, team = infra"},
			want: sandboxdocker.Config{Labels: map[string]string{"install": "eu-1", "team": "infra"}}},
		{name: "bad labels", env: map[string]string{"MANGO_DOCKER_LABELS": "install"}, wantErr: "MANGO_DOCKER_LABELS"},
		{name: "reserved label", env: map[string]string{"MANGO_DOCKER_LABELS": "mango.managed=false"}, wantErr: "set by the provider"},
		{name: "installation label", env: map[string]string{"MANGO_DOCKER_LABELS": "mango.installation=other"}, wantErr: "set by the provider"},
		{name: "warm pool", env: map[string]string{"MANGO_DOCKER_WARM_POOL": "4"}, want: sandboxdocker.Config{WarmPool: 4}},
		{name: "bad warm pool", env: map[string]string{"MANGO_DOCKER_WARM_POOL": "-1"}, wantErr: "MANGO_DOCKER_WARM_POOL"},
		{name: "huge warm pool", env: map[string]string{"MANGO_DOCKER_WARM_POOL": "65"}, wantErr: "MANGO_DOCKER_WARM_POOL"},
		{name: "reserved warm label", env: map[string]string{"MANGO_DOCKER_LABELS": "mango.warm=x"}, wantErr: "set by the provider"},
		{name: "bad timeout", env: map[string]string{"MANGO_SANDBOX_EXEC_TIMEOUT": "2"}, wantErr: "MANGO_SANDBOX_EXEC_TIMEOUT"},
		{name: "zero output", env: map[string]string{"MANGO_SANDBOX_MAX_OUTPUT": "0"}, wantErr: "MANGO_SANDBOX_MAX_OUTPUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := sandboxdocker.ConfigFromEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ConfigFromEnv = %+v, %v; want an error naming %s", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ConfigFromEnv: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ConfigFromEnv = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRegistryHost(t *testing.T) {
	t.Parallel()
	for image, want := range map[string]string{
		"busybox":                   "https://index.docker.io/v1/",
		"library/busybox:1":         "https://index.docker.io/v1/",
		"docker.io/me/img":          "https://index.docker.io/v1/",
		"ghcr.io/me/img:tag":        "ghcr.io",
		"127.0.0.1:5000/mango:test": "127.0.0.1:5000",
		"localhost:5000/x@sha256:" + strings.Repeat("a", 64): "localhost:5000",
	} {
		got, err := sandboxdocker.RegistryHost(image)
		if err != nil || got != want {
			t.Errorf("RegistryHost(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
	if _, err := sandboxdocker.RegistryHost("not a reference"); err == nil {
		t.Error("RegistryHost of an invalid reference: no error")
	}
}

// TestResolveAuth covers credential lookup without a daemon. Not parallel:
// helper subtests change PATH.
func TestResolveAuth(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	dir := func(t *testing.T, cfg string) string {
		t.Helper()
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, "config.json"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	tests := []struct {
		name, cfg, image string
		helper           string // installed docker-credential-<helper> printing u / p
		want             registry.AuthConfig
		wantErr          string
	}{
		{name: "no entry", cfg: `{"auths":{"other.io":{"auth":"` + b64("a:b") + `"}}}`, image: "reg.io/x", want: registry.AuthConfig{}},
		{name: "inline auth", cfg: `{"auths":{"reg.io":{"auth":"` + b64("u:p:with:colons") + `"}}}`, image: "reg.io/x",
			want: registry.AuthConfig{Username: "u", Password: "p:with:colons", ServerAddress: "reg.io"}},
		{name: "inline fields with scheme key", cfg: `{"auths":{"https://reg.io/v1/":{"username":"u","password":"p"}}}`, image: "reg.io/x:1",
			want: registry.AuthConfig{Username: "u", Password: "p", ServerAddress: "reg.io"}},
		{name: "identity token", cfg: `{"auths":{"reg.io":{"identitytoken":"tok"}}}`, image: "reg.io/x",
			want: registry.AuthConfig{IdentityToken: "tok", ServerAddress: "reg.io"}},
		{name: "docker hub", cfg: `{"auths":{"https://index.docker.io/v1/":{"auth":"` + b64("hub:pw") + `"}}}`, image: "busybox",
			want: registry.AuthConfig{Username: "hub", Password: "pw", ServerAddress: "https://index.docker.io/v1/"}},
		{name: "bad base64", cfg: `{"auths":{"reg.io":{"auth":"!!"}}}`, image: "reg.io/x", wantErr: "base64"},
		{name: "bad json", cfg: `{`, image: "reg.io/x", wantErr: "parse docker config"},
		{name: "cred helper", cfg: `{"credHelpers":{"reg.io":"mangounit"},"auths":{"reg.io":{"auth":"` + b64("inline:no") + `"}}}`,
			image: "reg.io/x", helper: "mangounit", want: registry.AuthConfig{Username: "u", Password: "p", ServerAddress: "reg.io"}},
		{name: "creds store", cfg: `{"credsStore":"mangounit"}`, image: "reg.io/x", helper: "mangounit",
			want: registry.AuthConfig{Username: "u", Password: "p", ServerAddress: "reg.io"}},
		{name: "missing helper", cfg: `{"credHelpers":{"reg.io":"mango-missing"}}`, image: "reg.io/x",
			wantErr: "docker-credential-mango-missing for registry reg.io"},
		{name: "missing store", cfg: `{"credsStore":"mango-missing"}`, image: "reg.io/x",
			wantErr: "docker-credential-mango-missing for registry reg.io"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.helper != "" {
				installHelper(t, tt.helper, "u", "p")
			}
			got, err := sandboxdocker.ResolveAuth(t.Context(), dir(t, tt.cfg), tt.image)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ResolveAuth = %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ResolveAuth: %v", err)
			}
			if got != tt.want {
				t.Errorf("ResolveAuth = %+v, want %+v", got, tt.want)
			}
		})
	}
	t.Run("no config file", func(t *testing.T) {
		got, err := sandboxdocker.ResolveAuth(t.Context(), t.TempDir(), "reg.io/x")
		if err != nil || got != (registry.AuthConfig{}) {
			t.Errorf("ResolveAuth without config.json = %+v, %v; want empty credentials", got, err)
		}
	})
}

// TestConfigFromEnvReportsEveryVariable: one error names every variable
// refused, each with its value and what it wants.
func TestConfigFromEnvReportsEveryVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		sandboxdocker.EnvCPUs: "-1", sandboxdocker.EnvMemory: "1k", sandboxdocker.EnvPids: "many",
		sandboxdocker.EnvNetwork: "host", sandboxdocker.EnvWarmPool: "65", sandboxdocker.EnvExecTimeout: "soon",
	}
	_, err := sandboxdocker.ConfigFromEnv(func(k string) string { return env[k] })
	for _, want := range []string{
		`MANGO_DOCKER_CPUS="-1": want a non-negative number of CPUs`,
		`MANGO_DOCKER_MEMORY="1k": Docker needs at least 6m`,
		`MANGO_DOCKER_PIDS="many": want a non-negative integer`,
		`MANGO_DOCKER_NETWORK="host": want none or bridge`,
		`MANGO_DOCKER_WARM_POOL="65": want a number of containers from 0 (no pool) to 64`,
		`MANGO_SANDBOX_EXEC_TIMEOUT="soon": want a positive duration`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ConfigFromEnv error = %v, want it to contain %q", err, want)
		}
	}
}
