package netguard_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/mangohq/mango/internal/netguard"
)

func TestBlocked(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "::1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true,
		"169.254.169.254": true, "fe80::1": true, "100.64.0.1": true, "0.0.0.0": true, "::": true, "fd00::1": true,
		"::ffff:127.0.0.1": true, "224.0.0.1": true,
		"8.8.8.8": false, "1.1.1.1": false, "2606:4700::1111": false, "100.128.0.1": false,
	} {
		if got := netguard.Blocked(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Blocked(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	for raw, blocked := range map[string]bool{
		"http://127.0.0.1:8080/mcp": true, "https://[::1]/mcp": true, "http://localhost/mcp": true,
		"http://api.localhost/mcp": true, "http://169.254.169.254/latest": true,
		"https://mcp.example.com/mcp": false, "https://8.8.8.8/mcp": false,
	} {
		err := netguard.CheckURL(raw)
		if got := errors.Is(err, netguard.ErrPrivate); got != blocked {
			t.Errorf("CheckURL(%s) = %v, want blocked %v", raw, err, blocked)
		}
	}
}

// TestTransportChecksDialledAddress: a name that resolves to loopback is
// refused when dialled (the check is after DNS resolution), and allowed
// with the override.
func TestTransportChecksDialledAddress(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	// "localhost" passes no literal check here: the dialled address decides.
	url := "http://localhost:" + port + "/"
	resp, err := (&http.Client{Transport: netguard.Transport(false)}).Get(url)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("a loopback server was reached through the guarded transport")
	}
	if !errors.Is(err, netguard.ErrPrivate) {
		t.Fatalf("error = %v, want ErrPrivate", err)
	}
	resp, err = (&http.Client{Transport: netguard.Transport(true)}).Get(url)
	if err != nil {
		t.Fatalf("with the override: %v", err)
	}
	_ = resp.Body.Close()
}
