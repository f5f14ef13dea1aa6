// Package temporaltest gives tests access to a real Temporal server.
//
// Tests that need Temporal call [HostPort]. The server address comes from
// MANGO_TEST_TEMPORAL_HOSTPORT; when it is unset the test is skipped, unless
// MANGO_REQUIRE_SERVICES=1, in which case it fails, so CI cannot silently
// skip the integration tests. A local dev server is enough, for example:
//
//	bin/temporal server start-dev --headless --ip 127.0.0.1 --port 27299
//	MANGO_TEST_TEMPORAL_HOSTPORT=127.0.0.1:27299 go test ./...
package temporaltest

import (
	"os"
	"testing"

	"go.temporal.io/sdk/client"
)

// Environment variables read by [HostPort].
const (
	EnvHostPort        = "MANGO_TEST_TEMPORAL_HOSTPORT"
	EnvRequireServices = "MANGO_REQUIRE_SERVICES"
)

// HostPort returns the address of the Temporal server tests may use, or ends
// the test: skipped when none is configured, failed when services are
// required.
func HostPort(t testing.TB) string {
	t.Helper()
	if hp := os.Getenv(EnvHostPort); hp != "" {
		return hp
	}
	if os.Getenv(EnvRequireServices) == "1" {
		t.Fatalf("%s is not set but %s=1: a Temporal server is required", EnvHostPort, EnvRequireServices)
	}
	t.Skipf("%s not set; skipping test that needs a Temporal server", EnvHostPort)
	return ""
}

// Dial returns a Temporal client of hostPort, closed when the test ends.
func Dial(t testing.TB, hostPort string) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: hostPort})
	if err != nil {
		t.Fatalf("dial Temporal at %s: %v", hostPort, err)
	}
	t.Cleanup(c.Close)
	return c
}
