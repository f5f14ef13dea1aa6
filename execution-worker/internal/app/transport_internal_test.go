package app

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/internal/config"
	"github.com/mangohq/mango/internal/tlsconf/tlsconftest"
)

func configFrom(t *testing.T, env map[string]string) *config.Config {
	t.Helper()
	if _, ok := env[config.EnvWorkerToken]; !ok {
		env[config.EnvWorkerToken] = "worker-token-secret"
	}
	cfg, err := config.FromEnv(func(k string) string { return env[k] }, Providers())
	if err != nil {
		t.Fatalf("config.FromEnv(%v) = %v", env, err)
	}
	return cfg
}

func TestTemporalOptionsTLS(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, nil))

	plain, err := temporalOptions(configFrom(t, map[string]string{}), logger)
	if err != nil {
		t.Fatal(err)
	}
	if plain.ConnectionOptions.TLS != nil {
		t.Errorf("without MANGO_TEMPORAL_TLS the options carry TLS %+v, want none", plain.ConnectionOptions.TLS)
	}
	opts, err := temporalOptions(configFrom(t, map[string]string{
		config.EnvTemporalHostPort:      "ns.a1b2c.tmprl.cloud:7233",
		config.EnvTemporalTLSCAFile:     pki.CA.CertFile,
		config.EnvTemporalTLSCertFile:   pki.Client.CertFile,
		config.EnvTemporalTLSKeyFile:    pki.Client.KeyFile,
		config.EnvTemporalTLSServerName: "localhost",
	}), logger)
	if err != nil {
		t.Fatal(err)
	}
	pki.CheckClientConfig(t, opts.ConnectionOptions.TLS, "localhost")
	if opts.HostPort != "ns.a1b2c.tmprl.cloud:7233" || opts.ConnectionOptions.GetSystemInfoTimeout != config.DefaultTemporalConnectTimeout {
		t.Errorf("HostPort, GetSystemInfoTimeout = %q, %v", opts.HostPort, opts.ConnectionOptions.GetSystemInfoTimeout)
	}
	if out := logs.String(); !strings.Contains(out, "tls.enabled=false") || !strings.Contains(out, "tls.mtls=true") {
		t.Errorf("logs %q do not report the Temporal connection's TLS", out)
	}
}

func TestDialControlPlaneLogsTransport(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	tests := []struct {
		name     string
		env      map[string]string
		wantTLS  bool
		wantWarn bool
	}{
		{name: "plaintext to this machine", env: map[string]string{config.EnvControlPlaneAddr: "127.0.0.1:8081"}},
		{name: "plaintext to localhost", env: map[string]string{config.EnvControlPlaneAddr: "localhost:8081"}},
		{name: "plaintext across the network", env: map[string]string{config.EnvControlPlaneAddr: "api-server:8081"}, wantWarn: true},
		{name: "TLS across the network", env: map[string]string{config.EnvControlPlaneAddr: "api-server:8081",
			config.EnvControlPlaneTLSCAFile: pki.CA.CertFile}, wantTLS: true},
		{name: "mutual TLS across the network", env: map[string]string{config.EnvControlPlaneAddr: "10.0.0.7:8081",
			config.EnvControlPlaneTLS: "true", config.EnvControlPlaneTLSCertFile: pki.Client.CertFile,
			config.EnvControlPlaneTLSKeyFile: pki.Client.KeyFile}, wantTLS: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs strings.Builder
			cp, err := dialControlPlane(configFrom(t, tt.env), slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			_ = cp.Close()
			out := logs.String()
			if got := strings.Count(out, PlaintextTokenWarning); got != map[bool]int{false: 0, true: 1}[tt.wantWarn] {
				t.Errorf("%d plaintext warnings in %q, want warning %v", got, out, tt.wantWarn)
			}
			if want := map[bool]string{false: "tls.enabled=false", true: "tls.enabled=true"}[tt.wantTLS]; !strings.Contains(out, "controlplane transport") || !strings.Contains(out, want) {
				t.Errorf("logs %q do not report the ControlPlane transport with %s", out, want)
			}
			if strings.Contains(out, "worker-token-secret") || strings.Contains(out, "PRIVATE KEY") {
				t.Errorf("logs %q contain a secret", out)
			}
		})
	}
}
