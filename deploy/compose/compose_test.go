package compose_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"
)

// exampleEnv is the environment of .env.example, as a user who copied it
// to .env would have.
func exampleEnv(t *testing.T) map[string]string {
	t.Helper()
	env, err := dotenv.Read(".env.example")
	if err != nil {
		t.Fatalf("read .env.example: %v", err)
	}
	return env
}

// load loads compose.yaml with env only (not the test's environment),
// validating it against the Compose Specification.
func load(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	opts, err := cli.NewProjectOptions([]string{"compose.yaml"},
		cli.WithWorkingDirectory("."),
		cli.WithEnv(list),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		t.Fatalf("project options: %v", err)
	}
	return opts.LoadProject(context.Background())
}

func mustLoad(t *testing.T) *types.Project {
	t.Helper()
	p, err := load(t, exampleEnv(t))
	if err != nil {
		t.Fatalf("load compose.yaml with .env.example: %v", err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("service %s: %v (have %v)", name, err, p.ServiceNames())
	}
	return s
}

func env(s types.ServiceConfig, k string) string {
	if v := s.Environment[k]; v != nil {
		return *v
	}
	return ""
}

// Services of Mango's own binaries (FROM scratch images) and the workers.
var (
	mangoServices  = []string{"migrate", "api-server", "worker-local", "worker-docker"}
	workerServices = map[string]string{"worker-local": "local", "worker-docker": "docker"}
)

func TestComposeServices(t *testing.T) {
	t.Parallel()
	p := mustLoad(t)
	want := []string{"api-server", "migrate", "postgres", "temporal", "worker-docker", "worker-local"}
	if got := slices.Sorted(slices.Values(p.ServiceNames())); !slices.Equal(got, want) {
		t.Errorf("services %v, want %v", got, want)
	}
	if img := service(t, p, "postgres").Image; img != "postgres:15" {
		t.Errorf("postgres image %q, want postgres:15", img)
	}
	if img := service(t, p, "temporal").Image; !strings.HasPrefix(img, "temporalio/auto-setup:") {
		t.Errorf("temporal image %q, want temporalio/auto-setup", img)
	}
	if got := service(t, p, "migrate").Command; !slices.Equal(got, types.ShellCommand{"migrate"}) {
		t.Errorf("migrate command %q, want [migrate] (api-server migrate)", got)
	}
}

func TestComposeDependencies(t *testing.T) {
	t.Parallel()
	p := mustLoad(t)
	want := map[string]map[string]string{
		"temporal":      {"postgres": types.ServiceConditionHealthy},
		"migrate":       {"postgres": types.ServiceConditionHealthy},
		"api-server":    {"migrate": types.ServiceConditionCompletedSuccessfully, "temporal": types.ServiceConditionHealthy},
		"worker-local":  {"api-server": types.ServiceConditionStarted, "temporal": types.ServiceConditionHealthy},
		"worker-docker": {"api-server": types.ServiceConditionStarted, "temporal": types.ServiceConditionHealthy},
	}
	for name, deps := range want {
		got := map[string]string{}
		for dep, d := range service(t, p, name).DependsOn {
			got[dep] = d.Condition
		}
		if !maps.Equal(got, deps) {
			t.Errorf("%s depends_on %v, want %v", name, got, deps)
		}
	}
	// Conditions on health need a healthcheck to become true.
	for _, name := range []string{"postgres", "temporal"} {
		if hc := service(t, p, name).HealthCheck; hc == nil || hc.Disable || len(hc.Test) == 0 {
			t.Errorf("%s has no healthcheck, but services wait for it to be healthy", name)
		}
	}
	// Mango's images have no shell and no curl: a healthcheck there cannot run.
	for _, name := range mangoServices {
		if hc := service(t, p, name).HealthCheck; hc != nil && !hc.Disable {
			t.Errorf("%s has healthcheck %v, which its FROM scratch image cannot run", name, hc.Test)
		}
	}
}

// TestComposeLoopbackOnly: every published port is bound to 127.0.0.1.
func TestComposeLoopbackOnly(t *testing.T) {
	t.Parallel()
	p := mustLoad(t)
	published := 0
	for _, s := range p.Services {
		for _, port := range s.Ports {
			published++
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %s:%s->%d, want host IP 127.0.0.1", s.Name, port.HostIP, port.Published, port.Target)
			}
		}
		if s.NetworkMode == "host" {
			t.Errorf("%s uses the host network", s.Name)
		}
	}
	api := service(t, p, "api-server")
	if len(api.Ports) != 1 || api.Ports[0].Target != 8080 || api.Ports[0].Published != "8080" {
		t.Errorf("api-server ports %+v, want only 127.0.0.1:8080->8080 (the gRPC ControlPlane stays internal)", api.Ports)
	}
	if published == 0 {
		t.Error("no published port at all")
	}
}

// TestComposeWorkers: the workers get the ControlPlane token, never the
// database, and each serves its provider.
func TestComposeWorkers(t *testing.T) {
	t.Parallel()
	p := mustLoad(t)
	api := service(t, p, "api-server")
	if !strings.HasPrefix(env(api, "MANGO_DATABASE_URL"), "postgres://mango:") {
		t.Errorf("api-server MANGO_DATABASE_URL = %q, want the postgres service", env(api, "MANGO_DATABASE_URL"))
	}
	password := exampleEnv(t)["POSTGRES_PASSWORD"]
	for name, provider := range workerServices {
		w := service(t, p, name)
		for k, v := range w.Environment {
			if k == "MANGO_DATABASE_URL" || (v != nil && (strings.Contains(*v, "postgres://") || strings.Contains(*v, password))) {
				t.Errorf("%s: %s reaches the database", name, k)
			}
		}
		for k, want := range map[string]string{
			"MANGO_SANDBOX":           provider,
			"MANGO_CONTROLPLANE_ADDR": "api-server:8081",
			"MANGO_TEMPORAL_HOSTPORT": env(api, "MANGO_TEMPORAL_HOSTPORT"),
			"MANGO_WORKER_TOKEN":      env(api, "MANGO_WORKER_TOKEN"),
		} {
			if got := env(w, k); got != want || got == "" {
				t.Errorf("%s: %s = %q, want %q", name, k, got, want)
			}
		}
		drain, err := time.ParseDuration(env(w, "MANGO_SHUTDOWN_GRACE"))
		if err != nil {
			t.Errorf("%s: MANGO_SHUTDOWN_GRACE: %v", name, err)
		} else if w.StopGracePeriod == nil || time.Duration(*w.StopGracePeriod) <= drain {
			t.Errorf("%s: stop_grace_period %v, want more than MANGO_SHUTDOWN_GRACE %s, so a draining worker is not killed", name, w.StopGracePeriod, drain)
		}
	}
	if m := env(service(t, p, "worker-local"), "MANGO_MODEL"); m != "fake" {
		t.Errorf("worker-local MANGO_MODEL = %q, want fake (a real model with the local sandbox is refused)", m)
	}
	docker := service(t, p, "worker-docker")
	sock := false
	for _, v := range docker.Volumes {
		if v.Type == types.VolumeTypeBind && v.Source == "/var/run/docker.sock" && v.Target == "/var/run/docker.sock" {
			sock = true
		}
	}
	if !sock {
		t.Errorf("worker-docker volumes %+v, want the host's /var/run/docker.sock", docker.Volumes)
	}
	if gid := exampleEnv(t)["DOCKER_GID"]; !slices.Equal(docker.GroupAdd, []string{gid}) {
		t.Errorf("worker-docker group_add %v, want [%s] (the socket's group)", docker.GroupAdd, gid)
	}
	providers := strings.Split(env(api, "MANGO_SANDBOX_PROVIDERS"), ",")
	if !slices.Contains(providers, env(api, "MANGO_SANDBOX")) {
		t.Errorf("api-server MANGO_SANDBOX %q not in MANGO_SANDBOX_PROVIDERS %v", env(api, "MANGO_SANDBOX"), providers)
	}
	for _, provider := range workerServices {
		if !slices.Contains(providers, provider) {
			t.Errorf("api-server MANGO_SANDBOX_PROVIDERS %v lacks the %s worker's provider", providers, provider)
		}
	}
	if key := env(api, "MANGO_API_KEY"); len(key) < 16 {
		t.Errorf("api-server MANGO_API_KEY %q from .env.example is shorter than the 16 characters the api-server requires", key)
	}
}

// TestComposeHardening: Mango's containers run read-only, with no
// capabilities and no privilege gain, and build from the repository.
func TestComposeHardening(t *testing.T) {
	t.Parallel()
	p := mustLoad(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range mangoServices {
		s := service(t, p, name)
		if !s.ReadOnly || !slices.Contains(s.CapDrop, "ALL") || !slices.Contains(s.SecurityOpt, "no-new-privileges:true") || s.Privileged {
			t.Errorf("%s: read_only %v cap_drop %v security_opt %v privileged %v, want read-only, drop ALL, no-new-privileges",
				name, s.ReadOnly, s.CapDrop, s.SecurityOpt, s.Privileged)
		}
		if !slices.Contains(s.Tmpfs, "/tmp") {
			t.Errorf("%s: tmpfs %v, want /tmp (the root is read-only)", name, s.Tmpfs)
		}
		if s.Image == "" || s.Build == nil {
			t.Errorf("%s: image %q build %v, want both (pull from a registry or build here)", name, s.Image, s.Build)
			continue
		}
		if s.Build.Context != root {
			t.Errorf("%s: build context %q, want the repository root %q", name, s.Build.Context, root)
		}
		dockerfile := filepath.Join(root, s.Build.Dockerfile)
		if !filepath.IsAbs(s.Build.Dockerfile) {
			dockerfile = filepath.Join(s.Build.Context, s.Build.Dockerfile)
		}
		b, err := os.ReadFile(dockerfile)
		if err != nil {
			t.Errorf("%s: dockerfile: %v", name, err)
			continue
		}
		stage := regexp.MustCompile(`(?im)^FROM\s+\S+\s+AS\s+` + regexp.QuoteMeta(s.Build.Target) + `\s*$`)
		if s.Build.Target == "" || !stage.Match(b) {
			t.Errorf("%s: build target %q is not a stage of %s", name, s.Build.Target, s.Build.Dockerfile)
		}
	}
}

// TestComposeTemporalDynamicConfig: Temporal runs with the dev server's
// tuning, from the file mounted where DYNAMIC_CONFIG_FILE_PATH points.
func TestComposeTemporalDynamicConfig(t *testing.T) {
	t.Parallel()
	p := mustLoad(t)
	tmp := service(t, p, "temporal")
	target := "/etc/temporal/" + env(tmp, "DYNAMIC_CONFIG_FILE_PATH")
	source := ""
	for _, v := range tmp.Volumes {
		if v.Target == target {
			source = v.Source
		}
	}
	if source == "" {
		t.Fatalf("temporal: nothing mounted at %s (DYNAMIC_CONFIG_FILE_PATH); volumes %+v", target, tmp.Volumes)
	}
	b, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string][]struct {
		Value       any            `json:"value"`
		Constraints map[string]any `json:"constraints"`
	}
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	for key, want := range map[string]any{
		"history.transferProcessorMaxPollRPS": float64(1000),
		"system.enableActivityEagerExecution": true,
	} {
		if v := cfg[key]; len(v) != 1 || v[0].Value != want {
			t.Errorf("%s: %s = %+v, want one value %v", source, key, v, want)
		}
	}
}

// TestComposeRequiresSecrets: without a secret in .env, loading fails
// with the message naming it.
func TestComposeRequiresSecrets(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"POSTGRES_PASSWORD", "MANGO_WORKER_TOKEN", "MANGO_API_KEY", "DOCKER_GID"} {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			env := exampleEnv(t)
			delete(env, key)
			_, err := load(t, env)
			if err == nil || !strings.Contains(err.Error(), "set "+key) {
				t.Errorf("compose.yaml without %s: error %v, want one saying to set it", key, err)
			}
		})
	}
}

// TestComposeVaultKeys: MANGO_VAULT_KEYS of .env reaches the api-server
// and no other service; without it (or empty, as in .env.example) the
// stack still loads and the api-server starts without keys.
func TestComposeVaultKeys(t *testing.T) {
	t.Parallel()
	const keys = "k2:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=,k1:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
	example := exampleEnv(t)
	if v, ok := example["MANGO_VAULT_KEYS"]; !ok || v != "" {
		t.Errorf(".env.example MANGO_VAULT_KEYS = %q (listed %v), want it listed and empty (a key must never be a shared default)", v, ok)
	}
	unset := exampleEnv(t)
	delete(unset, "MANGO_VAULT_KEYS")
	set := exampleEnv(t)
	set["MANGO_VAULT_KEYS"] = keys
	for name, tt := range map[string]struct {
		env  map[string]string
		want string
	}{
		"empty": {example, ""},
		"unset": {unset, ""},
		"set":   {set, keys},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := load(t, tt.env)
			if err != nil {
				t.Fatalf("load compose.yaml: %v", err)
			}
			api := service(t, p, "api-server")
			if v, ok := api.Environment["MANGO_VAULT_KEYS"]; !ok || v == nil || *v != tt.want {
				t.Errorf("api-server MANGO_VAULT_KEYS = %q (listed %v, with a value %v), want %q", env(api, "MANGO_VAULT_KEYS"), ok, v != nil, tt.want)
			}
			for _, s := range p.Services {
				if s.Name == "api-server" {
					continue
				}
				for k, v := range s.Environment {
					if k == "MANGO_VAULT_KEYS" || (v != nil && tt.want != "" && strings.Contains(*v, tt.want)) {
						t.Errorf("%s: %s carries the vault keys; only the api-server may", s.Name, k)
					}
				}
			}
		})
	}
}

// TestComposeMCPAllowPrivate: MANGO_MCP_ALLOW_PRIVATE of .env reaches the
// api-server and both workers, false when unset.
func TestComposeMCPAllowPrivate(t *testing.T) {
	t.Parallel()
	reachesEveryService(t, "MANGO_MCP_ALLOW_PRIVATE", "true", "false", nil)
}

// TestComposeTracing: the OTLP endpoint of .env reaches the api-server and
// both workers (tracing on); unset, it is empty (tracing off). The
// protocol is http/protobuf either way.
func TestComposeTracing(t *testing.T) {
	t.Parallel()
	reachesEveryService(t, "OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318", "", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
}

// reachesEveryService checks that key, set to value in .env, reaches the
// api-server and both workers, and is unsetWant there when .env lacks it;
// fixed are variables every service has either way.
func reachesEveryService(t *testing.T, key, value, unsetWant string, fixed map[string]string) {
	t.Helper()
	unset := exampleEnv(t)
	delete(unset, key)
	set := exampleEnv(t)
	set[key] = value
	for name, tt := range map[string]struct {
		env  map[string]string
		want string
	}{"unset": {unset, unsetWant}, "set": {set, value}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := load(t, tt.env)
			if err != nil {
				t.Fatalf("load compose.yaml: %v", err)
			}
			for _, s := range []string{"api-server", "worker-local", "worker-docker"} {
				svc := service(t, p, s)
				if got := env(svc, key); got != tt.want {
					t.Errorf("%s %s = %q, want %q", s, key, got, tt.want)
				}
				for k, want := range fixed {
					if got := env(svc, k); got != want {
						t.Errorf("%s %s = %q, want %q", s, k, got, want)
					}
				}
			}
		})
	}
}
