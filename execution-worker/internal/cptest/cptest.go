// Package cptest runs a real api-server, the ControlPlane execution workers
// talk to, for the worker's tests. The worker may not import api-server or
// db code, so the server is built from source and run as a process on a
// fresh PostgreSQL database (created from MANGO_TEST_DATABASE_URL and
// migrated with `api-server migrate`), listening on 127.0.0.1. Tests run
// with the race detector build the server with it too, and fail when it
// reports a data race.
package cptest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/internal/freeport"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/testbin"
	"github.com/mangohq/mango/internal/testenv"
)

// Server is a running api-server.
type Server struct {
	// BaseURL is the public HTTP API.
	BaseURL string
	// APIKey is a valid API key.
	APIKey string
	// GRPCAddr is the ControlPlane address.
	GRPCAddr string
	// WorkerToken authenticates workers.
	WorkerToken string
	// DatabaseURL is the server's database.
	DatabaseURL string
	// TemporalHostPort is the Temporal frontend the server uses.
	TemporalHostPort string
	// TaskQueuePrefix is this server's queue prefix: workers of the test
	// must use it too (it keeps tests sharing a Temporal server apart).
	TaskQueuePrefix string
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start runs an api-server on a fresh database until the test ends. env
// holds extra NAME=value settings; they override the defaults (for example
// MANGO_SANDBOX_PROVIDERS, local and docker by default).
func Start(t testing.TB, env ...string) *Server {
	t.Helper()
	admin := testenv.Getenv(t, "MANGO_TEST_DATABASE_URL")
	temporal := os.Getenv("MANGO_TEST_TEMPORAL_HOSTPORT")
	if temporal == "" {
		temporal = "127.0.0.1:1"
	}
	bin := testbin.Build(t, "api-server/cmd/api-server")
	dbURL := createDatabase(t, admin)
	s := &Server{APIKey: "cptest-key-" + randomHex(8), WorkerToken: "cptest-token-" + randomHex(8),
		DatabaseURL: dbURL, TemporalHostPort: temporal, TaskQueuePrefix: "t" + randomHex(6)}
	httpAddr, grpcAddr := freeport.Addr(t), freeport.Addr(t)
	s.BaseURL, s.GRPCAddr = "http://"+httpAddr, grpcAddr
	extra := env
	env = append(os.Environ(),
		"MANGO_DATABASE_URL="+dbURL, "MANGO_TEMPORAL_HOSTPORT="+temporal, "MANGO_HTTP_ADDR="+httpAddr,
		"MANGO_GRPC_ADDR="+grpcAddr, "MANGO_API_KEY="+s.APIKey, "MANGO_WORKER_TOKEN="+s.WorkerToken,
		"MANGO_SANDBOX_PROVIDERS=local,docker", "MANGO_LOG_LEVEL=warn", "MANGO_SHUTDOWN_TIMEOUT=5s",
		"MANGO_TASK_QUEUE_PREFIX="+s.TaskQueuePrefix,
		// A fixed test key, so repository tokens can be stored.
		"MANGO_VAULT_KEYS=cptest:Y3B0ZXN0LW9ubHkta2V5LTAxMjM0NTY3ODlhYmNkZWY=")
	env = append(env, extra...) // for a duplicate name, exec uses the last value
	migrate := exec.Command(bin, "migrate")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("api-server migrate: %v\n%s", err, out)
	}
	// The deadline below reads the logs while the process still writes them.
	var logs LockedBuffer
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start api-server: %v", err)
	}
	// exited is closed when the process has exited (exitErr then says
	// how): both the health poll and the cleanup wait on it.
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		switch out := logs.String(); {
		case strings.Contains(out, "WARNING: DATA RACE"):
			t.Errorf("the api-server reported a data race; its output:\n%s", out)
		case t.Failed():
			t.Logf("api-server output:\n%s", out)
		}
	})
	poll.Until(t, 20*time.Second, "the api-server to be healthy", func() (bool, string) {
		resp, err := http.Get(s.BaseURL + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, ""
			}
		}
		select {
		case <-exited:
			t.Fatalf("api-server exited: %v\n%s", exitErr, logs.String())
		default:
		}
		return false, fmt.Sprintf("healthz: %v\n%s", err, logs.String())
	})
	return s
}

// LockedBuffer collects output written by other goroutines (a process's
// copier, a logger); it may be read while they write.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func createDatabase(t testing.TB, admin string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to MANGO_TEST_DATABASE_URL: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	name := "mango_cp_" + randomHex(8)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse MANGO_TEST_DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// Do sends an authenticated JSON request and decodes a 200 response into
// out (when not nil); any other status fails the test.
func (s *Server) Do(t testing.TB, method, path string, body, out any) {
	t.Helper()
	status, data := s.Request(t, method, path, body)
	if status != http.StatusOK {
		t.Fatalf("%s %s: status %d: %s", method, path, status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("decode %s %s: %v", method, path, err)
		}
	}
}

// Request sends an authenticated JSON request and returns the response's
// status and body.
func (s *Server) Request(t testing.TB, method, path string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.BaseURL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", s.APIKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// NewSession creates an agent with the built-in toolset, an environment
// (selecting provider when not empty) and a session; it returns the
// session id.
func (s *Server) NewSession(t testing.TB, provider string) string {
	t.Helper()
	var agent, env, sess struct{ ID string }
	s.Do(t, http.MethodPost, "/v1/agents", map[string]any{"name": "cptest", "model": "fake",
		"tools": []any{map[string]any{"type": "agent_toolset_20260401"}}}, &agent)
	envBody := map[string]any{"name": "cptest-" + randomHex(4)}
	if provider != "" {
		envBody["metadata"] = map[string]string{"mango.sandbox": provider}
	}
	s.Do(t, http.MethodPost, "/v1/environments", envBody, &env)
	s.Do(t, http.MethodPost, "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": env.ID}, &sess)
	return sess.ID
}
