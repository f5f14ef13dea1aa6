// Package sandboxe2b is the "e2b" sandbox provider: each session gets one
// E2B sandbox (a Firecracker microVM of the managed E2B service).
//
// The provider speaks E2B's published protocol directly (package
// internal/e2bproto, shared with the "cube" provider): the REST control
// plane authenticated with X-API-Key (create, connect, get, list, kill,
// timeout) and envd, the in-sandbox agent at
// https://49983-<sandboxID>.<domain>, for commands (process.Process/Start,
// a Connect server stream with the JSON codec) and files (/files).
//
//   - Ownership: every sandbox carries the metadata
//     mango.session_key_hash=<sandbox.KeyHash(key)> and
//     mango.installation=<installation id>; Create finds a sandbox by
//     them before creating one, Attach verifies them. Sandboxes of other
//     installations sharing the account are never listed, attached or
//     killed; legacy ones without mango.installation are used only
//     through this installation's bindings.
//   - Lifecycle: sandboxes are created with autoPause, so an idle sandbox
//     pauses (keeping its filesystem) at E2B_IDLE_TIMEOUT instead of dying;
//     Attach connects, resuming it. The timeout is refreshed while the
//     session is active (every operation, and periodically during long
//     commands).
//   - Commands run as /bin/sh -c in $HOME/workspace under setsid; a
//     cancellation or timeout kills their process group from a second
//     process.
//
// # Configuration
//
// E2B_API_KEY (required), E2B_API_URL (default https://api.e2b.app),
// E2B_TEMPLATE_ID (default "base"), E2B_DOMAIN (default e2b.app; the
// domain returned by the service takes precedence), E2B_IDLE_TIMEOUT
// (default 15m), MANGO_SANDBOX_EXEC_TIMEOUT and MANGO_SANDBOX_MAX_OUTPUT.
package sandboxe2b

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/e2bproto"
	"github.com/mangohq/mango/internal/envconf"
)

// Name is the name the provider is registered under.
const Name = "e2b"

// Environment variables read by [ConfigFromEnv].
const (
	EnvAPIKey      = "E2B_API_KEY"
	EnvAPIURL      = "E2B_API_URL"
	EnvTemplateID  = "E2B_TEMPLATE_ID"
	EnvDomain      = "E2B_DOMAIN"
	EnvIdleTimeout = "E2B_IDLE_TIMEOUT"
	EnvExecTimeout = sandbox.EnvExecTimeout
	EnvMaxOutput   = sandbox.EnvMaxOutput
)

// Defaults.
const (
	DefaultAPIURL     = "https://api.e2b.app"
	DefaultTemplateID = "base"
	DefaultDomain     = "e2b.app"
)

// Factory is the registry entry of the e2b provider: remote, not bound to
// the worker's host.
var Factory = sandbox.Factory{
	Traits:    sandbox.Traits{},
	Configure: sandbox.FromEnv(ConfigFromEnv, New, func(c *e2bproto.Config, id string) { c.Installation = id }),
}

// envVars are the provider's variables as env reads them.
type envVars struct {
	APIKey      string        `env:"E2B_API_KEY"`
	APIURL      string        `env:"E2B_API_URL"`
	TemplateID  string        `env:"E2B_TEMPLATE_ID"`
	Domain      string        `env:"E2B_DOMAIN"`
	IdleTimeout time.Duration `env:"E2B_IDLE_TIMEOUT"`
}

// ConfigFromEnv reads the configuration through getenv. The error names
// every missing or invalid variable.
func ConfigFromEnv(getenv func(string) string) (e2bproto.Config, error) {
	cfg := Defaults()
	v := envVars{APIURL: cfg.APIURL, TemplateID: cfg.TemplateID, Domain: cfg.Domain}
	errs := sandbox.ReadEnv(&v, getenv, map[string]string{EnvIdleTimeout: WantIdleTimeout}, IdleTimeoutParsers)
	cfg.APIKey, cfg.APIURL, cfg.TemplateID, cfg.Domain = v.APIKey, v.APIURL, v.TemplateID, v.Domain
	if cfg.APIKey == "" {
		errs = append(errs, fmt.Errorf("%s is required (the E2B API key)", EnvAPIKey))
	}
	if !strings.HasPrefix(cfg.APIURL, "http://") && !strings.HasPrefix(cfg.APIURL, "https://") {
		errs = append(errs, fmt.Errorf("%s=%q: want an http(s) URL", EnvAPIURL, cfg.APIURL))
	}
	cfg.IdleTimeout = v.IdleTimeout
	errs = append(errs, sandbox.ReadLimits(getenv, &cfg.ExecTimeout, &cfg.MaxOutput))
	if err := errors.Join(errs...); err != nil {
		return e2bproto.Config{}, err
	}
	return cfg, nil
}

// Defaults returns the e2b configuration without credentials.
func Defaults() e2bproto.Config {
	return e2bproto.Config{
		Name:         Name,
		APIURL:       DefaultAPIURL,
		Auth:         e2bproto.AuthAPIKey,
		TemplateID:   DefaultTemplateID,
		Domain:       DefaultDomain,
		EnvdScheme:   "https",
		AutoPause:    true,
		UseConnect:   true,
		ListPath:     "/v2/sandboxes",
		Capabilities: []string{sandbox.CapabilityPauseResume, sandbox.CapabilityPackages},
	}
}

// WantIdleTimeout says what an idle timeout variable (E2B_IDLE_TIMEOUT,
// CUBE_IDLE_TIMEOUT) wants, for a value refused by [IdleTimeoutParsers].
const WantIdleTimeout = "want a duration of at least 10s such as 15m"

// IdleTimeoutParsers parse an idle timeout of at least 10s, for
// [sandbox.ReadEnv].
var IdleTimeoutParsers = envconf.Parsers{reflect.TypeFor[time.Duration](): func(v string) (any, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 10*time.Second {
		return nil, errors.New("too short")
	}
	return d, nil
}}

// New returns a provider for cfg (usually from [ConfigFromEnv]).
func New(cfg e2bproto.Config) (*e2bproto.Provider, error) {
	return e2bproto.New(cfg)
}
