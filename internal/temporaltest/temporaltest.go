// Package temporaltest gives tests of every Mango module a Temporal
// frontend: the test stack's shared dev server ([HostPort], from
// MANGO_TEST_TEMPORAL_HOSTPORT) or a private one they can start late and
// stop early ([Reserve], then [DevServer.Start]), to exercise what happens
// while Temporal is down. Without a server the test is skipped, or failed
// when MANGO_REQUIRE_SERVICES=1 (package testenv). A local dev server is
// enough, for example:
//
//	bin/temporal server start-dev --headless --ip 127.0.0.1 --port 27299
//	MANGO_TEST_TEMPORAL_HOSTPORT=127.0.0.1:27299 go test ./...
package temporaltest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/mangohq/mango/internal/testenv"
)

// EnvHostPort names the variable holding the shared test Temporal frontend.
const EnvHostPort = "MANGO_TEST_TEMPORAL_HOSTPORT"

// HostPort returns the test stack's Temporal frontend, skipping the test
// (or failing it when MANGO_REQUIRE_SERVICES=1) when none is configured.
func HostPort(t testing.TB) string {
	t.Helper()
	return testenv.Getenv(t, EnvHostPort)
}

// Dial connects to hostPort, closed when the test ends.
func Dial(t testing.TB, hostPort string) client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Logger: Quiet{}})
	if err != nil {
		t.Fatalf("dial Temporal at %s: %v", hostPort, err)
	}
	t.Cleanup(c.Close)
	return c
}

// DevServer is a private in-memory Temporal dev server (bin/temporal).
type DevServer struct {
	// HostPort is the frontend address; nothing listens there before
	// Start.
	HostPort string
	bin      string
	port     int
}

// Reserve picks free ports for a private dev server without starting it.
func Reserve(t testing.TB) *DevServer {
	t.Helper()
	bin := binary(t)
	port := freePorts(t, 3)
	return &DevServer{HostPort: fmt.Sprintf("127.0.0.1:%d", port), bin: bin, port: port}
}

// Start starts the server (frontend, HTTP and metrics on three consecutive
// ports, with the tuned dev flags of DESIGN.md §8), stops it when the test
// ends, and waits until it answers.
func (s *DevServer) Start(t testing.TB) {
	t.Helper()
	cmd := exec.Command(s.bin, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
		"--port", strconv.Itoa(s.port), "--http-port", strconv.Itoa(s.port+1), "--metrics-port", strconv.Itoa(s.port+2),
		"--log-level", "warn",
		"--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000",
		"--dynamic-config-value", "system.enableActivityEagerExecution=true")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start Temporal dev server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := client.DialContext(ctx, client.Options{HostPort: s.HostPort, Logger: Quiet{}})
		cancel()
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("Temporal dev server exited during startup: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("Temporal dev server on %s not ready after 60s: %v", s.HostPort, err)
		}
	}
}

// Quiet is a Temporal client logger that discards everything, for clients
// pointed at a server that is down on purpose.
type Quiet struct{}

// Debug discards a message.
func (Quiet) Debug(string, ...any) {}

// Info discards a message.
func (Quiet) Info(string, ...any) {}

// Warn discards a message.
func (Quiet) Warn(string, ...any) {}

// Error discards a message.
func (Quiet) Error(string, ...any) {}

// binary returns the project's Temporal CLI, bin/temporal in an ancestor
// of the working directory.
func binary(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "bin", "temporal")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	testenv.Unavailable(t, "bin/temporal not found; build it with `make tools`")
	return ""
}

// freePorts returns the first of n consecutive free loopback ports.
func freePorts(t testing.TB, n int) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		ok := base+n < 65536
		for i := 1; ok && i < n; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}
