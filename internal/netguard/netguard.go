// Package netguard keeps outbound connections to client-configured
// endpoints (MCP servers the workers call, the endpoints the api-server
// probes for credential validation) off the networks Mango itself lives
// in: loopback, link-local (cloud metadata services), private and shared
// address ranges. The check runs on the address actually dialled, after
// DNS resolution, so a name that resolves (or re-resolves, DNS rebinding)
// to such an address is refused too. Both services use it, so it lives in
// the shared module.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// EnvAllowPrivate is the setting (of both binaries) that turns the guard
// off: development, tests, MCP servers deliberately run inside the
// cluster.
const EnvAllowPrivate = "MANGO_MCP_ALLOW_PRIVATE"

// ErrPrivate reports a connection refused because its address lies in a
// guarded range.
var ErrPrivate = errors.New("address is loopback, link-local or private, which this deployment does not allow for MCP servers")

// sharedSpace is the carrier-grade NAT range (RFC 6598), not covered by
// netip's IsPrivate.
var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// Blocked reports whether a is in a guarded range.
func Blocked(a netip.Addr) bool {
	a = a.Unmap()
	return !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || sharedSpace.Contains(a)
}

// CheckURL refuses, before any connection, a URL whose host is a literal
// address in a guarded range or a name that obviously is one
// ("localhost"). Names are checked again when dialled.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse %q: %w", raw, err)
	}
	host := u.Hostname()
	if host == "localhost" || len(host) > len(".localhost") && host[len(host)-len(".localhost"):] == ".localhost" {
		return fmt.Errorf("%s: %w", host, ErrPrivate)
	}
	if a, err := netip.ParseAddr(host); err == nil && Blocked(a) {
		return fmt.Errorf("%s: %w", host, ErrPrivate)
	}
	return nil
}

// control is a net.Dialer Control function refusing guarded addresses.
func control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	a, err := netip.ParseAddr(host)
	if err != nil || Blocked(a) {
		return fmt.Errorf("%s: %w", host, ErrPrivate)
	}
	return nil
}

// Transport returns an HTTP transport for guarded endpoints: with allow
// false every connection to a guarded address is refused after DNS
// resolution; with allow true it is an ordinary transport. It never uses
// a proxy from the environment (the guard would check the proxy, not the
// endpoint).
func Transport(allow bool) *http.Transport {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if !allow {
		d.Control = control
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
	return t
}
