package sandboxopensandbox

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Environment variables read by [ConfigFromEnv].
const (
	EnvDomain         = "OPEN_SANDBOX_DOMAIN"
	EnvAPIKey         = "OPEN_SANDBOX_API_KEY"
	EnvImage          = "OPEN_SANDBOX_IMAGE"
	EnvUseServerProxy = "OPEN_SANDBOX_USE_SERVER_PROXY"
	EnvExecTimeout    = sandbox.EnvExecTimeout
	EnvMaxOutput      = sandbox.EnvMaxOutput
)

// Defaults of [Config].
const (
	DefaultImage        = "ubuntu:24.04"
	DefaultCPU          = "1"
	DefaultMemory       = "1Gi"
	DefaultExecTimeout  = sandbox.DefaultExecTimeout
	DefaultMaxOutput    = sandbox.DefaultMaxOutput
	DefaultReadyTimeout = 3 * time.Minute
)

// Config configures the provider. Zero fields take their defaults.
type Config struct {
	// Domain is the lifecycle server (OPEN_SANDBOX_DOMAIN), host[:port] or
	// a URL; without a scheme http is used. Required.
	Domain string
	// APIKey is sent as OPEN-SANDBOX-API-KEY (OPEN_SANDBOX_API_KEY).
	APIKey string
	// Image is the default image (OPEN_SANDBOX_IMAGE).
	Image string
	// UseServerProxy asks for server-proxied execd endpoints
	// (OPEN_SANDBOX_USE_SERVER_PROXY), for workers that cannot reach
	// sandboxes directly.
	UseServerProxy bool
	// CPU and Memory are the resourceLimits of created sandboxes.
	CPU, Memory string
	// ExecTimeout and MaxOutput are the command defaults.
	ExecTimeout time.Duration
	MaxOutput   int
	// ReadyTimeout bounds the wait for a sandbox to become Running.
	ReadyTimeout time.Duration
	// PollInterval is the first interval of the Running poll (default
	// 100ms, doubling up to 1s).
	PollInterval time.Duration
	// RetryBase, RetryMax and MaxAttempts shape retries of idempotent
	// calls on 5xx and 429 (defaults 200ms, 5s, 5).
	RetryBase, RetryMax time.Duration
	MaxAttempts         int
	// HTTPClient is the client used (default: a new http.Client).
	HTTPClient *http.Client
	// Labels are extra metadata put on every sandbox and used to scope
	// List (tests use them to see only their own sandboxes).
	Labels map[string]string
	// Installation is the installation id recorded in every sandbox's
	// metadata (required; see [sandbox.ValidateInstallation]).
	Installation string
}

// envVars are the provider's variables as env reads them.
type envVars struct {
	Domain         string `env:"OPEN_SANDBOX_DOMAIN"`
	APIKey         string `env:"OPEN_SANDBOX_API_KEY"`
	Image          string `env:"OPEN_SANDBOX_IMAGE"`
	UseServerProxy bool   `env:"OPEN_SANDBOX_USE_SERVER_PROXY"`
}

// ConfigFromEnv reads the configuration through getenv (os.Getenv when
// nil). Errors name every missing or invalid variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var v envVars
	errs := sandbox.ReadEnv(&v, getenv, map[string]string{EnvUseServerProxy: "want true or false"}, nil)
	cfg := Config{Domain: v.Domain, APIKey: v.APIKey, Image: v.Image, UseServerProxy: v.UseServerProxy}
	if cfg.Domain == "" {
		errs = append(errs, fmt.Errorf("%s is required (the OpenSandbox lifecycle server, e.g. localhost:8080)", EnvDomain))
	} else if _, err := baseURL(cfg.Domain); err != nil {
		errs = append(errs, fmt.Errorf("%s=%q: %w", EnvDomain, cfg.Domain, err))
	}
	errs = append(errs, sandbox.ReadLimits(getenv, &cfg.ExecTimeout, &cfg.MaxOutput))
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func (c Config) withDefaults() Config {
	c.Image = cmp.Or(c.Image, DefaultImage)
	c.CPU = cmp.Or(c.CPU, DefaultCPU)
	c.Memory = cmp.Or(c.Memory, DefaultMemory)
	c.ExecTimeout = defaults.Positive(c.ExecTimeout, DefaultExecTimeout)
	c.MaxOutput = defaults.Positive(c.MaxOutput, DefaultMaxOutput)
	c.ReadyTimeout = defaults.Positive(c.ReadyTimeout, DefaultReadyTimeout)
	c.PollInterval = defaults.Positive(c.PollInterval, 100*time.Millisecond)
	c.RetryBase = defaults.Positive(c.RetryBase, httpcall.DefaultBase)
	c.RetryMax = defaults.Positive(c.RetryMax, httpcall.DefaultMax)
	c.MaxAttempts = defaults.Positive(c.MaxAttempts, 1+httpcall.DefaultRetries)
	c.HTTPClient = cmp.Or(c.HTTPClient, &http.Client{})
	return c
}

// baseURL turns a domain into the server's base URL (no trailing slash).
func baseURL(domain string) (*url.URL, error) {
	d := strings.TrimRight(strings.TrimSpace(domain), "/")
	if !strings.Contains(d, "://") {
		d = "http://" + d
	}
	u, err := url.Parse(d)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("unsupported scheme %q (want http or https)", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	return u, nil
}
