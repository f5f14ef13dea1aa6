// Package sandboxcube is the "cube" sandbox provider for Tencent
// CubeSandbox, a self-hosted, E2B-compatible microVM (KVM) service. It uses
// the same protocol client as the "e2b" provider (internal/e2bproto), with
// Cube's differences:
//
//   - authentication is optional: CUBE_API_KEY, when set, is sent as a
//     Bearer token, or as X-API-Key with CUBE_AUTH_HEADER=x-api-key;
//   - envd needs no access token;
//   - envd is reached at <scheme>://49983-<sandboxID>.<domain> (wildcard
//     DNS to CubeProxy), or, without wildcard DNS, by dialling
//     CUBE_PROXY_ADDR (ip:port of a CubeProxy node) with the sandbox host in
//     the Host header;
//   - sandboxes are not auto-paused: one idle past CUBE_IDLE_TIMEOUT is
//     gone, and its session fails explicitly (ErrNotFound).
//
// # Configuration
//
// CUBE_API_URL and CUBE_TEMPLATE_ID (required); CUBE_API_KEY,
// CUBE_AUTH_HEADER (bearer or x-api-key, default bearer),
// CUBE_SANDBOX_DOMAIN (default cube.app), CUBE_PROXY_ADDR,
// CUBE_PROXY_SCHEME (http or https; default http with CUBE_PROXY_ADDR,
// https without), CUBE_IDLE_TIMEOUT (default 15m),
// MANGO_SANDBOX_EXEC_TIMEOUT and MANGO_SANDBOX_MAX_OUTPUT.
package sandboxcube

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/e2bproto"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxe2b"
)

// Name is the name the provider is registered under.
const Name = "cube"

// Environment variables read by [ConfigFromEnv].
const (
	EnvAPIURL      = "CUBE_API_URL"
	EnvTemplateID  = "CUBE_TEMPLATE_ID"
	EnvAPIKey      = "CUBE_API_KEY"
	EnvAuthHeader  = "CUBE_AUTH_HEADER"
	EnvDomain      = "CUBE_SANDBOX_DOMAIN"
	EnvProxyAddr   = "CUBE_PROXY_ADDR"
	EnvProxyScheme = "CUBE_PROXY_SCHEME"
	EnvIdleTimeout = "CUBE_IDLE_TIMEOUT"
)

// DefaultDomain is CubeSandbox's default sandbox domain.
const DefaultDomain = "cube.app"

// Factory is the registry entry of the cube provider.
var Factory = sandbox.Factory{
	Traits:    sandbox.Traits{},
	Configure: sandbox.FromEnv(ConfigFromEnv, New, func(c *e2bproto.Config, id string) { c.Installation = id }),
}

// envVars are the provider's variables as env reads them.
type envVars struct {
	APIURL      string        `env:"CUBE_API_URL"`
	TemplateID  string        `env:"CUBE_TEMPLATE_ID"`
	APIKey      string        `env:"CUBE_API_KEY"`
	AuthHeader  string        `env:"CUBE_AUTH_HEADER"`
	Domain      string        `env:"CUBE_SANDBOX_DOMAIN"`
	ProxyAddr   string        `env:"CUBE_PROXY_ADDR"`
	ProxyScheme string        `env:"CUBE_PROXY_SCHEME"`
	IdleTimeout time.Duration `env:"CUBE_IDLE_TIMEOUT"`
}

// ConfigFromEnv reads the configuration through getenv. The error names
// every missing or invalid variable.
func ConfigFromEnv(getenv func(string) string) (e2bproto.Config, error) {
	cfg := e2bproto.Config{
		Name:       Name,
		Auth:       e2bproto.AuthBearer,
		EnvdScheme: "https",
		AutoPause:  false,
		UseConnect: false,
		ListPath:   "/sandboxes",
		// Packages install through the sandbox's own network.
		Capabilities: []string{sandbox.CapabilityPackages},
	}
	v := envVars{Domain: DefaultDomain}
	errs := sandbox.ReadEnv(&v, getenv, map[string]string{EnvIdleTimeout: sandboxe2b.WantIdleTimeout}, sandboxe2b.IdleTimeoutParsers)
	cfg.APIURL, cfg.TemplateID, cfg.APIKey, cfg.Domain, cfg.IdleTimeout = v.APIURL, v.TemplateID, v.APIKey, v.Domain, v.IdleTimeout
	switch {
	case cfg.APIURL == "":
		errs = append(errs, fmt.Errorf("%s is required (the Cube API server URL, e.g. http://10.0.0.5:3000)", EnvAPIURL))
	case !strings.HasPrefix(cfg.APIURL, "http://") && !strings.HasPrefix(cfg.APIURL, "https://"):
		errs = append(errs, fmt.Errorf("%s=%q: want an http(s) URL", EnvAPIURL, cfg.APIURL))
	}
	if cfg.TemplateID == "" {
		errs = append(errs, fmt.Errorf("%s is required (the Cube template id)", EnvTemplateID))
	}
	switch a := strings.ToLower(v.AuthHeader); a {
	case "", "bearer", "authorization":
	case "x-api-key":
		cfg.Auth = e2bproto.AuthAPIKey
	default:
		errs = append(errs, fmt.Errorf("%s=%q: want bearer or x-api-key", EnvAuthHeader, a))
	}
	if v.ProxyAddr != "" {
		if _, _, err := net.SplitHostPort(v.ProxyAddr); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want host:port (e.g. 10.0.0.5:80)", EnvProxyAddr, v.ProxyAddr))
		}
		cfg.EnvdProxyAddr = v.ProxyAddr
		cfg.EnvdScheme = "http"
	}
	switch scheme := strings.ToLower(v.ProxyScheme); scheme {
	case "":
	case "http", "https":
		cfg.EnvdScheme = scheme
	default:
		errs = append(errs, fmt.Errorf("%s=%q: want http or https", EnvProxyScheme, scheme))
	}
	errs = append(errs, sandbox.ReadLimits(getenv, &cfg.ExecTimeout, &cfg.MaxOutput))
	if err := errors.Join(errs...); err != nil {
		return e2bproto.Config{}, err
	}
	return cfg, nil
}

// New returns a provider for cfg (usually from [ConfigFromEnv]).
func New(cfg e2bproto.Config) (*e2bproto.Provider, error) {
	return e2bproto.New(cfg)
}
