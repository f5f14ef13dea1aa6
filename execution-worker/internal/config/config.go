// Package config reads and validates the execution worker's configuration
// from environment variables.
//
// All configuration lives in one [Config] built by [FromEnv]. Validation
// happens there, at startup, and every error names the variable at fault and,
// where it helps, the form that was expected. FromEnv reports every invalid
// variable at once rather than stopping at the first.
package config

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/internal/envconf"
	"github.com/mangohq/mango/internal/netguard"
	"github.com/mangohq/mango/internal/pprofserve"
	"github.com/mangohq/mango/internal/tlsconf"
	"github.com/mangohq/mango/proto/sessionwf"
)

// Environment variable names read by [FromEnv].
const (
	EnvTemporalHostPort       = "MANGO_TEMPORAL_HOSTPORT"
	EnvTemporalNamespace      = "MANGO_TEMPORAL_NAMESPACE"
	EnvTemporalConnectTimeout = "MANGO_TEMPORAL_CONNECT_TIMEOUT"
	EnvTemporalGzip           = "MANGO_TEMPORAL_GZIP"
	EnvSandbox                = "MANGO_SANDBOX"
	EnvSandboxAlias           = "MANAGED_AGENT_SANDBOX"
	EnvModel                  = "MANGO_MODEL"
	EnvModelBaseURL           = "MANGO_MODEL_BASE_URL"
	EnvModelAPIKey            = "MANGO_MODEL_API_KEY"
	EnvModelAuth              = "MANGO_MODEL_AUTH"
	EnvModelID                = "MANGO_MODEL_ID"
	EnvModelContextWindow     = "MANGO_MODEL_CONTEXT_WINDOW"
	EnvCompactionModel        = "MANGO_COMPACTION_MODEL"
	EnvOutcomeGraderModel     = "MANGO_OUTCOME_GRADER_MODEL"
	EnvCompactionThreshold    = "MANGO_COMPACTION_THRESHOLD"
	EnvAllowUnsafeLocal       = "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX"
	EnvControlPlaneAddr       = "MANGO_CONTROLPLANE_ADDR"
	EnvReconcileInterval      = "MANGO_RECONCILE_INTERVAL"
	EnvTaskQueuePrefix        = "MANGO_TASK_QUEUE_PREFIX"
	EnvReconcileGrace         = "MANGO_RECONCILE_GRACE"
	EnvWorkerToken            = "MANGO_WORKER_TOKEN"
	EnvWorkerID               = "MANGO_WORKER_ID"
	EnvLogLevel               = "MANGO_LOG_LEVEL"
	EnvLogFormat              = "MANGO_LOG_FORMAT"
	EnvShutdownGrace          = "MANGO_SHUTDOWN_GRACE"
	EnvShutdownTimeout        = "MANGO_SHUTDOWN_TIMEOUT" // older name of MANGO_SHUTDOWN_GRACE
	EnvSandboxLocality        = sandbox.EnvLocality
	EnvControlPlaneRetry      = "MANGO_CONTROLPLANE_RETRY"
	EnvMetricsAddr            = "MANGO_METRICS_ADDR"
	EnvInterruptPush          = "MANGO_INTERRUPT_PUSH"
	EnvOutputsMaxFiles        = "MANGO_OUTPUTS_MAX_FILES"
	EnvMCPAllowPrivate        = netguard.EnvAllowPrivate
	EnvOutputsMaxBytes        = "MANGO_OUTPUTS_MAX_BYTES"
	EnvTranscriptCacheBytes   = "MANGO_TRANSCRIPT_CACHE_BYTES"
	EnvSelfHostedToolTimeout  = "MANGO_SELF_HOSTED_TOOL_TIMEOUT"

	EnvControlPlaneTLS           = "MANGO_CONTROLPLANE_TLS"
	EnvControlPlaneTLSCAFile     = "MANGO_CONTROLPLANE_TLS_CA_FILE"
	EnvControlPlaneTLSCertFile   = "MANGO_CONTROLPLANE_TLS_CERT_FILE"
	EnvControlPlaneTLSKeyFile    = "MANGO_CONTROLPLANE_TLS_KEY_FILE"
	EnvControlPlaneTLSServerName = "MANGO_CONTROLPLANE_TLS_SERVER_NAME"
	EnvTemporalTLS               = "MANGO_TEMPORAL_TLS"
	EnvTemporalTLSCAFile         = "MANGO_TEMPORAL_TLS_CA_FILE"
	EnvTemporalTLSCertFile       = "MANGO_TEMPORAL_TLS_CERT_FILE"
	EnvTemporalTLSKeyFile        = "MANGO_TEMPORAL_TLS_KEY_FILE"
	EnvTemporalTLSServerName     = "MANGO_TEMPORAL_TLS_SERVER_NAME"
)

// Defaults for variables that are not set.
const (
	DefaultCompactionThreshold    = 0.8
	DefaultTemporalHostPort       = "127.0.0.1:7233"
	DefaultTemporalNamespace      = "default"
	DefaultTemporalConnectTimeout = 10 * time.Second
	DefaultSandbox                = "local"
	DefaultModel                  = ModelFake
	DefaultModelBaseURL           = "https://api.anthropic.com"
	DefaultModelAuth              = AuthXAPIKey
	DefaultControlPlaneAddr       = "127.0.0.1:8081"
	DefaultLogLevel               = slog.LevelInfo
	DefaultLogFormat              = LogText
	// DefaultShutdownGrace stays under Kubernetes' default 30 s
	// termination grace period, so a drained worker exits before SIGKILL.
	DefaultShutdownGrace = 25 * time.Second
	// DefaultControlPlaneRetry rides out an api-server restart or a short
	// PostgreSQL outage without failing the turn.
	DefaultControlPlaneRetry = 30 * time.Second
	// DefaultSelfHostedToolTimeout is how long a self-hosted
	// environment's worker has to answer a built-in tool call.
	DefaultSelfHostedToolTimeout = 120 * time.Second
	// DefaultTranscriptCacheBytes holds a few hundred long sessions'
	// transcripts.
	DefaultTranscriptCacheBytes = 64 << 20
)

// Model names a model client implementation.
type Model string

// Model clients.
const (
	// ModelFake is the offline, deterministic fake model. It never touches
	// the network and cannot be steered by outside content.
	ModelFake Model = "fake"
	// ModelAnthropic is the Anthropic Messages API (or a compatible server at
	// MANGO_MODEL_BASE_URL).
	ModelAnthropic Model = "anthropic"
)

// NetworkBacked reports whether m calls a real model over the network. Such a
// model acts on content it does not control and is treated as untrusted.
func (m Model) NetworkBacked() bool { return m != ModelFake }

// ModelAuth selects how the API key is sent to the model server.
type ModelAuth string

// Model authentication schemes.
const (
	// AuthXAPIKey sends the key in the x-api-key header.
	AuthXAPIKey ModelAuth = "x-api-key"
	// AuthBearer sends the key as Authorization: Bearer.
	AuthBearer ModelAuth = "bearer"
)

// LogFormat selects the slog handler.
type LogFormat string

// Log formats.
const (
	// LogText is slog's key=value text format.
	LogText LogFormat = "text"
	// LogJSON is one JSON object per line.
	LogJSON LogFormat = "json"
)

// Config is the execution worker's complete configuration.
type Config struct {
	// TemporalHostPort is the Temporal frontend address (MANGO_TEMPORAL_HOSTPORT).
	TemporalHostPort string
	// TemporalNamespace is the Temporal namespace (MANGO_TEMPORAL_NAMESPACE).
	TemporalNamespace string
	// TemporalConnectTimeout bounds the initial connection to Temporal
	// (MANGO_TEMPORAL_CONNECT_TIMEOUT).
	TemporalConnectTimeout time.Duration
	// TemporalTLS, when not nil, connects to Temporal over TLS
	// (MANGO_TEMPORAL_TLS, or implied by MANGO_TEMPORAL_TLS_CA_FILE and
	// MANGO_TEMPORAL_TLS_CERT_FILE + MANGO_TEMPORAL_TLS_KEY_FILE;
	// MANGO_TEMPORAL_TLS_SERVER_NAME overrides the name verified). Nil
	// means plaintext.
	TemporalTLS *tlsconf.Client
	// TemporalGzip compresses the gRPC requests to Temporal with gzip, the
	// SDK's default (MANGO_TEMPORAL_GZIP). Off by default: next to the
	// cluster it only spends CPU on both ends.
	TemporalGzip bool

	// Sandbox is the lowercase name of the sandbox provider this worker
	// serves (MANGO_SANDBOX, alias MANAGED_AGENT_SANDBOX).
	Sandbox string
	// SandboxVar is the variable Sandbox was read from, for messages; empty
	// when the default was used.
	SandboxVar string
	// SandboxFactory is the registry entry for Sandbox.
	SandboxFactory sandbox.Factory

	// Model selects the model client (MANGO_MODEL).
	Model Model
	// ModelBaseURL is the model server's base URL (MANGO_MODEL_BASE_URL).
	ModelBaseURL string
	// ModelAPIKey is the model server's API key (MANGO_MODEL_API_KEY). It is
	// never logged.
	ModelAPIKey string
	// ModelAuth is how ModelAPIKey is sent (MANGO_MODEL_AUTH).
	ModelAuth ModelAuth
	// ModelID overrides the model named by the agent, if set (MANGO_MODEL_ID).
	ModelID string
	// ModelContextWindow overrides the context window of every model, in
	// tokens (MANGO_MODEL_CONTEXT_WINDOW; 0: each model's profile).
	ModelContextWindow int
	// CompactionModel writes the summaries of compacted turns
	// (MANGO_COMPACTION_MODEL; empty: the agent's model).
	CompactionModel string
	// OutcomeGraderModel grades the agent's work against an outcome's
	// rubric (MANGO_OUTCOME_GRADER_MODEL; empty: the agent's model).
	OutcomeGraderModel string
	// CompactionThreshold is the fraction of the window past which a
	// request is compacted first (MANGO_COMPACTION_THRESHOLD, default 0.8).
	CompactionThreshold float64
	// OutputsMaxFiles and OutputsMaxBytes bound what one session publishes
	// from /mnt/session/outputs, in files and in total bytes
	// (MANGO_OUTPUTS_MAX_FILES, default 100; MANGO_OUTPUTS_MAX_BYTES,
	// default 1 GiB).
	OutputsMaxFiles int
	OutputsMaxBytes int64
	// TranscriptCacheBytes bounds the decoded transcripts a worker keeps
	// so that a session's turn fetches only what was appended since its
	// last turn here; the least recently run go first, and a session not
	// held is fetched whole (MANGO_TRANSCRIPT_CACHE_BYTES, default 64 MiB).
	TranscriptCacheBytes int64
	// MCPAllowPrivate lets agents reach MCP servers on loopback,
	// link-local and private addresses (MANGO_MCP_ALLOW_PRIVATE; default
	// false: refused, also after DNS resolution).
	MCPAllowPrivate bool

	// AllowUnsafeLocalSandbox permits a network-backed model with a provider
	// that runs tools on the host (MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX).
	AllowUnsafeLocalSandbox bool

	// TaskQueuePrefix is the first segment of the task queues polled
	// (MANGO_TASK_QUEUE_PREFIX, default "mango"); it must match the
	// api-server's.
	TaskQueuePrefix string
	// ReconcileInterval spaces sandbox reconciliation passes
	// (MANGO_RECONCILE_INTERVAL, default 1m).
	ReconcileInterval time.Duration
	// ReconcileGrace spares unreferenced sandboxes younger than this
	// (MANGO_RECONCILE_GRACE, default 1m).
	ReconcileGrace time.Duration
	// ControlPlaneAddr is the api-server's gRPC ControlPlane address
	// (MANGO_CONTROLPLANE_ADDR).
	ControlPlaneAddr string
	// ControlPlaneTLS, when not nil, connects to the ControlPlane over TLS
	// (MANGO_CONTROLPLANE_TLS, or implied by MANGO_CONTROLPLANE_TLS_CA_FILE
	// and MANGO_CONTROLPLANE_TLS_CERT_FILE + MANGO_CONTROLPLANE_TLS_KEY_FILE
	// for mutual TLS; MANGO_CONTROLPLANE_TLS_SERVER_NAME overrides the name
	// verified). Nil means plaintext, which sends WorkerToken unencrypted.
	ControlPlaneTLS *tlsconf.Client
	// WorkerToken authenticates this worker to the ControlPlane
	// (MANGO_WORKER_TOKEN, required). Never logged.
	WorkerToken string
	// WorkerID names this worker process in heartbeats, Temporal and logs
	// (MANGO_WORKER_ID, default <hostname>-<pid>). It routes nothing: task
	// queues are named for providers and localities.
	WorkerID string
	// WorkerIDSet reports that MANGO_WORKER_ID was set explicitly. Such a
	// worker also polls the per-worker host queue that versions before
	// locality queues recorded in bindings.
	WorkerIDSet bool
	// SandboxLocality, when set, names the locality of a host-bound
	// provider instead of the provider's own (MANGO_SANDBOX_LOCALITY).
	SandboxLocality string
	// ControlPlaneRetry is how long one ControlPlane call keeps retrying
	// while the api-server or its database is unavailable
	// (MANGO_CONTROLPLANE_RETRY, default 30s).
	ControlPlaneRetry time.Duration
	// SelfHostedToolTimeout is how long the client's worker of a
	// self-hosted environment has to answer a built-in tool call, from
	// the call's agent.tool_use event, before the call gets an error
	// result (MANGO_SELF_HOSTED_TOOL_TIMEOUT, default 120s).
	SelfHostedToolTimeout time.Duration

	// LogLevel is the minimum level logged (MANGO_LOG_LEVEL).
	LogLevel slog.Level
	// LogFormat is the log output format (MANGO_LOG_FORMAT).
	LogFormat LogFormat
	// ShutdownGrace is how long running turns may go on after SIGINT or
	// SIGTERM, once polling stopped, before they are cancelled so Temporal
	// retries them on another worker (MANGO_SHUTDOWN_GRACE, older name
	// MANGO_SHUTDOWN_TIMEOUT; default 25s).
	ShutdownGrace time.Duration
	// InterruptPush keeps a WatchInterrupts stream open to the
	// ControlPlane, so that an interrupt stops its running turn at once
	// (MANGO_INTERRUPT_PUSH, default true). False relies on Temporal's
	// cancellation alone, which arrives with a heartbeat response.
	InterruptPush bool
	// MetricsAddr, when set, is the host:port serving Prometheus metrics
	// on /metrics (MANGO_METRICS_ADDR; empty: none).
	MetricsAddr string
	// PprofAddr, when set, is the host:port serving the Go runtime's
	// profiles on /debug/pprof/ (MANGO_PPROF_ADDR; empty: none).
	PprofAddr string
}

// LogValue implements slog.LogValuer. Secrets are reported only as set or
// unset.
func (c *Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("temporal_hostport", c.TemporalHostPort),
		slog.String("temporal_namespace", c.TemporalNamespace),
		slog.Any("temporal_tls", c.TemporalTLS),
		slog.String("sandbox", c.Sandbox),
		slog.String("model", string(c.Model)),
		slog.String("model_base_url", c.ModelBaseURL),
		slog.String("metrics_addr", c.MetricsAddr),
		slog.Bool("interrupt_push", c.InterruptPush),
		slog.String("pprof_addr", c.PprofAddr),
		slog.Bool("model_api_key_set", c.ModelAPIKey != ""),
		slog.String("model_auth", string(c.ModelAuth)),
		slog.String("model_id", c.ModelID),
		slog.Int("model_context_window", c.ModelContextWindow),
		slog.String("compaction_model", c.CompactionModel),
		slog.String("outcome_grader_model", c.OutcomeGraderModel),
		slog.Float64("compaction_threshold", c.CompactionThreshold),
		slog.Bool("allow_unsafe_local_sandbox", c.AllowUnsafeLocalSandbox),
		slog.String("controlplane_addr", c.ControlPlaneAddr),
		slog.Any("controlplane_tls", c.ControlPlaneTLS),
		slog.Bool("worker_token_set", c.WorkerToken != ""),
		slog.String("worker_id", c.WorkerID),
		slog.String("sandbox_locality", c.SandboxLocality),
		slog.String("controlplane_retry", c.ControlPlaneRetry.String()),
		slog.String("self_hosted_tool_timeout", c.SelfHostedToolTimeout.String()),
		slog.String("log_level", c.LogLevel.String()),
		slog.String("log_format", string(c.LogFormat)),
		slog.String("shutdown_grace", c.ShutdownGrace.String()),
	)
}

// UnsafeLocalSandbox reports whether the configuration combines a
// network-backed model with a provider that runs tools on the host. FromEnv
// only returns such a configuration when AllowUnsafeLocalSandbox is set.
func (c *Config) UnsafeLocalSandbox() bool {
	return c.Model.NetworkBacked() && c.SandboxFactory.Traits.RunsOnHost
}

// ValidationError lists every problem found in the environment. Its message
// is one line; Unwrap exposes the individual errors to errors.Is and
// errors.As.
type ValidationError struct {
	// Errs holds one error per problem, each naming its variable.
	Errs []error
}

// Error joins the individual messages with "; ".
func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap returns the individual errors.
func (e *ValidationError) Unwrap() []error { return e.Errs }

// vars are the worker's variables as env reads them; FromEnv turns them
// into a Config. A field's default is the value FromEnv gives it before
// reading. Two settings have a second name, read as their own field and
// resolved after reading: MANGO_SANDBOX's alias MANAGED_AGENT_SANDBOX (the
// two must agree when both are set) and MANGO_SHUTDOWN_GRACE's older name
// MANGO_SHUTDOWN_TIMEOUT (read only when MANGO_SHUTDOWN_GRACE is unset).
type vars struct {
	TemporalHostPort       string        `env:"MANGO_TEMPORAL_HOSTPORT"`
	TemporalNamespace      string        `env:"MANGO_TEMPORAL_NAMESPACE"`
	TemporalConnectTimeout time.Duration `env:"MANGO_TEMPORAL_CONNECT_TIMEOUT"`
	TemporalGzip           bool          `env:"MANGO_TEMPORAL_GZIP"`
	Sandbox                string        `env:"MANGO_SANDBOX"`
	SandboxAlias           string        `env:"MANAGED_AGENT_SANDBOX"`
	Model                  string        `env:"MANGO_MODEL"`
	ModelBaseURL           string        `env:"MANGO_MODEL_BASE_URL"`
	ModelAPIKey            string        `env:"MANGO_MODEL_API_KEY"`
	ModelAuth              string        `env:"MANGO_MODEL_AUTH"`
	ModelID                string        `env:"MANGO_MODEL_ID"`
	ModelContextWindow     int64         `env:"MANGO_MODEL_CONTEXT_WINDOW"`
	CompactionModel        string        `env:"MANGO_COMPACTION_MODEL"`
	OutcomeGraderModel     string        `env:"MANGO_OUTCOME_GRADER_MODEL"`
	CompactionThreshold    float64       `env:"MANGO_COMPACTION_THRESHOLD"`
	OutputsMaxFiles        int64         `env:"MANGO_OUTPUTS_MAX_FILES"`
	OutputsMaxBytes        int64         `env:"MANGO_OUTPUTS_MAX_BYTES"`
	TranscriptCacheBytes   int64         `env:"MANGO_TRANSCRIPT_CACHE_BYTES"`
	MCPAllowPrivate        bool          `env:"MANGO_MCP_ALLOW_PRIVATE"`
	AllowUnsafeLocal       bool          `env:"MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX"`
	ControlPlaneAddr       string        `env:"MANGO_CONTROLPLANE_ADDR"`
	ReconcileInterval      time.Duration `env:"MANGO_RECONCILE_INTERVAL"`
	TaskQueuePrefix        string        `env:"MANGO_TASK_QUEUE_PREFIX"`
	ReconcileGrace         time.Duration `env:"MANGO_RECONCILE_GRACE"`
	WorkerToken            string        `env:"MANGO_WORKER_TOKEN"`
	WorkerID               string        `env:"MANGO_WORKER_ID"`
	LogLevel               string        `env:"MANGO_LOG_LEVEL"`
	LogFormat              string        `env:"MANGO_LOG_FORMAT"`
	ShutdownGrace          time.Duration `env:"MANGO_SHUTDOWN_GRACE"`
	ShutdownTimeout        time.Duration `env:"MANGO_SHUTDOWN_TIMEOUT"`
	SandboxLocality        string        `env:"MANGO_SANDBOX_LOCALITY"`
	ControlPlaneRetry      time.Duration `env:"MANGO_CONTROLPLANE_RETRY"`
	SelfHostedToolTimeout  time.Duration `env:"MANGO_SELF_HOSTED_TOOL_TIMEOUT"`
	MetricsAddr            string        `env:"MANGO_METRICS_ADDR"`
	PprofAddr              string        `env:"MANGO_PPROF_ADDR"`
	InterruptPush          bool          `env:"MANGO_INTERRUPT_PUSH"`

	ControlPlaneTLS           bool   `env:"MANGO_CONTROLPLANE_TLS"`
	ControlPlaneTLSCAFile     string `env:"MANGO_CONTROLPLANE_TLS_CA_FILE"`
	ControlPlaneTLSCertFile   string `env:"MANGO_CONTROLPLANE_TLS_CERT_FILE"`
	ControlPlaneTLSKeyFile    string `env:"MANGO_CONTROLPLANE_TLS_KEY_FILE"`
	ControlPlaneTLSServerName string `env:"MANGO_CONTROLPLANE_TLS_SERVER_NAME"`
	TemporalTLS               bool   `env:"MANGO_TEMPORAL_TLS"`
	TemporalTLSCAFile         string `env:"MANGO_TEMPORAL_TLS_CA_FILE"`
	TemporalTLSCertFile       string `env:"MANGO_TEMPORAL_TLS_CERT_FILE"`
	TemporalTLSKeyFile        string `env:"MANGO_TEMPORAL_TLS_KEY_FILE"`
	TemporalTLSServerName     string `env:"MANGO_TEMPORAL_TLS_SERVER_NAME"`
}

// defaultVars are the values of the variables not set.
func defaultVars() vars {
	return vars{
		TemporalHostPort: DefaultTemporalHostPort, TemporalNamespace: DefaultTemporalNamespace,
		TemporalConnectTimeout: DefaultTemporalConnectTimeout,
		Model:                  string(DefaultModel), ModelBaseURL: DefaultModelBaseURL, ModelAuth: string(DefaultModelAuth),
		CompactionThreshold: DefaultCompactionThreshold,
		OutputsMaxFiles:     100, OutputsMaxBytes: 1 << 30, TranscriptCacheBytes: DefaultTranscriptCacheBytes,
		ControlPlaneAddr: DefaultControlPlaneAddr, ControlPlaneRetry: DefaultControlPlaneRetry,
		SelfHostedToolTimeout: DefaultSelfHostedToolTimeout,
		ReconcileInterval:     time.Minute, ReconcileGrace: time.Minute, TaskQueuePrefix: sessionwf.TaskQueuePrefix,
		LogFormat: string(DefaultLogFormat), InterruptPush: true,
	}
}

// parsers give the messages of a value that does not parse, by type.
var parsers = envconf.Parsers{
	reflect.TypeFor[bool](): func(v string) (any, error) {
		switch strings.ToLower(v) {
		case "1", "true":
			return true, nil
		case "0", "false":
			return false, nil
		}
		return nil, fmt.Errorf("invalid boolean %q (want 1, true, 0 or false)", v)
	},
	reflect.TypeFor[time.Duration](): func(v string) (any, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("invalid duration %q (want a positive Go duration such as 30s or 2m)", v)
		}
		return d, nil
	},
}

// MinContextWindow is the smallest MANGO_MODEL_CONTEXT_WINDOW accepted:
// twice the 8,192 tokens of output a request asks for.
const MinContextWindow = 16_384

// bounded are the numbers with a range, each with the message of a value
// that does not parse or falls outside it.
var bounded = map[string]struct {
	ok  func(float64) bool
	msg string
}{
	EnvOutputsMaxFiles:      {between(1, 100_000), "must be an integer between 1 and 100000, got %q"},
	EnvOutputsMaxBytes:      {between(1, 1<<50), fmt.Sprintf("must be an integer between 1 and %d, got %%q", int64(1<<50))},
	EnvTranscriptCacheBytes: {between(1, 1<<40), fmt.Sprintf("must be an integer between 1 and %d, got %%q", int64(1<<40))},
	EnvModelContextWindow: {between(MinContextWindow, 100_000_000),
		fmt.Sprintf("must be a number of tokens between %d and 100000000, got %%q", MinContextWindow)},
	EnvCompactionThreshold: {func(f float64) bool { return f > 0 && f <= 1 }, "must be a fraction above 0 and at most 1, like 0.8, got %q"},
}

func between(lo, hi float64) func(float64) bool {
	return func(f float64) bool { return f >= lo && f <= hi }
}

// FromEnv builds and validates a Config. getenv returns a variable's value or
// "" when unset (os.Getenv has this shape); an empty value counts as unset.
// reg resolves the sandbox provider name. On failure the error is a
// *ValidationError naming every invalid variable.
func FromEnv(getenv func(string) string, reg *sandbox.Registry) (*Config, error) {
	v := defaultVars()
	parseErrs := envconf.Parse(&v, envconf.Unless(getenv, EnvShutdownTimeout, EnvShutdownGrace), parsers)
	p := parser{getenv: getenv}
	// The provider comes first: it is the choice everything else depends on.
	c := &Config{}
	sandboxOK := p.sandbox(c, &v, reg)
	for _, e := range parseErrs {
		if b, ok := bounded[e.Var]; ok {
			p.fail(e.Var, b.msg, e.Value)
			continue
		}
		p.errs = append(p.errs, e)
		p.bad = append(p.bad, e.Var)
	}
	p.fill(c, &v)
	p.check(c, &v)
	// Only judge the combination once both halves are known to be valid, so
	// the message never blames a variable that is merely misspelt.
	if sandboxOK && p.valid(EnvModel) && c.UnsafeLocalSandbox() && !c.AllowUnsafeLocalSandbox {
		selected := fmt.Sprintf("%s=%s", c.SandboxVar, c.Sandbox)
		if c.SandboxVar == "" {
			selected = fmt.Sprintf("%s=%s (the default)", EnvSandbox, c.Sandbox)
		}
		p.errs = append(p.errs, fmt.Errorf(
			"%s=%s with %s is refused: a real model can be steered by the content it reads "+
				"(web pages, files, tool output) into running arbitrary commands, and the %s sandbox runs them "+
				"directly on this host with no isolation; set %s=docker for an isolated sandbox, "+
				"or %s=1 to accept the risk",
			EnvModel, c.Model, selected, c.Sandbox, EnvSandbox, EnvAllowUnsafeLocal))
	}
	if len(p.errs) > 0 {
		return nil, &ValidationError{Errs: p.errs}
	}
	return c, nil
}

// sandbox resolves MANGO_SANDBOX and its alias MANAGED_AGENT_SANDBOX into
// c.Sandbox, c.SandboxVar and c.SandboxFactory, and reports whether the
// provider is known.
func (p *parser) sandbox(c *Config, v *vars, reg *sandbox.Registry) bool {
	c.Sandbox, c.SandboxVar = p.sandboxName(v)
	if c.Sandbox == "" {
		return false
	}
	f, err := reg.Lookup(c.Sandbox)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: %w", cmp.Or(c.SandboxVar, EnvSandbox), err))
		return false
	}
	c.SandboxFactory = f
	return true
}

// fill copies the values read into c, checking their form.
func (p *parser) fill(c *Config, v *vars) {
	c.TemporalHostPort = p.hostPort(EnvTemporalHostPort, v.TemporalHostPort)
	c.TemporalNamespace = v.TemporalNamespace
	c.TemporalConnectTimeout = v.TemporalConnectTimeout
	c.TemporalGzip = v.TemporalGzip
	c.Model = Model(p.oneOf(EnvModel, v.Model, string(DefaultModel), string(ModelFake), string(ModelAnthropic)))
	c.ModelBaseURL = p.baseURL(EnvModelBaseURL, v.ModelBaseURL)
	c.ModelAPIKey = v.ModelAPIKey
	c.ModelAuth = ModelAuth(p.oneOf(EnvModelAuth, v.ModelAuth, string(DefaultModelAuth), string(AuthXAPIKey), string(AuthBearer)))
	c.ModelID = v.ModelID
	c.ModelContextWindow = int(p.inRange(EnvModelContextWindow, v.ModelContextWindow, 0))
	c.CompactionModel = v.CompactionModel
	c.OutcomeGraderModel = v.OutcomeGraderModel
	c.CompactionThreshold = p.inRangeFloat(EnvCompactionThreshold, v.CompactionThreshold, DefaultCompactionThreshold)
	c.OutputsMaxFiles = int(p.inRange(EnvOutputsMaxFiles, v.OutputsMaxFiles, 100))
	c.OutputsMaxBytes = p.inRange(EnvOutputsMaxBytes, v.OutputsMaxBytes, 1<<30)
	c.TranscriptCacheBytes = p.inRange(EnvTranscriptCacheBytes, v.TranscriptCacheBytes, DefaultTranscriptCacheBytes)
	c.MCPAllowPrivate = v.MCPAllowPrivate
	c.AllowUnsafeLocalSandbox = v.AllowUnsafeLocal
	c.ControlPlaneAddr = p.hostPort(EnvControlPlaneAddr, v.ControlPlaneAddr)
	c.WorkerToken = v.WorkerToken
	c.WorkerID = p.workerID(EnvWorkerID, v.WorkerID)
	c.WorkerIDSet = v.WorkerID != ""
	c.SandboxLocality = p.locality(EnvSandboxLocality, v.SandboxLocality)
	c.ControlPlaneRetry = v.ControlPlaneRetry
	c.SelfHostedToolTimeout = v.SelfHostedToolTimeout
	c.LogLevel = p.logLevel(EnvLogLevel, v.LogLevel)
	c.LogFormat = LogFormat(p.oneOf(EnvLogFormat, v.LogFormat, string(DefaultLogFormat), string(LogText), string(LogJSON)))
	c.ShutdownGrace = cmp.Or(v.ShutdownGrace, v.ShutdownTimeout, DefaultShutdownGrace)
	c.ReconcileInterval = v.ReconcileInterval
	c.TaskQueuePrefix = v.TaskQueuePrefix
	c.ReconcileGrace = v.ReconcileGrace
	c.InterruptPush = v.InterruptPush
	if v.MetricsAddr != "" {
		c.MetricsAddr = p.hostPort(EnvMetricsAddr, v.MetricsAddr)
	}
	if v.PprofAddr != "" {
		c.PprofAddr = p.hostPort(pprofserve.EnvAddr, v.PprofAddr)
	}
	c.ControlPlaneTLS = p.clientTLS(tlsVars{v.ControlPlaneTLS, v.ControlPlaneTLSCAFile, v.ControlPlaneTLSCertFile,
		v.ControlPlaneTLSKeyFile, v.ControlPlaneTLSServerName}, EnvControlPlaneTLS, EnvControlPlaneTLSCAFile,
		EnvControlPlaneTLSCertFile, EnvControlPlaneTLSKeyFile, EnvControlPlaneTLSServerName)
	c.TemporalTLS = p.clientTLS(tlsVars{v.TemporalTLS, v.TemporalTLSCAFile, v.TemporalTLSCertFile,
		v.TemporalTLSKeyFile, v.TemporalTLSServerName}, EnvTemporalTLS, EnvTemporalTLSCAFile,
		EnvTemporalTLSCertFile, EnvTemporalTLSKeyFile, EnvTemporalTLSServerName)
}

// check judges the settings that depend on one another.
func (p *parser) check(c *Config, v *vars) {
	if !sessionwf.ValidPrefix(c.TaskQueuePrefix) {
		p.fail(EnvTaskQueuePrefix, "must be lowercase letters, digits and dashes, starting with a letter (at most 64)")
	}
	if c.WorkerToken == "" {
		p.fail(EnvWorkerToken, "is required: the shared token the api-server's ControlPlane (%s) expects from workers", EnvControlPlaneAddr)
	}
	if c.Model == ModelAnthropic && c.ModelAPIKey == "" {
		p.fail(EnvModelAPIKey, "required when %s=%s", EnvModel, ModelAnthropic)
	}
	if c.Model == ModelFake && p.valid(EnvModel) {
		// A model endpoint configured for the fake is a forgotten
		// MANGO_MODEL=anthropic: say so instead of silently faking.
		var set []string
		for _, name := range []string{EnvModelBaseURL, EnvModelAPIKey} {
			if p.get(name) != "" {
				set = append(set, name)
			}
		}
		if len(set) > 0 {
			p.errs = append(p.errs, fmt.Errorf("%s: set while %s=%s, the offline fake model, which never calls a model: "+
				"set %s=%s to use them, or unset them", strings.Join(set, ", "), EnvModel, ModelFake, EnvModel, ModelAnthropic))
		}
	}
}

// parser checks the variables read and collects one error per invalid
// variable.
type parser struct {
	getenv func(string) string
	errs   []error
	bad    []string // names of variables that failed
}

// inRange checks a number of [bounded] that parsed (def otherwise).
func (p *parser) inRange(name string, n, def int64) int64 {
	if !p.valid(name) {
		return def
	}
	if p.get(name) != "" && !bounded[name].ok(float64(n)) {
		p.fail(name, bounded[name].msg, p.get(name))
		return def
	}
	return n
}

// inRangeFloat is inRange for a fraction.
func (p *parser) inRangeFloat(name string, f, def float64) float64 {
	if !p.valid(name) {
		return def
	}
	if p.get(name) != "" && !bounded[name].ok(f) {
		p.fail(name, bounded[name].msg, p.get(name))
		return def
	}
	return f
}

func (p *parser) fail(name, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
	p.bad = append(p.bad, name)
}

func (p *parser) valid(name string) bool { return !slices.Contains(p.bad, name) }

func (p *parser) get(name string) string { return strings.TrimSpace(p.getenv(name)) }

// oneOf lowercases v, which must be one of allowed.
func (p *parser) oneOf(name, v, def string, allowed ...string) string {
	v = strings.ToLower(v)
	if slices.Contains(allowed, v) {
		return v
	}
	p.fail(name, "invalid value %q (want %s)", p.getenv(name), orList(allowed))
	return def
}

func (p *parser) hostPort(name, v string) string {
	host, port, err := net.SplitHostPort(v)
	if err != nil || host == "" {
		p.fail(name, "invalid address %q (want host:port)", v)
		return v
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		p.fail(name, "invalid port in %q (want host:port with a port from 1 to 65535)", v)
	}
	return v
}

func (p *parser) baseURL(name, v string) string {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.fail(name, "invalid URL %q (want an absolute http or https URL)", v)
	}
	return strings.TrimRight(v, "/")
}

func (p *parser) logLevel(name, v string) slog.Level {
	switch strings.ToLower(v) {
	case "":
		return DefaultLogLevel
	case "debug":
		return slog.LevelDebug
	case "info":
		return slog.LevelInfo
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		p.fail(name, "invalid log level %q (want debug, info, warn or error)", p.getenv(name))
		return DefaultLogLevel
	}
}

// maxWorkerIDLen keeps the host task queue name ("mango.<provider>.<id>")
// well inside Temporal's limits.
const maxWorkerIDLen = 200

func (p *parser) workerID(name, v string) string {
	if v == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		return fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if len(v) > maxWorkerIDLen {
		p.fail(name, "too long (%d bytes, at most %d)", len(v), maxWorkerIDLen)
		return v
	}
	if strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		p.fail(name, "invalid worker id %q (no spaces or control characters)", v)
	}
	return v
}

func (p *parser) locality(name, v string) string {
	if v == "" {
		return ""
	}
	if err := sandbox.CheckLocality(v); err != nil {
		p.fail(name, "%v", err)
	}
	return v
}

// tlsVars are the values of one TLS client's variables.
type tlsVars struct {
	enabled                               bool
	caFile, certFile, keyFile, serverName string
}

// clientTLS checks a TLS client's settings: enableVar turns TLS on with
// the system roots, and a CA bundle or a client certificate imply it. It
// returns nil for plaintext.
func (p *parser) clientTLS(v tlsVars, enableVar, caVar, certVar, keyVar, serverNameVar string) *tlsconf.Client {
	c := &tlsconf.Client{CAFile: v.caFile, CertFile: v.certFile, KeyFile: v.keyFile, ServerName: v.serverName}
	implied := c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
	if explicitlyOff := p.get(enableVar) != "" && p.valid(enableVar) && !v.enabled; explicitlyOff && implied {
		p.fail(enableVar, "is false, but %s, %s or %s is set, which implies TLS (unset one or the other)", caVar, certVar, keyVar)
		return nil
	}
	if !v.enabled && !implied {
		if c.ServerName != "" {
			p.fail(serverNameVar, "applies only to TLS (set %s=true or %s)", enableVar, caVar)
		}
		return nil
	}
	if c.CAFile != "" {
		if err := tlsconf.CheckCAFile(c.CAFile); err != nil {
			p.fail(caVar, "%v", err)
		}
	}
	switch {
	case c.CertFile == "" && c.KeyFile == "":
	case c.KeyFile == "":
		p.fail(keyVar, "is required with %s", certVar)
	case c.CertFile == "":
		p.fail(certVar, "is required with %s", keyVar)
	default:
		certErr, keyErr := tlsconf.CheckKeyPair(c.CertFile, c.KeyFile)
		if certErr != nil {
			p.fail(certVar, "%v", certErr)
		}
		if keyErr != nil {
			p.fail(keyVar, "%v", keyErr)
		}
	}
	return c
}

// sandboxName resolves MANGO_SANDBOX and its alias MANAGED_AGENT_SANDBOX.
// It returns the lowercase name and the variable it came from ("" for the
// default), or "" if the two disagree.
func (p *parser) sandboxName(v *vars) (name, from string) {
	primary, alias := strings.ToLower(v.Sandbox), strings.ToLower(v.SandboxAlias)
	switch {
	case primary != "" && alias != "" && primary != alias:
		err := fmt.Errorf("%s=%q and %s=%q disagree (set one, or both to the same provider)",
			EnvSandbox, p.getenv(EnvSandbox), EnvSandboxAlias, p.getenv(EnvSandboxAlias))
		p.errs = append(p.errs, err)
		p.bad = append(p.bad, EnvSandbox, EnvSandboxAlias)
		return "", ""
	case primary != "":
		return primary, EnvSandbox
	case alias != "":
		return alias, EnvSandboxAlias
	default:
		return DefaultSandbox, ""
	}
}

func orList(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

var _ error = (*ValidationError)(nil)
