package config_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/config"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/internal/tlsconf"
	"github.com/mangohq/mango/internal/tlsconf/tlsconftest"
)

func registry() *sandbox.Registry {
	reg := &sandbox.Registry{}
	reg.Register(sandboxlocal.Name, sandboxlocal.Factory)
	reg.Register(sandboxdocker.Name, sandboxdocker.Factory)
	return reg
}

// envFunc serves env, with a worker token unless env sets one (possibly
// empty), since every valid configuration needs it.
func envFunc(env map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		if k == config.EnvWorkerToken {
			return "default-token"
		}
		return ""
	}
}

func TestWorkerTokenRequired(t *testing.T) {
	t.Parallel()
	_, err := config.FromEnv(envFunc(map[string]string{config.EnvWorkerToken: ""}), registry())
	if err == nil || !strings.Contains(err.Error(), "MANGO_WORKER_TOKEN: is required") {
		t.Fatalf("FromEnv without a token = %v, want an error naming MANGO_WORKER_TOKEN", err)
	}
}

func TestFromEnvDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.FromEnv(envFunc(nil), registry())
	if err != nil {
		t.Fatalf("FromEnv(empty env) = %v, want no error", err)
	}
	host, _ := os.Hostname()
	wantID := host + "-"
	checks := []struct {
		name      string
		got, want any
	}{
		{"TemporalHostPort", c.TemporalHostPort, "127.0.0.1:7233"},
		{"TemporalNamespace", c.TemporalNamespace, "default"},
		{"TemporalConnectTimeout", c.TemporalConnectTimeout, 10 * time.Second},
		{"Sandbox", c.Sandbox, "local"},
		{"SandboxVar", c.SandboxVar, ""},
		{"Model", c.Model, config.ModelFake},
		{"ModelBaseURL", c.ModelBaseURL, "https://api.anthropic.com"},
		{"ModelAPIKey", c.ModelAPIKey, ""},
		{"ModelAuth", c.ModelAuth, config.AuthXAPIKey},
		{"ModelID", c.ModelID, ""},
		{"AllowUnsafeLocalSandbox", c.AllowUnsafeLocalSandbox, false},
		{"ControlPlaneAddr", c.ControlPlaneAddr, "127.0.0.1:8081"},
		{"WorkerToken", c.WorkerToken, "default-token"},
		{"LogLevel", c.LogLevel, slog.LevelInfo},
		{"LogFormat", c.LogFormat, config.LogText},
		{"ShutdownGrace", c.ShutdownGrace, 25 * time.Second},
		{"ControlPlaneRetry", c.ControlPlaneRetry, 30 * time.Second},
		{"SelfHostedToolTimeout", c.SelfHostedToolTimeout, 120 * time.Second},
		{"SandboxLocality", c.SandboxLocality, ""},
		{"WorkerIDSet", c.WorkerIDSet, false},
		{"ControlPlaneTLS", c.ControlPlaneTLS, (*tlsconf.Client)(nil)},
		{"TemporalTLS", c.TemporalTLS, (*tlsconf.Client)(nil)},
		{"RunsOnHost", c.SandboxFactory.Traits.RunsOnHost, true},
		{"UnsafeLocalSandbox()", c.UnsafeLocalSandbox(), false},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if !strings.HasPrefix(c.WorkerID, wantID) || len(c.WorkerID) == len(wantID) {
		t.Errorf("WorkerID = %q, want %q followed by the pid", c.WorkerID, wantID)
	}
}

// validCase is one environment FromEnv accepts and what it must yield.
type validCase struct {
	name  string
	env   map[string]string
	check func(t *testing.T, c *config.Config)
}

func TestFromEnvValid(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	tests := []validCase{validAllVariablesCase()}
	tests = append(tests, validSandboxAndModelCases()...)
	tests = append(tests, validTLSAndLogCases(pki)...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.FromEnv(envFunc(tt.env), registry())
			if err != nil {
				t.Fatalf("FromEnv(%v) = %v, want no error", tt.env, err)
			}
			tt.check(t, c)
		})
	}
}

// validAllVariablesCase sets every variable and checks the whole Config.
func validAllVariablesCase() validCase {
	return validCase{
		name: "all variables set",
		env: map[string]string{
			"MANGO_TEMPORAL_HOSTPORT":          "temporal.internal:7233",
			"MANGO_TEMPORAL_NAMESPACE":         "mango",
			"MANGO_TEMPORAL_CONNECT_TIMEOUT":   "3s",
			"MANGO_SANDBOX":                    "docker",
			"MANGO_MODEL":                      "anthropic",
			"MANGO_MODEL_BASE_URL":             "http://proxy.internal:8080/",
			"MANGO_MODEL_API_KEY":              "sk-test",
			"MANGO_MODEL_AUTH":                 "bearer",
			"MANGO_MODEL_ID":                   "claude-test",
			"MANGO_MODEL_CONTEXT_WINDOW":       "150000",
			"MANGO_COMPACTION_MODEL":           "claude-haiku-4-5",
			"MANGO_OUTCOME_GRADER_MODEL":       "claude-opus-4-5",
			"MANGO_COMPACTION_THRESHOLD":       "0.75",
			"MANGO_OUTPUTS_MAX_FILES":          "7",
			"MANGO_OUTPUTS_MAX_BYTES":          "1048576",
			"MANGO_TRANSCRIPT_CACHE_BYTES":     "2097152",
			"MANGO_MCP_ALLOW_PRIVATE":          "1",
			"MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "0",
			"MANGO_CONTROLPLANE_ADDR":          "api:8081",
			"MANGO_WORKER_TOKEN":               "tok",
			"MANGO_WORKER_ID":                  "w-1",
			"MANGO_LOG_LEVEL":                  "debug",
			"MANGO_LOG_FORMAT":                 "json",
			"MANGO_SHUTDOWN_GRACE":             "1m30s",
			"MANGO_SANDBOX_LOCALITY":           "rack-7",
			"MANGO_CONTROLPLANE_RETRY":         "45s",
			"MANGO_SELF_HOSTED_TOOL_TIMEOUT":   "5m",
			"MANGO_TASK_QUEUE_PREFIX":          "prod-2",
			"MANGO_RECONCILE_INTERVAL":         "30s",
			"MANGO_RECONCILE_GRACE":            "2m",
			"MANGO_INTERRUPT_PUSH":             "false",
		},
		check: func(t *testing.T, c *config.Config) {
			want := config.Config{
				TemporalHostPort:       "temporal.internal:7233",
				TemporalNamespace:      "mango",
				TemporalConnectTimeout: 3 * time.Second,
				Sandbox:                "docker",
				SandboxVar:             "MANGO_SANDBOX",
				Model:                  config.ModelAnthropic,
				ModelBaseURL:           "http://proxy.internal:8080",
				ModelAPIKey:            "sk-test",
				ModelAuth:              config.AuthBearer,
				ModelID:                "claude-test",
				ModelContextWindow:     150_000,
				CompactionModel:        "claude-haiku-4-5",
				OutcomeGraderModel:     "claude-opus-4-5",
				CompactionThreshold:    0.75,
				OutputsMaxFiles:        7,
				OutputsMaxBytes:        1 << 20,
				TranscriptCacheBytes:   2 << 20,
				MCPAllowPrivate:        true,
				ControlPlaneAddr:       "api:8081",
				WorkerToken:            "tok",
				WorkerID:               "w-1",
				WorkerIDSet:            true,
				SandboxLocality:        "rack-7",
				ControlPlaneRetry:      45 * time.Second,
				SelfHostedToolTimeout:  5 * time.Minute,
				LogLevel:               slog.LevelDebug,
				LogFormat:              config.LogJSON,
				ShutdownGrace:          90 * time.Second,
				TaskQueuePrefix:        "prod-2",
				ReconcileInterval:      30 * time.Second,
				ReconcileGrace:         2 * time.Minute,
			}
			got := *c
			got.SandboxFactory = sandbox.Factory{}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("FromEnv =\n%+v\nwant\n%+v", got, want)
			}
		},
	}
}

// validSandboxAndModelCases cover the shutdown grace, the sandbox names and
// the unsafe local sandbox override.
func validSandboxAndModelCases() []validCase {
	return []validCase{
		{
			name: "the older MANGO_SHUTDOWN_TIMEOUT still sets the grace",
			env:  map[string]string{"MANGO_SHUTDOWN_TIMEOUT": "7s"},
			check: func(t *testing.T, c *config.Config) {
				if c.ShutdownGrace != 7*time.Second {
					t.Errorf("ShutdownGrace = %v, want 7s from MANGO_SHUTDOWN_TIMEOUT", c.ShutdownGrace)
				}
			},
		},
		{
			name: "the older MANGO_SHUTDOWN_TIMEOUT is not read while MANGO_SHUTDOWN_GRACE is set",
			env:  map[string]string{"MANGO_SHUTDOWN_GRACE": "5s", "MANGO_SHUTDOWN_TIMEOUT": "soon"},
			check: func(t *testing.T, c *config.Config) {
				if c.ShutdownGrace != 5*time.Second {
					t.Errorf("ShutdownGrace = %v, want 5s from MANGO_SHUTDOWN_GRACE", c.ShutdownGrace)
				}
			},
		},
		{
			name: "alias selects the provider",
			env:  map[string]string{"MANAGED_AGENT_SANDBOX": "docker"},
			check: func(t *testing.T, c *config.Config) {
				if c.Sandbox != "docker" || c.SandboxVar != "MANAGED_AGENT_SANDBOX" {
					t.Errorf("Sandbox, SandboxVar = %q, %q; want docker, MANAGED_AGENT_SANDBOX", c.Sandbox, c.SandboxVar)
				}
			},
		},
		{
			name: "both names agreeing, case-insensitively",
			env:  map[string]string{"MANGO_SANDBOX": "Docker", "MANAGED_AGENT_SANDBOX": "docker"},
			check: func(t *testing.T, c *config.Config) {
				if c.Sandbox != "docker" || c.SandboxVar != "MANGO_SANDBOX" {
					t.Errorf("Sandbox, SandboxVar = %q, %q; want docker, MANGO_SANDBOX", c.Sandbox, c.SandboxVar)
				}
			},
		},
		{
			name: "fake model with local sandbox needs no override",
			env:  map[string]string{"MANGO_MODEL": "fake", "MANGO_SANDBOX": "local"},
			check: func(t *testing.T, c *config.Config) {
				if c.UnsafeLocalSandbox() {
					t.Error("UnsafeLocalSandbox() = true for the fake model, want false")
				}
			},
		},
		{
			name: "real model with local sandbox and override",
			env: map[string]string{
				"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "k",
				"MANGO_SANDBOX": "local", "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "1",
			},
			check: func(t *testing.T, c *config.Config) {
				if !c.AllowUnsafeLocalSandbox || !c.UnsafeLocalSandbox() {
					t.Errorf("AllowUnsafeLocalSandbox, UnsafeLocalSandbox() = %v, %v; want true, true",
						c.AllowUnsafeLocalSandbox, c.UnsafeLocalSandbox())
				}
			},
		},
		{
			name: "override spelt true",
			env: map[string]string{
				"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "k", "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "TRUE",
			},
			check: func(t *testing.T, c *config.Config) {
				if !c.AllowUnsafeLocalSandbox {
					t.Error("AllowUnsafeLocalSandbox = false for TRUE, want true")
				}
			},
		},
		{
			name: "real model with docker sandbox",
			env:  map[string]string{"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "k", "MANGO_SANDBOX": "docker"},
			check: func(t *testing.T, c *config.Config) {
				if c.UnsafeLocalSandbox() {
					t.Error("UnsafeLocalSandbox() = true for docker, want false")
				}
			},
		},
	}
}

// validTLSAndLogCases cover the control plane and Temporal TLS settings and
// the log level.
func validTLSAndLogCases(pki *tlsconftest.PKI) []validCase {
	return []validCase{
		{
			name: "control plane TLS with the system roots",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS": "true"},
			check: func(t *testing.T, c *config.Config) {
				if !reflect.DeepEqual(c.ControlPlaneTLS, &tlsconf.Client{}) || c.TemporalTLS != nil {
					t.Errorf("ControlPlaneTLS, TemporalTLS = %+v, %+v; want TLS with the system roots, plaintext", c.ControlPlaneTLS, c.TemporalTLS)
				}
			},
		},
		{
			name: "control plane mutual TLS implied by the files",
			env: map[string]string{
				"MANGO_CONTROLPLANE_TLS_CA_FILE":     pki.CA.CertFile,
				"MANGO_CONTROLPLANE_TLS_CERT_FILE":   pki.Client.CertFile,
				"MANGO_CONTROLPLANE_TLS_KEY_FILE":    pki.Client.KeyFile,
				"MANGO_CONTROLPLANE_TLS_SERVER_NAME": "api.mango.svc",
			},
			check: func(t *testing.T, c *config.Config) {
				want := &tlsconf.Client{CAFile: pki.CA.CertFile, CertFile: pki.Client.CertFile, KeyFile: pki.Client.KeyFile, ServerName: "api.mango.svc"}
				if !reflect.DeepEqual(c.ControlPlaneTLS, want) {
					t.Errorf("ControlPlaneTLS = %+v, want %+v", c.ControlPlaneTLS, want)
				}
			},
		},
		{
			name: "control plane TLS with a CA only",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS": "1", "MANGO_CONTROLPLANE_TLS_CA_FILE": pki.CA.CertFile},
			check: func(t *testing.T, c *config.Config) {
				if c.ControlPlaneTLS == nil || c.ControlPlaneTLS.CAFile != pki.CA.CertFile || c.ControlPlaneTLS.MutualTLS() {
					t.Errorf("ControlPlaneTLS = %+v, want TLS verified with %s and no client certificate", c.ControlPlaneTLS, pki.CA.CertFile)
				}
			},
		},
		{
			name: "temporal mutual TLS",
			env: map[string]string{
				"MANGO_TEMPORAL_TLS":             "true",
				"MANGO_TEMPORAL_TLS_CERT_FILE":   pki.Client.CertFile,
				"MANGO_TEMPORAL_TLS_KEY_FILE":    pki.Client.KeyFile,
				"MANGO_TEMPORAL_TLS_SERVER_NAME": "ns.a1b2c.tmprl.cloud",
			},
			check: func(t *testing.T, c *config.Config) {
				want := &tlsconf.Client{CertFile: pki.Client.CertFile, KeyFile: pki.Client.KeyFile, ServerName: "ns.a1b2c.tmprl.cloud"}
				if !reflect.DeepEqual(c.TemporalTLS, want) || c.ControlPlaneTLS != nil {
					t.Errorf("TemporalTLS, ControlPlaneTLS = %+v, %+v; want %+v, plaintext", c.TemporalTLS, c.ControlPlaneTLS, want)
				}
			},
		},
		{
			name: "warn level and surrounding spaces",
			env:  map[string]string{"MANGO_LOG_LEVEL": " WARN ", "MANGO_SANDBOX": " local "},
			check: func(t *testing.T, c *config.Config) {
				if c.LogLevel != slog.LevelWarn || c.Sandbox != "local" {
					t.Errorf("LogLevel, Sandbox = %v, %q; want WARN, local", c.LogLevel, c.Sandbox)
				}
			},
		},
	}
}

// invalidCase is one environment FromEnv refuses.
type invalidCase struct {
	name string
	env  map[string]string
	// want are substrings the error message must contain.
	want []string
	// is, if set, must match errors.Is.
	is error
}

func TestFromEnvInvalid(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := invalidSandboxModelAndDurationCases()
	tests = append(tests, invalidAddressLogAndIDCases()...)
	tests = append(tests, invalidTLSAndValueCases(pki, missing)...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.FromEnv(envFunc(tt.env), registry())
			if err == nil {
				t.Fatalf("FromEnv(%v) = %+v, want an error", tt.env, c)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("FromEnv(%v) error = %q, want it to contain %q", tt.env, msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error message %q spans several lines, want one", msg)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false, want true", err, tt.is)
			}
			var ve *config.ValidationError
			if !errors.As(err, &ve) {
				t.Errorf("error %T is not a *config.ValidationError", err)
			}
		})
	}
}

// invalidSandboxModelAndDurationCases cover the sandbox provider, the model
// settings, booleans and durations.
func invalidSandboxModelAndDurationCases() []invalidCase {
	return []invalidCase{
		{
			name: "unknown provider",
			env:  map[string]string{"MANGO_SANDBOX": "nonsense"},
			want: []string{`MANGO_SANDBOX: unknown sandbox provider "nonsense" (known: docker, local)`},
			is:   sandbox.ErrUnknownProvider,
		},
		{
			name: "unknown provider through the alias",
			env:  map[string]string{"MANAGED_AGENT_SANDBOX": "e2b"},
			want: []string{`MANAGED_AGENT_SANDBOX: unknown sandbox provider "e2b" (known: docker, local)`},
			is:   sandbox.ErrUnknownProvider,
		},
		{
			name: "both names set and different",
			env:  map[string]string{"MANGO_SANDBOX": "local", "MANAGED_AGENT_SANDBOX": "docker"},
			want: []string{`MANGO_SANDBOX="local" and MANAGED_AGENT_SANDBOX="docker" disagree`},
		},
		{
			name: "real model with local sandbox by default",
			env:  map[string]string{"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "k"},
			want: []string{
				"MANGO_MODEL=anthropic with MANGO_SANDBOX=local (the default) is refused",
				"running arbitrary commands",
				"directly on this host with no isolation",
				"MANGO_SANDBOX=docker",
				"MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX=1",
			},
		},
		{
			name: "real model with local sandbox chosen through the alias",
			env: map[string]string{
				"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "k",
				"MANAGED_AGENT_SANDBOX": "local", "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "false",
			},
			want: []string{"MANGO_MODEL=anthropic with MANAGED_AGENT_SANDBOX=local is refused", "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX=1"},
		},
		{
			name: "anthropic without key",
			env:  map[string]string{"MANGO_MODEL": "anthropic", "MANGO_SANDBOX": "docker"},
			want: []string{"MANGO_MODEL_API_KEY: required when MANGO_MODEL=anthropic"},
		},
		{
			name: "unknown model",
			env:  map[string]string{"MANGO_MODEL": "gpt"},
			want: []string{`MANGO_MODEL: invalid value "gpt" (want fake or anthropic)`},
		},
		{
			name: "unknown auth",
			env:  map[string]string{"MANGO_MODEL_AUTH": "basic"},
			want: []string{`MANGO_MODEL_AUTH: invalid value "basic" (want x-api-key or bearer)`},
		},
		{
			name: "invalid bool",
			env:  map[string]string{"MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "yes"},
			want: []string{`MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX: invalid boolean "yes" (want 1, true, 0 or false)`},
		},
		{
			name: "invalid duration",
			env:  map[string]string{"MANGO_SHUTDOWN_TIMEOUT": "30"},
			want: []string{`MANGO_SHUTDOWN_TIMEOUT: invalid duration "30" (want a positive Go duration such as 30s or 2m)`},
		},
		{
			name: "negative duration",
			env:  map[string]string{"MANGO_SHUTDOWN_TIMEOUT": "-1s"},
			want: []string{`MANGO_SHUTDOWN_TIMEOUT: invalid duration "-1s"`},
		},
		{
			name: "invalid shutdown grace",
			env:  map[string]string{"MANGO_SHUTDOWN_GRACE": "soon", "MANGO_SHUTDOWN_TIMEOUT": "10s"},
			want: []string{`MANGO_SHUTDOWN_GRACE: invalid duration "soon"`},
		},
	}
}

// invalidAddressLogAndIDCases cover addresses, the model endpoint, logging,
// worker ids and several problems at once.
func invalidAddressLogAndIDCases() []invalidCase {
	return []invalidCase{
		{
			name: "locality with a dot",
			env:  map[string]string{"MANGO_SANDBOX_LOCALITY": "host.example"},
			want: []string{`MANGO_SANDBOX_LOCALITY: invalid locality "host.example" (want 1 to 100 lowercase letters, digits and dashes)`},
		},
		{
			name: "invalid connect timeout",
			env:  map[string]string{"MANGO_TEMPORAL_CONNECT_TIMEOUT": "soon"},
			want: []string{`MANGO_TEMPORAL_CONNECT_TIMEOUT: invalid duration "soon"`},
		},
		{
			name: "temporal address without port",
			env:  map[string]string{"MANGO_TEMPORAL_HOSTPORT": "localhost"},
			want: []string{`MANGO_TEMPORAL_HOSTPORT: invalid address "localhost" (want host:port)`},
		},
		{
			name: "control plane port out of range",
			env:  map[string]string{"MANGO_CONTROLPLANE_ADDR": "api:99999"},
			want: []string{`MANGO_CONTROLPLANE_ADDR: invalid port in "api:99999"`},
		},
		{
			name: "model endpoint with the fake model",
			env:  map[string]string{"MANGO_MODEL_BASE_URL": "https://llm.internal", "MANGO_MODEL_API_KEY": "k"},
			want: []string{"MANGO_MODEL_BASE_URL, MANGO_MODEL_API_KEY: set while MANGO_MODEL=fake, the offline fake model, which never calls a model: set MANGO_MODEL=anthropic to use them, or unset them"},
		},
		{
			name: "model key with MANGO_MODEL=fake named",
			env:  map[string]string{"MANGO_MODEL": "fake", "MANGO_MODEL_API_KEY": "k"},
			want: []string{"MANGO_MODEL_API_KEY: set while MANGO_MODEL=fake"},
		},
		{
			name: "relative base URL",
			env:  map[string]string{"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "k", "MANGO_MODEL_BASE_URL": "api.anthropic.com"},
			want: []string{`MANGO_MODEL_BASE_URL: invalid URL "api.anthropic.com" (want an absolute http or https URL)`},
		},
		{
			name: "log level",
			env:  map[string]string{"MANGO_LOG_LEVEL": "verbose"},
			want: []string{`MANGO_LOG_LEVEL: invalid log level "verbose" (want debug, info, warn or error)`},
		},
		{
			name: "log format",
			env:  map[string]string{"MANGO_LOG_FORMAT": "xml"},
			want: []string{`MANGO_LOG_FORMAT: invalid value "xml" (want text or json)`},
		},
		{
			name: "pprof address without a port",
			env:  map[string]string{"MANGO_PPROF_ADDR": "localhost"},
			want: []string{"MANGO_PPROF_ADDR"},
		},
		{
			name: "worker id with a space",
			env:  map[string]string{"MANGO_WORKER_ID": "my worker"},
			want: []string{`MANGO_WORKER_ID: invalid worker id "my worker"`},
		},
		{
			name: "worker id too long",
			env:  map[string]string{"MANGO_WORKER_ID": strings.Repeat("w", 201)},
			want: []string{"MANGO_WORKER_ID: too long (201 bytes, at most 200)"},
		},
		{
			name: "every problem is reported",
			env: map[string]string{
				"MANGO_SANDBOX": "nonsense", "MANGO_SHUTDOWN_TIMEOUT": "x", "MANGO_LOG_LEVEL": "loud",
			},
			want: []string{"MANGO_SANDBOX: unknown", "; MANGO_LOG_LEVEL: invalid", "MANGO_SHUTDOWN_TIMEOUT: invalid"},
			is:   sandbox.ErrUnknownProvider,
		},
	}
}

// invalidTLSAndValueCases cover the TLS settings, counts and a misspelt model.
func invalidTLSAndValueCases(pki *tlsconftest.PKI, missing string) []invalidCase {
	return []invalidCase{
		{
			name: "control plane CA unreadable",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS_CA_FILE": missing},
			want: []string{"MANGO_CONTROLPLANE_TLS_CA_FILE: read certificates: open " + missing},
		},
		{
			name: "control plane CA file without a certificate",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS_CA_FILE": pki.Client.KeyFile},
			want: []string{"MANGO_CONTROLPLANE_TLS_CA_FILE: no PEM certificate in " + pki.Client.KeyFile},
		},
		{
			name: "control plane cert without key",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS_CERT_FILE": pki.Client.CertFile},
			want: []string{"MANGO_CONTROLPLANE_TLS_KEY_FILE: is required with MANGO_CONTROLPLANE_TLS_CERT_FILE"},
		},
		{
			name: "control plane key without cert",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS_KEY_FILE": pki.Client.KeyFile},
			want: []string{"MANGO_CONTROLPLANE_TLS_CERT_FILE: is required with MANGO_CONTROLPLANE_TLS_KEY_FILE"},
		},
		{
			name: "control plane key of another certificate",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS_CERT_FILE": pki.Client.CertFile, "MANGO_CONTROLPLANE_TLS_KEY_FILE": pki.Server.KeyFile},
			want: []string{"MANGO_CONTROLPLANE_TLS_KEY_FILE: the private key in " + pki.Server.KeyFile + " does not match the certificate in " + pki.Client.CertFile},
		},
		{
			name: "control plane cert file holding a key",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS_CERT_FILE": pki.Client.KeyFile, "MANGO_CONTROLPLANE_TLS_KEY_FILE": pki.Client.KeyFile},
			want: []string{"MANGO_CONTROLPLANE_TLS_CERT_FILE: no PEM certificate"},
		},
		{
			name: "control plane TLS off but a CA set",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS": "false", "MANGO_CONTROLPLANE_TLS_CA_FILE": pki.CA.CertFile},
			want: []string{"MANGO_CONTROLPLANE_TLS: is false, but MANGO_CONTROLPLANE_TLS_CA_FILE"},
		},
		{
			name: "control plane server name without TLS",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS_SERVER_NAME": "api"},
			want: []string{"MANGO_CONTROLPLANE_TLS_SERVER_NAME: applies only to TLS (set MANGO_CONTROLPLANE_TLS=true or MANGO_CONTROLPLANE_TLS_CA_FILE)"},
		},
		{
			name: "control plane TLS invalid bool",
			env:  map[string]string{"MANGO_CONTROLPLANE_TLS": "on"},
			want: []string{`MANGO_CONTROLPLANE_TLS: invalid boolean "on"`},
		},
		{
			name: "temporal key file holding a certificate",
			env:  map[string]string{"MANGO_TEMPORAL_TLS_CERT_FILE": pki.Client.CertFile, "MANGO_TEMPORAL_TLS_KEY_FILE": pki.Client.CertFile},
			want: []string{"MANGO_TEMPORAL_TLS_KEY_FILE: no PEM private key in " + pki.Client.CertFile},
		},
		{
			name: "every TLS problem is reported",
			env: map[string]string{
				"MANGO_TEMPORAL_TLS_CA_FILE": missing, "MANGO_CONTROLPLANE_TLS_CERT_FILE": missing,
				"MANGO_CONTROLPLANE_TLS_KEY_FILE": pki.Client.KeyFile,
			},
			want: []string{"MANGO_TEMPORAL_TLS_CA_FILE: read certificates", "MANGO_CONTROLPLANE_TLS_CERT_FILE: read certificates"},
		},
		{
			name: "a count that does not parse names its range",
			env:  map[string]string{"MANGO_OUTPUTS_MAX_FILES": "many", "MANGO_COMPACTION_THRESHOLD": "most"},
			want: []string{`MANGO_OUTPUTS_MAX_FILES: must be an integer between 1 and 100000, got "many"`,
				`MANGO_COMPACTION_THRESHOLD: must be a fraction above 0 and at most 1, like 0.8, got "most"`},
		},
		{
			name: "misspelt model does not trigger the unsafe guard",
			env:  map[string]string{"MANGO_MODEL": "anthropik"},
			want: []string{`MANGO_MODEL: invalid value "anthropik"`},
		},
	}
}

func TestFromEnvMisspeltModelIsOnlyError(t *testing.T) {
	t.Parallel()
	_, err := config.FromEnv(envFunc(map[string]string{"MANGO_MODEL": "anthropik"}), registry())
	var ve *config.ValidationError
	if !errors.As(err, &ve) || len(ve.Errs) != 1 {
		t.Fatalf("FromEnv(MANGO_MODEL=anthropik) = %v, want exactly one error", err)
	}
}

func TestLogValueHidesSecrets(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	c, err := config.FromEnv(envFunc(map[string]string{
		"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "sk-secret-key",
		"MANGO_SANDBOX": "docker", "MANGO_WORKER_TOKEN": "secret-token",
		"MANGO_CONTROLPLANE_TLS_CERT_FILE": pki.Client.CertFile, "MANGO_CONTROLPLANE_TLS_KEY_FILE": pki.Client.KeyFile,
	}), registry())
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("cfg", "config", c)
	out := buf.String()
	for _, secret := range []string{"sk-secret-key", "secret-token"} {
		if strings.Contains(out, secret) {
			t.Errorf("log output %s contains secret %q", out, secret)
		}
	}
	if !strings.Contains(out, `"model_api_key_set":true`) {
		t.Errorf("log output %s does not report the API key as set", out)
	}
	if strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, "CERTIFICATE") {
		t.Errorf("log output %s contains PEM contents", out)
	}
	for _, want := range []string{
		`"controlplane_tls":{"enabled":true,"ca_file":"system roots","mtls":true,"cert_file":` + strconv.Quote(pki.Client.CertFile),
		`"temporal_tls":{"enabled":false}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log output %s does not contain %s", out, want)
		}
	}
}

func TestContextWindowConfig(t *testing.T) {
	t.Parallel()
	cfg, err := config.FromEnv(envFunc(map[string]string{}), registry())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ModelContextWindow != 0 || cfg.CompactionModel != "" || cfg.CompactionThreshold != config.DefaultCompactionThreshold {
		t.Errorf("defaults: window %d, compaction model %q, threshold %v; want 0, \"\", %v",
			cfg.ModelContextWindow, cfg.CompactionModel, cfg.CompactionThreshold, config.DefaultCompactionThreshold)
	}
	cfg, err = config.FromEnv(envFunc(map[string]string{
		"MANGO_MODEL_CONTEXT_WINDOW": "50000", "MANGO_COMPACTION_MODEL": "claude-haiku-4-5", "MANGO_COMPACTION_THRESHOLD": "0.7",
	}), registry())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ModelContextWindow != 50_000 || cfg.CompactionModel != "claude-haiku-4-5" || cfg.CompactionThreshold != 0.7 {
		t.Errorf("set: window %d, compaction model %q, threshold %v; want 50000, claude-haiku-4-5, 0.7",
			cfg.ModelContextWindow, cfg.CompactionModel, cfg.CompactionThreshold)
	}
	for env, want := range map[string]string{
		"MANGO_MODEL_CONTEXT_WINDOW": "MANGO_MODEL_CONTEXT_WINDOW: must be a number of tokens between 16384",
		"MANGO_COMPACTION_THRESHOLD": "MANGO_COMPACTION_THRESHOLD: must be a fraction above 0 and at most 1",
	} {
		for _, v := range []string{"0", "-1", "lots", "1.5", "16383"} {
			_, err := config.FromEnv(envFunc(map[string]string{env: v}), registry())
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s=%s: error %v, want it to contain %q", env, v, err, want)
			}
		}
	}
}

// TestInterruptPushConfig: the push is on by default, off when
// MANGO_INTERRUPT_PUSH is false, and a bad value names the variable.
func TestInterruptPushConfig(t *testing.T) {
	t.Parallel()
	checkBool(t, "MANGO_INTERRUPT_PUSH", true, func(c *config.Config) bool { return c.InterruptPush })
}

// TestTemporalGzipConfig: gzip to Temporal is off by default, on when
// MANGO_TEMPORAL_GZIP is true, and a bad value names the variable.
func TestTemporalGzipConfig(t *testing.T) {
	t.Parallel()
	checkBool(t, "MANGO_TEMPORAL_GZIP", false, func(c *config.Config) bool { return c.TemporalGzip })
}

// checkBool checks a boolean variable: unset gives def, each spelling of
// true and false is read, and another value is an error naming it.
func checkBool(t *testing.T, name string, def bool, field func(*config.Config) bool) {
	t.Helper()
	for v, want := range map[string]bool{"": def, "1": true, "true": true, "0": false, "false": false} {
		cfg, err := config.FromEnv(envFunc(map[string]string{name: v}), registry())
		if err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
		if got := field(cfg); got != want {
			t.Errorf("%s=%q: %v, want %v", name, v, got, want)
		}
	}
	if _, err := config.FromEnv(envFunc(map[string]string{name: "sometimes"}), registry()); err == nil ||
		!strings.Contains(err.Error(), name) {
		t.Errorf("%s=sometimes: error %v, want one naming the variable", name, err)
	}
}

// TestOutputLimitsConfig: defaults, and values out of range name the
// variable.
func TestOutputLimitsConfig(t *testing.T) {
	t.Parallel()
	cfg, err := config.FromEnv(envFunc(map[string]string{}), registry())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OutputsMaxFiles != 100 || cfg.OutputsMaxBytes != 1<<30 {
		t.Errorf("defaults: %d files, %d bytes; want 100 and 1 GiB", cfg.OutputsMaxFiles, cfg.OutputsMaxBytes)
	}
	if cfg.TranscriptCacheBytes != 64<<20 {
		t.Errorf("default transcript cache: %d bytes, want 64 MiB", cfg.TranscriptCacheBytes)
	}
	for env, v := range map[string]string{"MANGO_OUTPUTS_MAX_FILES": "100001", "MANGO_OUTPUTS_MAX_BYTES": "0", "MANGO_TRANSCRIPT_CACHE_BYTES": "-1"} {
		_, err := config.FromEnv(envFunc(map[string]string{env: v}), registry())
		if err == nil || !strings.Contains(err.Error(), env+": must be an integer between 1 and") {
			t.Errorf("%s=%s: error %v, want one naming the variable and the range", env, v, err)
		}
	}
	for _, v := range []string{"-1", "many"} {
		if _, err := config.FromEnv(envFunc(map[string]string{"MANGO_OUTPUTS_MAX_FILES": v}), registry()); err == nil {
			t.Errorf("MANGO_OUTPUTS_MAX_FILES=%s accepted", v)
		}
	}
}
