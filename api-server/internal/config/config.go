// Package config reads the api-server's configuration from the environment
// into one struct, validated at startup with errors that name the variable.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/filestore/filestores3"
	"github.com/mangohq/mango/api-server/internal/usage"
	"github.com/mangohq/mango/internal/envconf"
	"github.com/mangohq/mango/internal/pprofserve"
	"github.com/mangohq/mango/internal/telemetry"
	"github.com/mangohq/mango/internal/tlsconf"
	"github.com/mangohq/mango/proto/sessionwf"
)

// Config is the api-server's complete configuration.
type Config struct {
	// DatabaseURL is the PostgreSQL URL (MANGO_DATABASE_URL, required).
	DatabaseURL string
	// DatabaseMaxConns caps the connection pool (MANGO_DATABASE_MAX_CONNS).
	DatabaseMaxConns int32
	// TemporalHostPort is the Temporal frontend (MANGO_TEMPORAL_HOSTPORT).
	TemporalHostPort string
	// TemporalNamespace is the Temporal namespace (MANGO_TEMPORAL_NAMESPACE).
	TemporalNamespace string
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
	// HTTPAddr is the public API listen address (MANGO_HTTP_ADDR).
	HTTPAddr string
	// GRPCAddr is the internal ControlPlane listen address (MANGO_GRPC_ADDR).
	GRPCAddr string
	// GRPCTLS, when not nil, serves the ControlPlane over TLS
	// (MANGO_GRPC_TLS_CERT_FILE + MANGO_GRPC_TLS_KEY_FILE), requiring
	// client certificates signed by MANGO_GRPC_TLS_CLIENT_CA_FILE when that
	// is set. Nil means plaintext.
	GRPCTLS *tlsconf.Server
	// APIKey, when set, is bootstrapped as a valid API key (MANGO_API_KEY).
	APIKey string
	// WorkerToken authenticates execution workers (MANGO_WORKER_TOKEN).
	WorkerToken string
	// TaskQueuePrefix is the first segment of the Temporal task queues
	// (MANGO_TASK_QUEUE_PREFIX, default "mango"); it must match the workers'.
	TaskQueuePrefix string
	// DefaultSandbox is the provider of new sessions (MANGO_SANDBOX).
	DefaultSandbox string
	// SandboxProviders are the providers sessions may select
	// (MANGO_SANDBOX_PROVIDERS, comma-separated; defaults to DefaultSandbox).
	SandboxProviders []string
	// RequireLiveWorker refuses (503) new sessions whose provider has no
	// live worker (MANGO_REQUIRE_LIVE_WORKER, default false: accepted
	// sessions wait for a worker).
	RequireLiveWorker bool
	// HostGoneAfter is how long a turn waits on its sandbox's locality
	// queue (local, docker) with no live worker there before it fails
	// explicitly (MANGO_HOST_GONE_AFTER, default 2m).
	HostGoneAfter time.Duration
	// MaxBodyBytes caps request bodies (MANGO_MAX_BODY_BYTES).
	MaxBodyBytes int64
	// StreamMaxLag is how many events an SSE stream may fall behind its
	// session before it is cut (MANGO_STREAM_MAX_LAG, default 4096); the
	// client resumes with Last-Event-ID.
	StreamMaxLag int
	// StreamPingInterval spaces the `: ping` comments that keep idle SSE
	// streams open through proxies (MANGO_STREAM_PING_INTERVAL, default 15s).
	StreamPingInterval time.Duration
	// ShutdownTimeout bounds graceful shutdown (MANGO_SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// AutoMigrate applies migrations at startup (MANGO_AUTO_MIGRATE).
	AutoMigrate bool
	// LogLevel is the minimum log level (MANGO_LOG_LEVEL).
	LogLevel slog.Level
	// LogFormat is "text" or "json" (MANGO_LOG_FORMAT).
	LogFormat string
	// Prices is the model price table: the defaults, with the entries of
	// the JSON or YAML file named by MANGO_MODEL_PRICES added or replaced.
	Prices *usage.Table
	// Secrets are the key-encryption keys of MANGO_VAULT_KEYS (package
	// envelope); empty when unset, which refuses stored secrets.
	Secrets *envelope.Keyring
	// AllowPrivate lets credential validation reach MCP servers and token
	// endpoints on loopback, link-local and private addresses
	// (MANGO_MCP_ALLOW_PRIVATE, as on the workers).
	AllowPrivate bool
	// WebhookAllowPrivate accepts webhook endpoints on loopback,
	// link-local and private addresses, over plain http too
	// (MANGO_WEBHOOK_ALLOW_PRIVATE): development and tests.
	WebhookAllowPrivate bool
	// Tracing is the OpenTelemetry tracing the OTEL_* variables ask for
	// (package telemetry; off by default).
	Tracing telemetry.Config
	// Console serves the web console at /console (MANGO_CONSOLE, default
	// true).
	Console bool
	// ConsoleSignInTTL is how long a console sign-in lasts
	// (MANGO_CONSOLE_SIGNIN_TTL, default 12h).
	ConsoleSignInTTL time.Duration
	// WebhookRetryMax caps the wait between two attempts of a webhook
	// delivery (MANGO_WEBHOOK_RETRY_MAX, default 1h); retries stop 24 h
	// after the event.
	WebhookRetryMax time.Duration
	// DeploymentCatchupWindow is how late a deployment's scheduled fire
	// missed while Temporal (or every api-server) was down still runs
	// (MANGO_DEPLOYMENT_CATCHUP_WINDOW, default 1h).
	DeploymentCatchupWindow time.Duration
	// FilesMaxBytes caps the size of one File, uploaded or published by a
	// session (MANGO_FILES_MAX_BYTES, default 500 MiB).
	FilesMaxBytes int64
	// FilesDownloadUploads lets clients download the files they uploaded
	// (MANGO_FILES_DOWNLOAD_UPLOADS, default false: only files produced by
	// a session are downloadable, as on the hosted API).
	FilesDownloadUploads bool
	// SkillsMaxBytes caps the total size of the files of one skill
	// version upload (MANGO_SKILLS_MAX_BYTES, default 30 MiB).
	SkillsMaxBytes int64
	// SkillsMaxFiles caps the number of files of one skill version upload
	// (MANGO_SKILLS_MAX_FILES, default 500).
	SkillsMaxFiles int
	// SkillsCatalog is the Anthropic skills catalog imported at start
	// (MANGO_SKILLS_CATALOG; empty: none): a directory of skill folders,
	// or s3://bucket/prefix read with the FilesS3 endpoint and
	// credentials (package skillcatalog).
	SkillsCatalog string
	// FilesS3, when not nil, keeps the bytes of Files in an S3-compatible
	// bucket (MANGO_FILES_S3_*, selected by MANGO_FILES_S3_BUCKET or
	// MANGO_FILES_S3_ENDPOINT); nil keeps them in PostgreSQL.
	FilesS3 *filestores3.Config
	// WorkLeaseTTL is the lease of an acknowledged work item and the TTL
	// of a heartbeat that asks for none (MANGO_WORK_LEASE_TTL, default
	// 300s, as the SDK's claim timeout).
	WorkLeaseTTL time.Duration
	// WorkMaxLeaseTTL caps the TTL a heartbeat may ask for
	// (MANGO_WORK_MAX_LEASE_TTL, default 1h).
	WorkMaxLeaseTTL time.Duration
	// PprofAddr, when set, is the host:port serving the Go runtime's
	// profiles on /debug/pprof/ (MANGO_PPROF_ADDR; empty: none).
	PprofAddr string
}

// DefaultFilesMaxBytes is the default of MANGO_FILES_MAX_BYTES: 500 MiB.
const DefaultFilesMaxBytes = 500 << 20

// Defaults of MANGO_SKILLS_MAX_BYTES (30 MiB) and MANGO_SKILLS_MAX_FILES.
const (
	DefaultSkillsMaxBytes = 30 << 20
	DefaultSkillsMaxFiles = 500
)

// LogValue implements slog.LogValuer. Secrets are reported only as set or
// unset: the database URL is logged without its user, password and query,
// the API key and the worker token as set, the vault keys by their primary
// key's id, and the S3 store without its secret.
func (c *Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("database", redactURL(c.DatabaseURL)),
		slog.Int("database_max_conns", int(c.DatabaseMaxConns)),
		slog.String("temporal_hostport", c.TemporalHostPort),
		slog.String("temporal_namespace", c.TemporalNamespace),
		slog.Any("temporal_tls", c.TemporalTLS),
		slog.Bool("temporal_gzip", c.TemporalGzip),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("grpc_addr", c.GRPCAddr),
		slog.Any("grpc_tls", c.GRPCTLS),
		slog.Bool("api_key_set", c.APIKey != ""),
		slog.Bool("worker_token_set", c.WorkerToken != ""),
		slog.String("task_queue_prefix", c.TaskQueuePrefix),
		slog.String("sandbox", c.DefaultSandbox),
		slog.Any("sandbox_providers", c.SandboxProviders),
		slog.Bool("require_live_worker", c.RequireLiveWorker),
		slog.String("host_gone_after", c.HostGoneAfter.String()),
		slog.Int64("max_body_bytes", c.MaxBodyBytes),
		slog.Int("stream_max_lag", c.StreamMaxLag),
		slog.String("stream_ping_interval", c.StreamPingInterval.String()),
		slog.String("shutdown_timeout", c.ShutdownTimeout.String()),
		slog.Bool("auto_migrate", c.AutoMigrate),
		slog.String("log_level", c.LogLevel.String()),
		slog.String("log_format", c.LogFormat),
		slog.Bool("vault_keys_set", !c.Secrets.Empty()),
		slog.String("vault_primary_key", c.Secrets.Primary()),
		slog.Bool("mcp_allow_private", c.AllowPrivate),
		slog.Int64("files_max_bytes", c.FilesMaxBytes),
		slog.Bool("files_download_uploads", c.FilesDownloadUploads),
		slog.Int64("skills_max_bytes", c.SkillsMaxBytes),
		slog.Int("skills_max_files", c.SkillsMaxFiles),
		slog.String("skills_catalog", c.SkillsCatalog),
		slog.String("pprof_addr", c.PprofAddr),
		slog.String("work_lease_ttl", c.WorkLeaseTTL.String()),
		slog.String("work_max_lease_ttl", c.WorkMaxLeaseTTL.String()),
	}
	if c.FilesS3 != nil {
		attrs = append(attrs, slog.Any("files_s3", *c.FilesS3))
	}
	return slog.GroupValue(attrs...)
}

// redactURL keeps a URL's scheme, host and path: its user, password and
// query (which may hold a password too) are left out.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// vars are the api-server's variables as env reads them; Load turns them
// into a Config. A field's default is the value Load gives it before
// reading.
type vars struct {
	DatabaseURL        string        `env:"MANGO_DATABASE_URL"`
	DatabaseMaxConns   int64         `env:"MANGO_DATABASE_MAX_CONNS"`
	TemporalHostPort   string        `env:"MANGO_TEMPORAL_HOSTPORT"`
	TemporalNamespace  string        `env:"MANGO_TEMPORAL_NAMESPACE"`
	TemporalGzip       bool          `env:"MANGO_TEMPORAL_GZIP"`
	HTTPAddr           string        `env:"MANGO_HTTP_ADDR"`
	GRPCAddr           string        `env:"MANGO_GRPC_ADDR"`
	APIKey             string        `env:"MANGO_API_KEY"`
	WorkerToken        string        `env:"MANGO_WORKER_TOKEN"`
	DefaultSandbox     string        `env:"MANGO_SANDBOX"`
	SandboxProviders   []string      `env:"MANGO_SANDBOX_PROVIDERS"`
	TaskQueuePrefix    string        `env:"MANGO_TASK_QUEUE_PREFIX"`
	MaxBodyBytes       int64         `env:"MANGO_MAX_BODY_BYTES"`
	StreamMaxLag       int64         `env:"MANGO_STREAM_MAX_LAG"`
	StreamPingInterval time.Duration `env:"MANGO_STREAM_PING_INTERVAL"`
	ShutdownTimeout    time.Duration `env:"MANGO_SHUTDOWN_TIMEOUT"`
	HostGoneAfter      time.Duration `env:"MANGO_HOST_GONE_AFTER"`
	WorkLeaseTTL       time.Duration `env:"MANGO_WORK_LEASE_TTL"`
	WorkMaxLeaseTTL    time.Duration `env:"MANGO_WORK_MAX_LEASE_TTL"`
	AutoMigrate        bool          `env:"MANGO_AUTO_MIGRATE"`
	RequireLiveWorker  bool          `env:"MANGO_REQUIRE_LIVE_WORKER"`
	LogFormat          string        `env:"MANGO_LOG_FORMAT"`
	LogLevel           string        `env:"MANGO_LOG_LEVEL"`
	ModelPrices        string        `env:"MANGO_MODEL_PRICES"`
	FilesMaxBytes      int64         `env:"MANGO_FILES_MAX_BYTES"`
	FilesDownloads     bool          `env:"MANGO_FILES_DOWNLOAD_UPLOADS"`
	SkillsMaxBytes     int64         `env:"MANGO_SKILLS_MAX_BYTES"`
	SkillsMaxFiles     int64         `env:"MANGO_SKILLS_MAX_FILES"`
	SkillsCatalog      string        `env:"MANGO_SKILLS_CATALOG"`
	AllowPrivate       bool          `env:"MANGO_MCP_ALLOW_PRIVATE"`
	WebhookPrivate     bool          `env:"MANGO_WEBHOOK_ALLOW_PRIVATE"`
	WebhookRetryMax    time.Duration `env:"MANGO_WEBHOOK_RETRY_MAX"`
	DeploymentCatchup  time.Duration `env:"MANGO_DEPLOYMENT_CATCHUP_WINDOW"`
	PprofAddr          string        `env:"MANGO_PPROF_ADDR"`
	Console            bool          `env:"MANGO_CONSOLE"`
	ConsoleSignInTTL   time.Duration `env:"MANGO_CONSOLE_SIGNIN_TTL"`

	GRPCTLSCertFile     string `env:"MANGO_GRPC_TLS_CERT_FILE"`
	GRPCTLSKeyFile      string `env:"MANGO_GRPC_TLS_KEY_FILE"`
	GRPCTLSClientCAFile string `env:"MANGO_GRPC_TLS_CLIENT_CA_FILE"`
	TemporalTLS         bool   `env:"MANGO_TEMPORAL_TLS"`
	TemporalTLSCAFile   string `env:"MANGO_TEMPORAL_TLS_CA_FILE"`
	TemporalTLSCertFile string `env:"MANGO_TEMPORAL_TLS_CERT_FILE"`
	TemporalTLSKeyFile  string `env:"MANGO_TEMPORAL_TLS_KEY_FILE"`
	TemporalTLSServer   string `env:"MANGO_TEMPORAL_TLS_SERVER_NAME"`
}

// parsers give the messages of a value that does not parse, by type.
var parsers = envconf.Parsers{
	reflect.TypeFor[bool](): func(v string) (any, error) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("must be a boolean (1, true, 0, false), got %q", v)
		}
		return b, nil
	},
	reflect.TypeFor[time.Duration](): func(v string) (any, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("must be a positive duration such as 30s, got %q", v)
		}
		return d, nil
	},
	reflect.TypeFor[int64](): func(v string) (any, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("must be a number of bytes, got %q", v)
		}
		return n, nil
	},
}

// Load reads the configuration through getenv (os.Getenv in production).
// The error names every invalid variable.
func Load(getenv func(string) string) (*Config, error) {
	v := vars{
		TemporalHostPort: "127.0.0.1:7233", TemporalNamespace: "default",
		HTTPAddr: "127.0.0.1:8080", GRPCAddr: "127.0.0.1:8081",
		DefaultSandbox: "local", TaskQueuePrefix: "mango", LogFormat: "text", LogLevel: "info",
		MaxBodyBytes: 32 << 20, StreamMaxLag: 4096, DatabaseMaxConns: 32, FilesMaxBytes: DefaultFilesMaxBytes,
		SkillsMaxBytes: DefaultSkillsMaxBytes, SkillsMaxFiles: DefaultSkillsMaxFiles,
		StreamPingInterval: 15 * time.Second, ShutdownTimeout: 30 * time.Second, HostGoneAfter: 2 * time.Minute, WebhookRetryMax: time.Hour,
		DeploymentCatchup: time.Hour, Console: true, ConsoleSignInTTL: 12 * time.Hour,
		WorkLeaseTTL: 300 * time.Second, WorkMaxLeaseTTL: time.Hour,
	}
	r := reader{getenv: getenv}
	for _, e := range envconf.Parse(&v, getenv, parsers) {
		r.errs = append(r.errs, e)
		r.bad = append(r.bad, e.Var)
	}
	c := &Config{
		DatabaseURL: v.DatabaseURL, DatabaseMaxConns: int32(v.DatabaseMaxConns),
		TemporalHostPort: v.TemporalHostPort, TemporalNamespace: v.TemporalNamespace, TemporalGzip: v.TemporalGzip,
		HTTPAddr: v.HTTPAddr, GRPCAddr: v.GRPCAddr, APIKey: v.APIKey, WorkerToken: v.WorkerToken,
		DefaultSandbox: strings.ToLower(v.DefaultSandbox), TaskQueuePrefix: v.TaskQueuePrefix,
		MaxBodyBytes: v.MaxBodyBytes, StreamMaxLag: int(v.StreamMaxLag), StreamPingInterval: v.StreamPingInterval,
		ShutdownTimeout: v.ShutdownTimeout, HostGoneAfter: v.HostGoneAfter,
		AutoMigrate: v.AutoMigrate, RequireLiveWorker: v.RequireLiveWorker, LogFormat: v.LogFormat,
		FilesMaxBytes: v.FilesMaxBytes, FilesDownloadUploads: v.FilesDownloads,
		SkillsMaxBytes: v.SkillsMaxBytes, SkillsMaxFiles: int(v.SkillsMaxFiles), SkillsCatalog: strings.TrimSpace(v.SkillsCatalog),
		AllowPrivate: v.AllowPrivate, PprofAddr: v.PprofAddr, WebhookAllowPrivate: v.WebhookPrivate, WebhookRetryMax: v.WebhookRetryMax,
		DeploymentCatchupWindow: v.DeploymentCatchup, Console: v.Console, ConsoleSignInTTL: v.ConsoleSignInTTL,
		WorkLeaseTTL: v.WorkLeaseTTL, WorkMaxLeaseTTL: v.WorkMaxLeaseTTL,
	}
	r.check(c, &v)
	c.LogLevel = r.logLevel(v.LogLevel)
	c.SandboxProviders = r.providers(c.DefaultSandbox, v.SandboxProviders)
	c.GRPCTLS = r.serverTLS(&v)
	c.TemporalTLS = r.clientTLS(&v)
	var err error
	if c.Tracing, err = telemetry.Load(getenv); err != nil {
		r.errs = append(r.errs, err)
	}
	if s3, ok, err := filestores3.ConfigFromEnv(getenv); err != nil {
		r.errs = append(r.errs, err)
	} else if ok {
		c.FilesS3 = &s3
	}
	if bucket, isS3 := strings.CutPrefix(c.SkillsCatalog, "s3://"); isS3 {
		r.require("MANGO_SKILLS_CATALOG", !strings.HasPrefix(bucket, "/") && bucket != "", "want s3://bucket/prefix or a directory")
		r.require("MANGO_SKILLS_CATALOG", c.FilesS3 != nil,
			"an s3:// catalog is read with the file store's S3 settings: set MANGO_FILES_S3_ENDPOINT and MANGO_FILES_S3_BUCKET")
	}
	c.Prices = usage.DefaultTable()
	if path := v.ModelPrices; path != "" {
		t, err := usage.LoadFile(path)
		if err != nil {
			r.fail("MANGO_MODEL_PRICES", fmt.Sprintf("%s: %v", path, err))
		}
		c.Prices = t
	}
	keys, err := envelope.Parse(getenv(envelope.EnvKeys))
	if err != nil {
		r.errs = append(r.errs, err) // names the variable and the entry, never the key
	}
	c.Secrets = keys
	if err := errors.Join(r.errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// check validates the values that parsed; a variable that did not is
// reported once, by Parse.
func (r *reader) check(c *Config, v *vars) {
	if c.DatabaseURL == "" {
		r.fail("MANGO_DATABASE_URL", "is required (a postgres:// URL)")
	} else if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		r.fail("MANGO_DATABASE_URL", "must be a postgres:// URL")
	}
	r.hostPort("MANGO_TEMPORAL_HOSTPORT", c.TemporalHostPort)
	r.hostPort("MANGO_HTTP_ADDR", c.HTTPAddr)
	r.hostPort("MANGO_GRPC_ADDR", c.GRPCAddr)
	if c.PprofAddr != "" {
		r.hostPort(pprofserve.EnvAddr, c.PprofAddr)
	}
	if c.APIKey != "" && len(c.APIKey) < 16 {
		r.fail("MANGO_API_KEY", "must be at least 16 characters")
	}
	r.require("MANGO_DATABASE_MAX_CONNS", v.DatabaseMaxConns >= 2 && v.DatabaseMaxConns <= 10000, "must be between 2 and 10000")
	if !sessionwf.ValidPrefix(c.TaskQueuePrefix) {
		r.fail("MANGO_TASK_QUEUE_PREFIX", "must be lowercase letters, digits and dashes, starting with a letter (at most 64)")
	}
	r.require("MANGO_HOST_GONE_AFTER", c.HostGoneAfter >= time.Second && c.HostGoneAfter <= 24*time.Hour, "must be between 1s and 24h")
	r.require("MANGO_WORK_MAX_LEASE_TTL", c.WorkMaxLeaseTTL >= time.Second && c.WorkMaxLeaseTTL <= 24*time.Hour, "must be between 1s and 24h")
	r.require("MANGO_WORK_LEASE_TTL", c.WorkLeaseTTL >= time.Second && c.WorkLeaseTTL <= c.WorkMaxLeaseTTL, "must be between 1s and MANGO_WORK_MAX_LEASE_TTL")
	r.require("MANGO_STREAM_MAX_LAG", v.StreamMaxLag >= 16 && v.StreamMaxLag <= 1_000_000, "must be a number of events from 16 to 1000000")
	r.require("MANGO_DEPLOYMENT_CATCHUP_WINDOW", c.DeploymentCatchupWindow >= 10*time.Second && c.DeploymentCatchupWindow <= 7*24*time.Hour,
		"must be between 10s and 168h")
	r.require("MANGO_WEBHOOK_RETRY_MAX", c.WebhookRetryMax >= time.Second && c.WebhookRetryMax <= 6*time.Hour, "must be between 1s and 6h")
	r.require("MANGO_STREAM_PING_INTERVAL", c.StreamPingInterval >= time.Second && c.StreamPingInterval <= 5*time.Minute, "must be between 1s and 5m")
	r.require("MANGO_MAX_BODY_BYTES", c.MaxBodyBytes >= 1024, "must be at least 1024")
	r.require("MANGO_FILES_MAX_BYTES", c.FilesMaxBytes >= 1, "must be a positive number of bytes")
	r.require("MANGO_SKILLS_MAX_BYTES", c.SkillsMaxBytes >= 1 && c.SkillsMaxBytes <= 1<<30, "must be a number of bytes from 1 to 1073741824")
	r.require("MANGO_SKILLS_MAX_FILES", v.SkillsMaxFiles >= 1 && v.SkillsMaxFiles <= 10000, "must be a number of files from 1 to 10000")
	switch c.LogFormat {
	case "text", "json":
	default:
		r.fail("MANGO_LOG_FORMAT", "must be text or json")
	}
}

// logLevel maps MANGO_LOG_LEVEL to a level.
func (r *reader) logLevel(v string) slog.Level {
	switch strings.ToLower(v) {
	case "debug":
		return slog.LevelDebug
	case "info":
		return slog.LevelInfo
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	r.fail("MANGO_LOG_LEVEL", "must be debug, info, warn or error")
	return 0
}

// providers lowercases MANGO_SANDBOX_PROVIDERS, which must include the
// default provider; unset, it is the default provider alone.
func (r *reader) providers(def string, list []string) []string {
	var out []string
	for _, p := range list {
		if p = strings.ToLower(strings.TrimSpace(p)); p != "" {
			out = append(out, p)
		}
	}
	if len(list) == 0 {
		return []string{def}
	}
	if !slices.Contains(out, def) {
		r.fail("MANGO_SANDBOX_PROVIDERS", fmt.Sprintf("must include the default provider %q named by MANGO_SANDBOX", def))
	}
	return out
}

type reader struct {
	getenv func(string) string
	errs   []error
	bad    []string // variables that did not parse
}

func (r *reader) fail(name, msg string) {
	r.errs = append(r.errs, fmt.Errorf("%s: %s", name, msg))
}

// require fails name with msg unless ok, or unless name did not parse.
func (r *reader) require(name string, ok bool, msg string) {
	if !ok && !slices.Contains(r.bad, name) {
		r.fail(name, msg)
	}
}

func (r *reader) hostPort(name, v string) {
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		r.fail(name, fmt.Sprintf("must be host:port, got %q", v))
	}
}

// serverTLS reads the ControlPlane listener's certificate, key and
// optional client CA bundle; nil when none is set.
func (r *reader) serverTLS(v *vars) *tlsconf.Server {
	const certVar, keyVar, clientCAVar = "MANGO_GRPC_TLS_CERT_FILE", "MANGO_GRPC_TLS_KEY_FILE", "MANGO_GRPC_TLS_CLIENT_CA_FILE"
	s := &tlsconf.Server{CertFile: v.GRPCTLSCertFile, KeyFile: v.GRPCTLSKeyFile, ClientCAFile: v.GRPCTLSClientCAFile}
	switch {
	case *s == tlsconf.Server{}:
		return nil
	case s.CertFile == "" && s.KeyFile == "":
		r.fail(clientCAVar, fmt.Sprintf("requires %s and %s: client certificates are verified only over TLS", certVar, keyVar))
		return nil
	}
	r.keyPair(certVar, keyVar, s.CertFile, s.KeyFile)
	r.caFile(clientCAVar, s.ClientCAFile)
	return s
}

// clientTLS reads the Temporal client's TLS settings: MANGO_TEMPORAL_TLS
// turns TLS on with the system roots, and a CA bundle or a client
// certificate imply it. It returns nil for plaintext.
func (r *reader) clientTLS(v *vars) *tlsconf.Client {
	const enableVar, caVar, certVar = "MANGO_TEMPORAL_TLS", "MANGO_TEMPORAL_TLS_CA_FILE", "MANGO_TEMPORAL_TLS_CERT_FILE"
	const keyVar, serverNameVar = "MANGO_TEMPORAL_TLS_KEY_FILE", "MANGO_TEMPORAL_TLS_SERVER_NAME"
	c := &tlsconf.Client{CAFile: v.TemporalTLSCAFile, CertFile: v.TemporalTLSCertFile, KeyFile: v.TemporalTLSKeyFile, ServerName: v.TemporalTLSServer}
	implied := c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
	explicitlyOff := strings.TrimSpace(r.getenv(enableVar)) != "" && !slices.Contains(r.bad, enableVar) && !v.TemporalTLS
	if explicitlyOff && implied {
		r.fail(enableVar, fmt.Sprintf("is false, but %s, %s or %s is set, which implies TLS (unset one or the other)", caVar, certVar, keyVar))
		return nil
	}
	if !v.TemporalTLS && !implied {
		if c.ServerName != "" {
			r.fail(serverNameVar, fmt.Sprintf("applies only to TLS (set %s=true or %s)", enableVar, caVar))
		}
		return nil
	}
	r.caFile(caVar, c.CAFile)
	r.keyPair(certVar, keyVar, c.CertFile, c.KeyFile)
	return c
}

// keyPair checks a certificate file and its key file, both or neither.
func (r *reader) keyPair(certVar, keyVar, certFile, keyFile string) {
	switch {
	case certFile == "" && keyFile == "":
		return
	case keyFile == "":
		r.fail(keyVar, "is required with "+certVar)
		return
	case certFile == "":
		r.fail(certVar, "is required with "+keyVar)
		return
	}
	certErr, keyErr := tlsconf.CheckKeyPair(certFile, keyFile)
	if certErr != nil {
		r.fail(certVar, certErr.Error())
	}
	if keyErr != nil {
		r.fail(keyVar, keyErr.Error())
	}
}

// caFile checks a PEM CA bundle, when set.
func (r *reader) caFile(name, path string) {
	if path == "" {
		return
	}
	if err := tlsconf.CheckCAFile(path); err != nil {
		r.fail(name, err.Error())
	}
}
