package sandboxdocker

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	units "github.com/docker/go-units"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/internal/envconf"
)

// Environment variables read by [ConfigFromEnv]. The Docker client itself
// also reads DOCKER_HOST, DOCKER_API_VERSION, DOCKER_CERT_PATH and
// DOCKER_TLS_VERIFY, and registry credentials come from DOCKER_CONFIG.
const (
	EnvImage       = "MANGO_SANDBOX_IMAGE"
	EnvCPUs        = "MANGO_DOCKER_CPUS"
	EnvMemory      = "MANGO_DOCKER_MEMORY"
	EnvPids        = "MANGO_DOCKER_PIDS"
	EnvNetwork     = "MANGO_DOCKER_NETWORK"
	EnvLabels      = "MANGO_DOCKER_LABELS"
	EnvWarmPool    = "MANGO_DOCKER_WARM_POOL"
	EnvExecTimeout = sandbox.EnvExecTimeout
	EnvMaxOutput   = sandbox.EnvMaxOutput
	EnvDockerCfg   = "DOCKER_CONFIG"
)

// Defaults of [Config].
const (
	DefaultImage       = "mango-sandbox:latest"
	DefaultCPUs        = 1.0
	DefaultMemory      = 1 << 30 // 1 GiB
	DefaultPids        = 512
	DefaultNetwork     = "none"
	DefaultExecTimeout = sandbox.DefaultExecTimeout
	DefaultMaxOutput   = sandbox.DefaultMaxOutput
)

// MaxWarmPool bounds MANGO_DOCKER_WARM_POOL.
const MaxWarmPool = 64

// Config configures the provider. The zero value of a field means its
// default; [ConfigFromEnv] fills it from the environment.
type Config struct {
	// Image is the default container image (MANGO_SANDBOX_IMAGE), used when
	// a Spec names none.
	Image string
	// CPUs limits the container's CPU time in cores (MANGO_DOCKER_CPUS,
	// default 1; a negative value means no limit).
	CPUs float64
	// Memory limits the container's memory in bytes, swap included
	// (MANGO_DOCKER_MEMORY: bytes or 512m, 1g; default 1g; a negative value
	// means no limit).
	Memory int64
	// Pids limits the number of processes in the container
	// (MANGO_DOCKER_PIDS, default 512; a negative value means no limit).
	Pids int64
	// Network is the container's network mode (MANGO_DOCKER_NETWORK): "none"
	// (default) or "bridge".
	Network string
	// ExecTimeout is the default command timeout (MANGO_SANDBOX_EXEC_TIMEOUT,
	// default 2m).
	ExecTimeout time.Duration
	// MaxOutput is the default cap of stdout and stderr, each, in bytes
	// (MANGO_SANDBOX_MAX_OUTPUT, default 1 MiB).
	MaxOutput int
	// DockerConfig is the directory holding config.json for registry
	// credentials (DOCKER_CONFIG; empty: ~/.docker at pull time).
	DockerConfig string
	// Labels are extra labels put on every container, and required of
	// every container the provider lists (MANGO_DOCKER_LABELS, "k=v,k2=v2").
	// Tests sharing one Docker daemon set different values, so that each
	// reconciler sees only its own containers. (Installations need not:
	// the installation label keeps them apart.)
	Labels map[string]string
	// Installation is the installation id every container is labelled
	// with (mango.installation; required, see
	// [sandbox.ValidateInstallation]). The worker gets it from the
	// ControlPlane.
	Installation string

	// WarmPool is how many ready containers of the default image the
	// provider keeps for new sessions (MANGO_DOCKER_WARM_POOL, default 0:
	// none; at most [MaxWarmPool]). See the package documentation.
	WarmPool int

	// warmLease and warmEvery override the pool's timing in tests.
	warmLease, warmEvery time.Duration
}

// envVars are the provider's variables as env reads them. A limit keeps
// notSet when its variable is unset: the parsers refuse negative values.
type envVars struct {
	Image        string   `env:"MANGO_SANDBOX_IMAGE"`
	DockerConfig string   `env:"DOCKER_CONFIG"`
	CPUs         float64  `env:"MANGO_DOCKER_CPUS"`
	Memory       ramBytes `env:"MANGO_DOCKER_MEMORY"`
	Pids         int64    `env:"MANGO_DOCKER_PIDS"`
	Network      string   `env:"MANGO_DOCKER_NETWORK"`
	Labels       string   `env:"MANGO_DOCKER_LABELS"`
	WarmPool     int      `env:"MANGO_DOCKER_WARM_POOL"`
}

// ramBytes is a size in bytes or such as 512m or 1g.
type ramBytes int64

const notSet = -1

// envWant says what each variable wants, for a value refused.
var envWant = map[string]string{
	EnvCPUs:     "want a non-negative number of CPUs such as 1.5 (0: no limit)",
	EnvMemory:   "want bytes or a size such as 512m or 1g (0: no limit)",
	EnvPids:     "want a non-negative integer (0: no limit)",
	EnvWarmPool: fmt.Sprintf("want a number of containers from 0 (no pool) to %d", MaxWarmPool),
}

// envParsers parse the variables' types, refusing values out of range.
var envParsers = envconf.Parsers{
	reflect.TypeFor[float64](): func(v string) (any, error) {
		f, err := strconv.ParseFloat(v, 64)
		return f, cmp.Or(err, refuseIf(f < 0))
	},
	reflect.TypeFor[ramBytes](): func(v string) (any, error) {
		n, err := units.RAMInBytes(v)
		return ramBytes(n), cmp.Or(err, refuseIf(n < 0))
	},
	reflect.TypeFor[int64](): func(v string) (any, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		return n, cmp.Or(err, refuseIf(n < 0))
	},
	reflect.TypeFor[int](): func(v string) (any, error) {
		n, err := strconv.Atoi(v)
		return n, cmp.Or(err, refuseIf(n < 0 || n > MaxWarmPool))
	},
}

var errOutOfRange = errors.New("out of range")

// refuseIf is errOutOfRange when bad.
func refuseIf(bad bool) error {
	if bad {
		return errOutOfRange
	}
	return nil
}

// ConfigFromEnv reads the provider configuration from getenv (os.Getenv when
// nil). The error names every invalid variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	v := envVars{CPUs: notSet, Memory: notSet, Pids: notSet}
	errs := sandbox.ReadEnv(&v, getenv, envWant, envParsers)
	cfg := Config{Image: v.Image, DockerConfig: v.DockerConfig, Network: v.Network, WarmPool: v.WarmPool}
	if v.CPUs != notSet {
		cfg.CPUs = unlimitedIfZero(v.CPUs)
	}
	if v.Memory > 0 && v.Memory < 6<<20 {
		errs = append(errs, sandbox.EnvError(EnvMemory, strings.TrimSpace(getenv(EnvMemory)), "Docker needs at least 6m"))
	} else if v.Memory != notSet {
		cfg.Memory = int64(unlimitedIfZero(float64(v.Memory)))
	}
	if v.Pids != notSet {
		cfg.Pids = int64(unlimitedIfZero(float64(v.Pids)))
	}
	if v.Network != "" {
		errs = append(errs, checkNetwork(v.Network))
	}
	if v.Labels != "" {
		labels, err := parseLabels(v.Labels)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvLabels, v.Labels, err))
		}
		cfg.Labels = labels
	}
	errs = append(errs, sandbox.ReadLimits(getenv, &cfg.ExecTimeout, &cfg.MaxOutput))
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// unlimitedIfZero maps the environment's "0: no limit" to Config's
// negative "no limit" (zero in Config means the default).
func unlimitedIfZero(f float64) float64 {
	if f == 0 {
		return -1
	}
	return f
}

// parseLabels parses "k=v,k2=v2"; the provider's own label keys are
// refused.
func parseLabels(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		k = strings.TrimSpace(k)
		switch {
		case !ok || k == "" || strings.TrimSpace(val) == "":
			return nil, fmt.Errorf("want comma-separated key=value pairs, got %q", pair)
		case k == LabelManaged || k == LabelKeyHash || k == LabelCreatedAt || k == LabelInstallation || k == LabelWarm:
			return nil, fmt.Errorf("label %q is set by the provider", k)
		}
		out[k] = strings.TrimSpace(val)
	}
	return out, nil
}

func checkNetwork(v string) error {
	switch v {
	case "none", "bridge":
		return nil
	}
	return fmt.Errorf("%s=%q: want none or bridge", EnvNetwork, v)
}

func (c Config) withDefaults() Config {
	c.Image = cmp.Or(c.Image, DefaultImage)
	c.CPUs = defaults.Limit(c.CPUs, DefaultCPUs)
	c.Memory = defaults.Limit(c.Memory, DefaultMemory)
	c.Pids = defaults.Limit(c.Pids, DefaultPids)
	c.Network = cmp.Or(c.Network, DefaultNetwork)
	c.ExecTimeout = defaults.Positive(c.ExecTimeout, DefaultExecTimeout)
	c.MaxOutput = defaults.Positive(c.MaxOutput, DefaultMaxOutput)
	return c
}

func (c Config) validate() error {
	if c.WarmPool < 0 || c.WarmPool > MaxWarmPool {
		return fmt.Errorf("warm pool of %d containers: want 0 to %d", c.WarmPool, MaxWarmPool)
	}
	return errors.Join(checkNetwork(c.Network), sandbox.ValidateInstallation(c.Installation))
}
