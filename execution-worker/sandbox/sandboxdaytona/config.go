package sandboxdaytona

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/internal/envconf"
)

// Name is the name the Daytona provider is registered under.
const Name = "daytona"

// Environment variables read by [ConfigFromEnv].
const (
	EnvAPIKey           = "DAYTONA_API_KEY"
	EnvAPIURL           = "DAYTONA_API_URL"
	EnvTarget           = "DAYTONA_TARGET"
	EnvSnapshot         = "DAYTONA_SNAPSHOT"
	EnvImage            = "DAYTONA_IMAGE"
	EnvAutoPauseMinutes = "DAYTONA_AUTO_PAUSE_MINUTES"
	EnvExecTimeout      = sandbox.EnvExecTimeout
	EnvMaxOutput        = sandbox.EnvMaxOutput
)

// Defaults of [Config].
const (
	DefaultAPIURL           = "https://app.daytona.io/api"
	DefaultAutoPauseMinutes = 15
	DefaultExecTimeout      = sandbox.DefaultExecTimeout
	DefaultMaxOutput        = sandbox.DefaultMaxOutput
	DefaultStartTimeout     = 5 * time.Minute
)

// Config configures the provider. A zero field takes its default.
type Config struct {
	// APIKey is the Daytona API key (DAYTONA_API_KEY, required), sent as a
	// Bearer token to the control plane and the toolbox proxy.
	APIKey string
	// APIURL is the control plane's base URL (DAYTONA_API_URL, default
	// https://app.daytona.io/api).
	APIURL string
	// Target is the region sandboxes are created in (DAYTONA_TARGET; empty:
	// the organisation's default).
	Target string
	// Snapshot is the snapshot new sandboxes start from (DAYTONA_SNAPSHOT;
	// empty: the service's default). Exclusive with Image.
	Snapshot string
	// Image is a container image new sandboxes are built from
	// (DAYTONA_IMAGE), sent as a one-line Dockerfile "FROM <image>". A
	// Spec.Image overrides it.
	Image string
	// AutoPauseMinutes is the idle time after which Daytona stops the
	// sandbox, keeping its filesystem (DAYTONA_AUTO_PAUSE_MINUTES, default
	// 15; 0 in the environment disables auto-stop, stored here as -1).
	AutoPauseMinutes int
	// ExecTimeout is the default command timeout.
	ExecTimeout time.Duration
	// MaxOutput is the default cap of stdout and stderr, each, in bytes.
	MaxOutput int
	// StartTimeout bounds waiting for a sandbox to reach "started".
	StartTimeout time.Duration
	// PollInterval is the first interval between state polls (default
	// 250ms, doubling up to 2s).
	PollInterval time.Duration
	// RetryBase is the first backoff of a retried request (default 200ms);
	// RetryMax caps it (default 5s); Retries is the number of retries
	// (default 4).
	RetryBase, RetryMax time.Duration
	Retries             int
	// HTTPClient is the client used for every call (default: a client
	// without an overall timeout; contexts bound the calls).
	HTTPClient *http.Client
	// Labels are extra labels put on every sandbox (tests use them).
	Labels map[string]string
	// Installation is the installation id every sandbox is labelled with
	// (required; see [sandbox.ValidateInstallation]).
	Installation string
}

// Factory is the registry entry for the Daytona provider. Sandboxes are
// remote and reachable from any worker. Configure reads [ConfigFromEnv];
// nothing contacts the service before the first sandbox call.
var Factory = sandbox.Factory{
	Traits:    sandbox.Traits{RunsOnHost: false, HostBound: false},
	Configure: sandbox.FromEnv(ConfigFromEnv, New, func(c *Config, id string) { c.Installation = id }),
}

// envVars are the provider's variables as env reads them.
type envVars struct {
	APIKey           string `env:"DAYTONA_API_KEY"`
	APIURL           string `env:"DAYTONA_API_URL"`
	Target           string `env:"DAYTONA_TARGET"`
	Snapshot         string `env:"DAYTONA_SNAPSHOT"`
	Image            string `env:"DAYTONA_IMAGE"`
	AutoPauseMinutes int    `env:"DAYTONA_AUTO_PAUSE_MINUTES"`
}

// envParsers refuse a negative number of minutes.
var envParsers = envconf.Parsers{reflect.TypeFor[int](): func(v string) (any, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return nil, errors.New("not a non-negative number")
	}
	return n, nil
}}

// ConfigFromEnv reads the configuration through getenv. The error names
// every missing or invalid variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	v := envVars{AutoPauseMinutes: -1}
	errs := sandbox.ReadEnv(&v, getenv,
		map[string]string{EnvAutoPauseMinutes: "want a non-negative number of minutes (0: never)"}, envParsers)
	cfg := Config{APIKey: v.APIKey, APIURL: v.APIURL, Target: v.Target, Snapshot: v.Snapshot, Image: v.Image}
	if cfg.APIKey == "" {
		errs = append(errs, fmt.Errorf("%s is required for the %s sandbox provider", EnvAPIKey, Name))
	}
	if cfg.APIURL != "" && !strings.HasPrefix(cfg.APIURL, "https://") && !strings.HasPrefix(cfg.APIURL, "http://") {
		errs = append(errs, fmt.Errorf("%s=%q: want an http:// or https:// URL", EnvAPIURL, cfg.APIURL))
	}
	if cfg.Snapshot != "" && cfg.Image != "" {
		errs = append(errs, fmt.Errorf("%s and %s are exclusive: set one", EnvSnapshot, EnvImage))
	}
	switch v.AutoPauseMinutes {
	case -1: // unset: the default
	case 0:
		cfg.AutoPauseMinutes = -1
	default:
		cfg.AutoPauseMinutes = v.AutoPauseMinutes
	}
	errs = append(errs, sandbox.ReadLimits(getenv, &cfg.ExecTimeout, &cfg.MaxOutput))
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func (c Config) withDefaults() Config {
	c.APIURL = strings.TrimRight(cmp.Or(c.APIURL, DefaultAPIURL), "/")
	c.AutoPauseMinutes = defaults.Limit(c.AutoPauseMinutes, DefaultAutoPauseMinutes)
	c.ExecTimeout = defaults.Positive(c.ExecTimeout, DefaultExecTimeout)
	c.MaxOutput = defaults.Positive(c.MaxOutput, DefaultMaxOutput)
	c.StartTimeout = defaults.Positive(c.StartTimeout, DefaultStartTimeout)
	c.PollInterval = defaults.Positive(c.PollInterval, 250*time.Millisecond)
	c.RetryBase = defaults.Positive(c.RetryBase, httpcall.DefaultBase)
	c.RetryMax = defaults.Positive(c.RetryMax, httpcall.DefaultMax)
	c.Retries = defaults.Positive(c.Retries, httpcall.DefaultRetries)
	c.HTTPClient = cmp.Or(c.HTTPClient, &http.Client{})
	return c
}
