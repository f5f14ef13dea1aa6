// Package testserver starts a real api-server for tests: the production
// wiring of package app on a fresh migrated PostgreSQL database (dbtest),
// listening on 127.0.0.1 with a random port.
package testserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/api-server/internal/app"
	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/db/dbtest"
)

// APIKey is the key every test server accepts.
const APIKey = "mango-test-key-0123456789abcdef"

// VaultKeys is the MANGO_VAULT_KEYS of test servers (a fixed test key).
const VaultKeys = "test1:dGVzdC1vbmx5LWtleS0wMTIzNDU2Nzg5YWJjZGVmMDE="

// Server is a running test api-server.
type Server struct {
	// BaseURL is the HTTP base URL, e.g. http://127.0.0.1:43121.
	BaseURL string
	// APIKey is a valid API key.
	APIKey string
	// DatabaseURL is the server's database.
	DatabaseURL string
	// GRPCAddr is the ControlPlane (gRPC) address, e.g. 127.0.0.1:43122.
	GRPCAddr string
	// WorkerToken is the token the ControlPlane accepts.
	WorkerToken string
	// TaskQueuePrefix keeps this server's workflows on task queues of its
	// own, so tests sharing one Temporal server never see each other's.
	TaskQueuePrefix string

	stop func() error
}

// Stop shuts the server down as SIGTERM does and returns Serve's result;
// later calls (and the test's cleanup) return the same.
func (s *Server) Stop() error { return s.stop() }

// Option adjusts the configuration before start.
type Option func(s *settings)

// settings are what options adjust.
type settings struct {
	env  map[string]string
	logs io.Writer
}

// WithEnv sets one configuration variable.
func WithEnv(name, value string) Option {
	return func(s *settings) { s.env[name] = value }
}

// WithDatabase makes the server use an existing database (for example
// another test server's, to run two replicas on one database).
func WithDatabase(url string) Option {
	return func(s *settings) { s.env["MANGO_DATABASE_URL"] = url }
}

// WithLogs writes the server's logs, at debug level and above, to w (which
// must be safe for concurrent writes), for tests that inspect them.
func WithLogs(w io.Writer) Option {
	return func(s *settings) { s.logs = w }
}

// Start runs an api-server until the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	probe := &settings{env: map[string]string{}}
	for _, o := range opts {
		o(probe)
	}
	dbURL := probe.env["MANGO_DATABASE_URL"]
	if dbURL == "" {
		dbURL = dbtest.URL(t)
	}
	temporal := os.Getenv("MANGO_TEST_TEMPORAL_HOSTPORT")
	if temporal == "" {
		temporal = "127.0.0.1:1" // nothing listens: readiness reports Temporal down
	}
	env := map[string]string{
		"MANGO_DATABASE_URL":      dbURL,
		"MANGO_TEMPORAL_HOSTPORT": temporal,
		"MANGO_HTTP_ADDR":         "127.0.0.1:0",
		"MANGO_GRPC_ADDR":         "127.0.0.1:0",
		"MANGO_API_KEY":           APIKey,
		"MANGO_WORKER_TOKEN":      "test-worker-token",
		"MANGO_SHUTDOWN_TIMEOUT":  "5s",
		"MANGO_TASK_QUEUE_PREFIX": "t" + randomSuffix(),
		"MANGO_VAULT_KEYS":        VaultKeys,
	}
	set := &settings{env: env}
	for _, o := range opts {
		o(set)
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("test server config: %v", err)
	}
	var log *slog.Logger
	switch {
	case set.logs != nil:
		log = slog.New(slog.NewTextHandler(set.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	case testing.Verbose():
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	default:
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := app.New(ctx, cfg, log)
	if err != nil {
		cancel()
		t.Fatalf("start test server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	timeout := cfg.ShutdownTimeout + 5*time.Second
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(timeout):
			return fmt.Errorf("test server did not shut down within %v", timeout)
		}
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("test server: %v", err)
		}
	})
	return &Server{BaseURL: "http://" + srv.HTTPAddr(), APIKey: APIKey, DatabaseURL: cfg.DatabaseURL, TaskQueuePrefix: cfg.TaskQueuePrefix,
		GRPCAddr: srv.GRPCAddr(), WorkerToken: cfg.WorkerToken, stop: stop}
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
