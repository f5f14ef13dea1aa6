package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// EnvLocality names an explicit locality for a host-bound provider
// (MANGO_SANDBOX_LOCALITY). When set it replaces the provider's own
// [Located.Locality]; every worker that reaches the same sandboxes must then
// be given the same value.
const EnvLocality = "MANGO_SANDBOX_LOCALITY"

// MaxLocalityLen bounds a locality so the task queue named for it
// ("<prefix>.<provider>.<locality>") stays well inside Temporal's limits.
const MaxLocalityLen = 100

// Located is implemented by host-bound providers (see [Traits.HostBound]).
//
// Locality names where the provider's sandboxes live, never the process
// asking: the same value for every client that reaches the same sandboxes
// (a restarted worker, a second replica, a rolled pod on the same host or
// daemon), and a different value for clients that cannot reach them. The
// worker polls the task queue named for it, and a session's binding records
// that queue, so any worker of the locality serves the session's later
// sandbox activities. The result is a valid locality (see [ValidLocality]);
// errors mean the place cannot be identified, and the worker does not
// start.
type Located interface {
	Locality(ctx context.Context) (string, error)
}

// ValidLocality reports whether s can name a locality: 1 to
// [MaxLocalityLen] lowercase letters, digits and dashes, starting with a
// letter or digit.
func ValidLocality(s string) bool {
	if s == "" || len(s) > MaxLocalityLen || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// CheckLocality returns an error naming what a valid locality is unless
// [ValidLocality] accepts s.
func CheckLocality(s string) error {
	if ValidLocality(s) {
		return nil
	}
	return fmt.Errorf("invalid locality %q (want 1 to %d lowercase letters, digits and dashes)", s, MaxLocalityLen)
}

// LocalityOf returns the locality of a host-bound provider: override when
// set (it must be valid), else the provider's own.
func LocalityOf(ctx context.Context, p Provider, override string) (string, error) {
	if override != "" {
		if err := CheckLocality(override); err != nil {
			return "", fmt.Errorf("%s: %w", EnvLocality, err)
		}
		return override, nil
	}
	l, ok := p.(Located)
	if !ok {
		return "", fmt.Errorf("sandbox provider %s is host-bound but cannot name its locality; set %s", p.Name(), EnvLocality)
	}
	loc, err := l.Locality(ctx)
	if err != nil {
		return "", fmt.Errorf("locality of the %s sandbox provider: %w (or set %s)", p.Name(), err, EnvLocality)
	}
	if !ValidLocality(loc) {
		return "", fmt.Errorf("sandbox provider %s reports an invalid locality %q", p.Name(), loc)
	}
	return loc, nil
}

// SanitizeLocality maps an arbitrary identifier (a daemon id, a host name)
// to locality characters: lowercase, every run of other characters one
// dash, trimmed, truncated to max bytes. It returns "" when nothing is left.
func SanitizeLocality(s string, maxLen int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.TrimRight(b.String(), "-")
	if len(out) > maxLen {
		out = strings.TrimRight(out[:maxLen], "-")
	}
	return out
}

// HostIdentity returns a stable name for the machine this process runs on:
// the systemd/D-Bus machine id when the host has one (the first 12
// characters suffice to tell machines apart), else the host name. It is
// the same for every process on the host and survives their restarts.
func HostIdentity() (string, error) {
	for _, path := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(path); err == nil {
			if id := SanitizeLocality(strings.TrimSpace(string(b)), 12); id != "" {
				return id, nil
			}
		}
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("host identity: no machine id and no host name: %w", err)
	}
	if id := SanitizeLocality(host, 63); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("host identity: no machine id, and host name %q has no usable characters", host)
}

// ShortHash returns the first 8 hex characters of SHA-256(s): enough to
// tell apart a handful of values on one host (for example sandbox roots).
func ShortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}
