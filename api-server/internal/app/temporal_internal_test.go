package app

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/internal/tlsconf/tlsconftest"
)

func loadConfig(t *testing.T, env map[string]string) *config.Config {
	t.Helper()
	env["MANGO_DATABASE_URL"] = "postgres://u@127.0.0.1:5432/mango"
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("config.Load(%v) = %v", env, err)
	}
	return cfg
}

func TestTemporalOptionsTLS(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))

	plain, err := temporalOptions(loadConfig(t, map[string]string{}), log)
	if err != nil {
		t.Fatal(err)
	}
	if plain.ConnectionOptions.TLS != nil {
		t.Errorf("without MANGO_TEMPORAL_TLS the options carry TLS %+v, want none", plain.ConnectionOptions.TLS)
	}

	opts, err := temporalOptions(loadConfig(t, map[string]string{
		"MANGO_TEMPORAL_HOSTPORT":        "ns.a1b2c.tmprl.cloud:7233",
		"MANGO_TEMPORAL_TLS_CA_FILE":     pki.CA.CertFile,
		"MANGO_TEMPORAL_TLS_CERT_FILE":   pki.Client.CertFile,
		"MANGO_TEMPORAL_TLS_KEY_FILE":    pki.Client.KeyFile,
		"MANGO_TEMPORAL_TLS_SERVER_NAME": "localhost",
	}), log)
	if err != nil {
		t.Fatal(err)
	}
	pki.CheckClientConfig(t, opts.ConnectionOptions.TLS, "localhost")
	if opts.HostPort != "ns.a1b2c.tmprl.cloud:7233" {
		t.Errorf("HostPort = %q", opts.HostPort)
	}
	out := logs.String()
	if !strings.Contains(out, "tls.enabled=false") || !strings.Contains(out, "tls.enabled=true") || !strings.Contains(out, "tls.mtls=true") {
		t.Errorf("logs %q do not report the Temporal connection's TLS", out)
	}
}
