package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

func TestSanitizeLocality(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"N36X:GKMM:AHXT:UWBA", 100, "n36x-gkmm-ahxt-uwba"},
		{"b1c2-uuid-like-id", 100, "b1c2-uuid-like-id"},
		{"  --web.01.example--  ", 100, "web-01-example"},
		{"abcdef-ghij", 7, "abcdef"},
		{":::", 100, ""},
	}
	for _, tt := range tests {
		got := sandbox.SanitizeLocality(tt.in, tt.max)
		if got != tt.want {
			t.Errorf("SanitizeLocality(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
		if got != "" && !sandbox.ValidLocality(got) {
			t.Errorf("SanitizeLocality(%q) = %q, which ValidLocality refuses", tt.in, got)
		}
	}
	for _, bad := range []string{"", "-a", "Upper", "a.b", strings.Repeat("a", sandbox.MaxLocalityLen+1)} {
		if sandbox.ValidLocality(bad) {
			t.Errorf("ValidLocality(%q) = true, want false", bad)
		}
	}
}

// located is a provider that names its locality.
type located struct {
	sandbox.Provider
	loc string
	err error
}

func (l located) Name() string                             { return "fake" }
func (l located) Locality(context.Context) (string, error) { return l.loc, l.err }

func TestLocalityOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if got, err := sandbox.LocalityOf(ctx, located{loc: "daemon-1"}, ""); err != nil || got != "daemon-1" {
		t.Errorf("provider's own: %q, %v", got, err)
	}
	if got, err := sandbox.LocalityOf(ctx, located{loc: "daemon-1"}, "rack-7"); err != nil || got != "rack-7" {
		t.Errorf("override: %q, %v; want rack-7", got, err)
	}
	if _, err := sandbox.LocalityOf(ctx, located{loc: "daemon-1"}, "Bad Name"); err == nil || !strings.Contains(err.Error(), sandbox.EnvLocality) {
		t.Errorf("invalid override: %v, want an error naming %s", err, sandbox.EnvLocality)
	}
	boom := errors.New("daemon unreachable")
	if _, err := sandbox.LocalityOf(ctx, located{err: boom}, ""); !errors.Is(err, boom) {
		t.Errorf("provider failure: %v, want it wrapped", err)
	}
	if _, err := sandbox.LocalityOf(ctx, located{loc: "UPPER"}, ""); err == nil {
		t.Error("an invalid locality from the provider was accepted")
	}
	host, err := sandbox.HostIdentity()
	if err != nil || !sandbox.ValidLocality(host) {
		t.Errorf("HostIdentity = %q, %v; want a valid locality", host, err)
	}
}
