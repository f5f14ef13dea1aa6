// Package config reads the api-server's configuration from the environment
// into one struct, validated at startup with errors that name the variable.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/filestore/filestores3"
	"github.com/mangohq/mango/api-server/internal/usage"
	"github.com/mangohq/mango/internal/netguard"
	"github.com/mangohq/mango/internal/pprofserve"
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
	// FilesMaxBytes caps the size of one File, uploaded or published by a
	// session (MANGO_FILES_MAX_BYTES, default 500 MiB).
	FilesMaxBytes int64
	// FilesDownloadUploads lets clients download the files they uploaded
	// (MANGO_FILES_DOWNLOAD_UPLOADS, default false: only files produced by
	// a session are downloadable, as on the hosted API).
	FilesDownloadUploads bool
	// FilesS3, when not nil, keeps the bytes of Files in an S3-compatible
	// bucket (MANGO_FILES_S3_*, selected by MANGO_FILES_S3_BUCKET or
	// MANGO_FILES_S3_ENDPOINT); nil keeps them in PostgreSQL.
	FilesS3 *filestores3.Config
	// PprofAddr, when set, is the host:port serving the Go runtime's
	// profiles on /debug/pprof/ (MANGO_PPROF_ADDR; empty: none).
	PprofAddr string
}

// DefaultFilesMaxBytes is the default of MANGO_FILES_MAX_BYTES: 500 MiB.
const DefaultFilesMaxBytes = 500 << 20

// Load reads the configuration through getenv (os.Getenv in production).
func Load(getenv func(string) string) (*Config, error) {
	r := reader{getenv: getenv}
	c := &Config{
		DatabaseURL:        r.str("MANGO_DATABASE_URL", ""),
		TemporalHostPort:   r.str("MANGO_TEMPORAL_HOSTPORT", "127.0.0.1:7233"),
		TemporalNamespace:  r.str("MANGO_TEMPORAL_NAMESPACE", "default"),
		TemporalGzip:       r.boolean("MANGO_TEMPORAL_GZIP", false),
		HTTPAddr:           r.str("MANGO_HTTP_ADDR", "127.0.0.1:8080"),
		GRPCAddr:           r.str("MANGO_GRPC_ADDR", "127.0.0.1:8081"),
		APIKey:             r.str("MANGO_API_KEY", ""),
		WorkerToken:        r.str("MANGO_WORKER_TOKEN", ""),
		DefaultSandbox:     strings.ToLower(r.str("MANGO_SANDBOX", "local")),
		TaskQueuePrefix:    r.str("MANGO_TASK_QUEUE_PREFIX", "mango"),
		MaxBodyBytes:       r.size("MANGO_MAX_BODY_BYTES", 32<<20),
		StreamMaxLag:       int(r.size("MANGO_STREAM_MAX_LAG", 4096)),
		StreamPingInterval: r.duration("MANGO_STREAM_PING_INTERVAL", 15*time.Second),
		DatabaseMaxConns:   int32(r.size("MANGO_DATABASE_MAX_CONNS", 32)),
		ShutdownTimeout:    r.duration("MANGO_SHUTDOWN_TIMEOUT", 30*time.Second),
		HostGoneAfter:      r.duration("MANGO_HOST_GONE_AFTER", 2*time.Minute),
		AutoMigrate:        r.boolean("MANGO_AUTO_MIGRATE", false),
		RequireLiveWorker:  r.boolean("MANGO_REQUIRE_LIVE_WORKER", false),
		LogFormat:          r.str("MANGO_LOG_FORMAT", "text"),

		FilesMaxBytes:        r.size("MANGO_FILES_MAX_BYTES", DefaultFilesMaxBytes),
		FilesDownloadUploads: r.boolean("MANGO_FILES_DOWNLOAD_UPLOADS", false),
		AllowPrivate:         r.boolean(netguard.EnvAllowPrivate, false),
		PprofAddr:            r.str(pprofserve.EnvAddr, ""),
	}
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
	if c.DatabaseMaxConns < 2 || c.DatabaseMaxConns > 10000 {
		r.fail("MANGO_DATABASE_MAX_CONNS", "must be between 2 and 10000")
	}
	if !sessionwf.ValidPrefix(c.TaskQueuePrefix) {
		r.fail("MANGO_TASK_QUEUE_PREFIX", "must be lowercase letters, digits and dashes, starting with a letter (at most 64)")
	}
	if c.HostGoneAfter > 0 && (c.HostGoneAfter < time.Second || c.HostGoneAfter > 24*time.Hour) {
		r.fail("MANGO_HOST_GONE_AFTER", "must be between 1s and 24h")
	}
	if c.StreamMaxLag < 16 || c.StreamMaxLag > 1_000_000 {
		r.fail("MANGO_STREAM_MAX_LAG", "must be a number of events from 16 to 1000000")
	}
	if c.StreamPingInterval < time.Second || c.StreamPingInterval > 5*time.Minute {
		r.fail("MANGO_STREAM_PING_INTERVAL", "must be between 1s and 5m")
	}
	if c.MaxBodyBytes < 1024 {
		r.fail("MANGO_MAX_BODY_BYTES", "must be at least 1024")
	}
	if c.FilesMaxBytes < 1 {
		r.fail("MANGO_FILES_MAX_BYTES", "must be a positive number of bytes")
	}
	if s3, ok, err := filestores3.ConfigFromEnv(getenv); err != nil {
		r.errs = append(r.errs, err)
	} else if ok {
		c.FilesS3 = &s3
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		r.fail("MANGO_LOG_FORMAT", "must be text or json")
	}
	switch lvl := strings.ToLower(r.str("MANGO_LOG_LEVEL", "info")); lvl {
	case "debug":
		c.LogLevel = slog.LevelDebug
	case "info":
		c.LogLevel = slog.LevelInfo
	case "warn":
		c.LogLevel = slog.LevelWarn
	case "error":
		c.LogLevel = slog.LevelError
	default:
		r.fail("MANGO_LOG_LEVEL", "must be debug, info, warn or error")
	}
	c.GRPCTLS = r.serverTLS("MANGO_GRPC_TLS_CERT_FILE", "MANGO_GRPC_TLS_KEY_FILE", "MANGO_GRPC_TLS_CLIENT_CA_FILE")
	c.TemporalTLS = r.clientTLS("MANGO_TEMPORAL_TLS", "MANGO_TEMPORAL_TLS_CA_FILE", "MANGO_TEMPORAL_TLS_CERT_FILE",
		"MANGO_TEMPORAL_TLS_KEY_FILE", "MANGO_TEMPORAL_TLS_SERVER_NAME")
	providers := r.str("MANGO_SANDBOX_PROVIDERS", "")
	if providers == "" {
		c.SandboxProviders = []string{c.DefaultSandbox}
	} else {
		for _, p := range strings.Split(providers, ",") {
			if p = strings.ToLower(strings.TrimSpace(p)); p != "" {
				c.SandboxProviders = append(c.SandboxProviders, p)
			}
		}
		if !slices.Contains(c.SandboxProviders, c.DefaultSandbox) {
			r.fail("MANGO_SANDBOX_PROVIDERS", fmt.Sprintf("must include the default provider %q named by MANGO_SANDBOX", c.DefaultSandbox))
		}
	}
	c.Prices = usage.DefaultTable()
	if path := r.str("MANGO_MODEL_PRICES", ""); path != "" {
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

type reader struct {
	getenv func(string) string
	errs   []error
}

func (r *reader) fail(name, msg string) {
	r.errs = append(r.errs, fmt.Errorf("%s: %s", name, msg))
}

func (r *reader) str(name, def string) string {
	if v := strings.TrimSpace(r.getenv(name)); v != "" {
		return v
	}
	return def
}

func (r *reader) boolean(name string, def bool) bool {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, fmt.Sprintf("must be a boolean (1, true, 0, false), got %q", v))
	}
	return b
}

func (r *reader) duration(name string, def time.Duration) time.Duration {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		r.fail(name, fmt.Sprintf("must be a positive duration such as 30s, got %q", v))
	}
	return d
}

func (r *reader) size(name string, def int64) int64 {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		r.fail(name, fmt.Sprintf("must be a number of bytes, got %q", v))
	}
	return n
}

func (r *reader) hostPort(name, v string) {
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		r.fail(name, fmt.Sprintf("must be host:port, got %q", v))
	}
}

// serverTLS reads a TLS listener's certificate, key and optional client CA
// bundle; nil when none is set.
func (r *reader) serverTLS(certVar, keyVar, clientCAVar string) *tlsconf.Server {
	s := &tlsconf.Server{CertFile: r.str(certVar, ""), KeyFile: r.str(keyVar, ""), ClientCAFile: r.str(clientCAVar, "")}
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

// clientTLS reads a TLS client's settings: enableVar turns TLS on with the
// system roots, and a CA bundle or a client certificate imply it. It
// returns nil for plaintext.
func (r *reader) clientTLS(enableVar, caVar, certVar, keyVar, serverNameVar string) *tlsconf.Client {
	raw := r.getenv(enableVar)
	enabled := r.boolean(enableVar, false)
	c := &tlsconf.Client{CAFile: r.str(caVar, ""), CertFile: r.str(certVar, ""), KeyFile: r.str(keyVar, ""), ServerName: r.str(serverNameVar, "")}
	implied := c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
	if off, err := strconv.ParseBool(raw); raw != "" && err == nil && !off && implied {
		r.fail(enableVar, fmt.Sprintf("is false, but %s, %s or %s is set, which implies TLS (unset one or the other)", caVar, certVar, keyVar))
		return nil
	}
	if !enabled && !implied {
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
