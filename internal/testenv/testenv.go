// Package testenv decides what a test does when something it needs from
// its environment is missing: a service (PostgreSQL, Temporal, a Docker
// daemon, the sandbox image) or a tool (git, bin/temporal). The test is
// skipped, unless MANGO_REQUIRE_SERVICES=1 (as `make test` and CI set it),
// when it fails, so that CI cannot silently skip integration tests. Every
// Mango module's tests apply the rule through this package.
package testenv

import (
	"os"
	"testing"
)

// EnvRequireServices names the variable that turns skips for missing
// services into failures when set to "1".
const EnvRequireServices = "MANGO_REQUIRE_SERVICES"

// Required reports whether a missing service fails a test instead of
// skipping it (MANGO_REQUIRE_SERVICES=1).
func Required() bool {
	return os.Getenv(EnvRequireServices) == "1"
}

// Unavailable ends tb because something it needs is missing: it fails tb
// with the formatted message when services are [Required], and skips it
// with the same message otherwise.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if Required() {
		tb.Fatalf(format, args...)
	}
	tb.Skipf(format, args...)
}

// Getenv returns the value of the variable name, which points tests at a
// service (for example MANGO_TEST_DATABASE_URL), or ends tb through
// [Unavailable] when it is unset or empty.
func Getenv(tb testing.TB, name string) string {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		Unavailable(tb, "%s is not set; run the tests with `make test`", name)
	}
	return v
}
