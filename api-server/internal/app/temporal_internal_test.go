package app

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/proto/tlsconf/tlsconftest"
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
	checkTemporalTLS(t, opts.ConnectionOptions.TLS, pki)
	if opts.HostPort != "ns.a1b2c.tmprl.cloud:7233" {
		t.Errorf("HostPort = %q", opts.HostPort)
	}
	out := logs.String()
	if !strings.Contains(out, "tls.enabled=false") || !strings.Contains(out, "tls.enabled=true") || !strings.Contains(out, "tls.mtls=true") {
		t.Errorf("logs %q do not report the Temporal connection's TLS", out)
	}
}

// checkTemporalTLS checks that conf verifies servers against pki.CA, asks
// for localhost and presents pki.Client.
func checkTemporalTLS(t *testing.T, conf *tls.Config, pki *tlsconftest.PKI) {
	t.Helper()
	if conf == nil {
		t.Fatal("options carry no TLS config, want one")
	}
	if conf.ServerName != "localhost" {
		t.Errorf("ServerName = %q, want localhost", conf.ServerName)
	}
	if conf.MinVersion < tls.VersionTLS12 {
		t.Errorf("MinVersion = %x, want at least TLS 1.2", conf.MinVersion)
	}
	server, err := tls.LoadX509KeyPair(pki.Server.CertFile, pki.Server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Leaf.Verify(x509.VerifyOptions{Roots: conf.RootCAs, DNSName: conf.ServerName}); err != nil {
		t.Errorf("the server certificate does not verify against RootCAs: %v", err)
	}
	other, err := tls.LoadX509KeyPair(pki.OtherClient.CertFile, pki.OtherClient.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Leaf.Verify(x509.VerifyOptions{Roots: conf.RootCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("a certificate of another CA verifies against RootCAs, want RootCAs to hold only the configured CA")
	}
	if conf.GetClientCertificate == nil {
		t.Fatal("no client certificate configured")
	}
	cert, err := conf.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if cert.Leaf == nil || cert.Leaf.SerialNumber.Cmp(pki.Client.Serial) != 0 {
		t.Errorf("client certificate = %v, want serial %v", cert.Leaf, pki.Client.Serial)
	}
}
