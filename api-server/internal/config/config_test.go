package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/internal/tlsconf"
	"github.com/mangohq/mango/internal/tlsconf/tlsconftest"
)

// loadCase is one environment for Load: either the error it must name
// (wantErr) or the checks on the Config it must yield.
type loadCase struct {
	name    string
	env     map[string]string
	wantErr string
	check   func(t *testing.T, c *Config)
}

func TestLoad(t *testing.T) {
	t.Parallel()
	base := map[string]string{"MANGO_DATABASE_URL": "postgres://u@127.0.0.1:5432/mango"}
	pki := tlsconftest.New(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := append(loadGeneralCases(base), loadTLSCases(pki, missing)...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			if tc.name == "missing database" {
				delete(env, "MANGO_DATABASE_URL")
			}
			c, err := Load(func(k string) string { return env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			tc.check(t, c)
		})
	}
}

// loadGeneralCases cover the defaults, addresses, durations, sandbox
// providers and pprof.
func loadGeneralCases(base map[string]string) []loadCase {
	return []loadCase{
		{name: "defaults", env: base, check: func(t *testing.T, c *Config) {
			if c.HTTPAddr != "127.0.0.1:8080" || c.TemporalNamespace != "default" || c.DefaultSandbox != "local" || c.MaxBodyBytes != 32<<20 || c.ShutdownTimeout != 30*time.Second {
				t.Errorf("defaults = %+v", c)
			}
			if len(c.SandboxProviders) != 1 || c.SandboxProviders[0] != "local" {
				t.Errorf("providers = %v, want [local]", c.SandboxProviders)
			}
			if c.GRPCTLS != nil || c.TemporalTLS != nil {
				t.Errorf("GRPCTLS, TemporalTLS = %+v, %+v; want nil (plaintext) by default", c.GRPCTLS, c.TemporalTLS)
			}
			if c.TemporalGzip {
				t.Error("TemporalGzip = true; want off by default")
			}
		}},
		{name: "temporal gzip", env: map[string]string{"MANGO_TEMPORAL_GZIP": "true"}, check: func(t *testing.T, c *Config) {
			if !c.TemporalGzip {
				t.Error("MANGO_TEMPORAL_GZIP=true: TemporalGzip = false")
			}
		}},
		{name: "bad temporal gzip", env: map[string]string{"MANGO_TEMPORAL_GZIP": "fast"}, wantErr: "MANGO_TEMPORAL_GZIP"},
		{name: "skills catalog directory", env: map[string]string{"MANGO_SKILLS_CATALOG": " /srv/skills "}, check: func(t *testing.T, c *Config) {
			if c.SkillsCatalog != "/srv/skills" {
				t.Errorf("SkillsCatalog = %q; want /srv/skills", c.SkillsCatalog)
			}
		}},
		{name: "skills catalog on s3 without the file store's s3", env: map[string]string{"MANGO_SKILLS_CATALOG": "s3://b/skills"},
			wantErr: "MANGO_SKILLS_CATALOG: an s3:// catalog is read with the file store's S3 settings"},
		{name: "skills catalog on s3 without bucket", env: map[string]string{"MANGO_SKILLS_CATALOG": "s3://",
			"MANGO_FILES_S3_ENDPOINT": "http://127.0.0.1:9000", "MANGO_FILES_S3_BUCKET": "files"}, wantErr: "MANGO_SKILLS_CATALOG: want s3://bucket/prefix"},
		{name: "skills catalog on s3", env: map[string]string{"MANGO_SKILLS_CATALOG": "s3://b/skills",
			"MANGO_FILES_S3_ENDPOINT": "http://127.0.0.1:9000", "MANGO_FILES_S3_BUCKET": "files"}, check: func(t *testing.T, c *Config) {
			if c.SkillsCatalog != "s3://b/skills" || c.FilesS3 == nil {
				t.Errorf("SkillsCatalog, FilesS3 = %q, %v; want s3://b/skills with the file store on S3", c.SkillsCatalog, c.FilesS3)
			}
		}},
		{name: "missing database", env: map[string]string{}, wantErr: "MANGO_DATABASE_URL: is required"},
		{name: "database not postgres", env: map[string]string{"MANGO_DATABASE_URL": "mysql://x"}, wantErr: "MANGO_DATABASE_URL: must be a postgres:// URL"},
		{name: "bad http addr", env: map[string]string{"MANGO_HTTP_ADDR": "8080"}, wantErr: "MANGO_HTTP_ADDR"},
		{name: "bad temporal", env: map[string]string{"MANGO_TEMPORAL_HOSTPORT": "nohost"}, wantErr: "MANGO_TEMPORAL_HOSTPORT"},
		{name: "short api key", env: map[string]string{"MANGO_API_KEY": "short"}, wantErr: "MANGO_API_KEY: must be at least 16"},
		{name: "bad duration", env: map[string]string{"MANGO_SHUTDOWN_TIMEOUT": "soon"}, wantErr: "MANGO_SHUTDOWN_TIMEOUT"},
		{name: "bad bool", env: map[string]string{"MANGO_AUTO_MIGRATE": "maybe"}, wantErr: "MANGO_AUTO_MIGRATE"},
		{name: "bad log level", env: map[string]string{"MANGO_LOG_LEVEL": "loud"}, wantErr: "MANGO_LOG_LEVEL"},
		{name: "providers exclude default", env: map[string]string{"MANGO_SANDBOX": "docker", "MANGO_SANDBOX_PROVIDERS": "local,e2b"}, wantErr: "MANGO_SANDBOX_PROVIDERS"},
		{name: "providers", env: map[string]string{"MANGO_SANDBOX": "Docker", "MANGO_SANDBOX_PROVIDERS": "local, docker"}, check: func(t *testing.T, c *Config) {
			if c.DefaultSandbox != "docker" || len(c.SandboxProviders) != 2 {
				t.Errorf("sandbox = %q providers %v", c.DefaultSandbox, c.SandboxProviders)
			}
		}},
		{name: "bad pprof address", env: map[string]string{"MANGO_PPROF_ADDR": "6060"}, wantErr: "MANGO_PPROF_ADDR: must be host:port"},
		{name: "pprof address", env: map[string]string{"MANGO_PPROF_ADDR": "127.0.0.1:6060"}, check: func(t *testing.T, c *Config) {
			if c.PprofAddr != "127.0.0.1:6060" {
				t.Errorf("PprofAddr = %q", c.PprofAddr)
			}
		}},
		{name: "work lease defaults", env: base, check: func(t *testing.T, c *Config) {
			if c.WorkLeaseTTL != 300*time.Second || c.WorkMaxLeaseTTL != time.Hour {
				t.Errorf("WorkLeaseTTL, WorkMaxLeaseTTL = %v, %v; want 5m0s, 1h0m0s", c.WorkLeaseTTL, c.WorkMaxLeaseTTL)
			}
		}},
		{name: "work lease", env: map[string]string{"MANGO_WORK_LEASE_TTL": "30s", "MANGO_WORK_MAX_LEASE_TTL": "10m"}, check: func(t *testing.T, c *Config) {
			if c.WorkLeaseTTL != 30*time.Second || c.WorkMaxLeaseTTL != 10*time.Minute {
				t.Errorf("WorkLeaseTTL, WorkMaxLeaseTTL = %v, %v; want 30s, 10m0s", c.WorkLeaseTTL, c.WorkMaxLeaseTTL)
			}
		}},
		{name: "work lease above the max", env: map[string]string{"MANGO_WORK_LEASE_TTL": "2h"}, wantErr: "MANGO_WORK_LEASE_TTL: must be between 1s and MANGO_WORK_MAX_LEASE_TTL"},
		{name: "bad work max lease", env: map[string]string{"MANGO_WORK_MAX_LEASE_TTL": "48h"}, wantErr: "MANGO_WORK_MAX_LEASE_TTL: must be between 1s and 24h"},
		{name: "several errors at once", env: map[string]string{"MANGO_HTTP_ADDR": "x", "MANGO_GRPC_ADDR": "y"}, wantErr: "MANGO_GRPC_ADDR"},
	}
}

// loadTLSCases cover the gRPC server and Temporal client TLS settings.
func loadTLSCases(pki *tlsconftest.PKI, missing string) []loadCase {
	return []loadCase{
		{name: "grpc tls", env: map[string]string{"MANGO_GRPC_TLS_CERT_FILE": pki.Server.CertFile, "MANGO_GRPC_TLS_KEY_FILE": pki.Server.KeyFile},
			check: func(t *testing.T, c *Config) {
				want := &tlsconf.Server{CertFile: pki.Server.CertFile, KeyFile: pki.Server.KeyFile}
				if !reflect.DeepEqual(c.GRPCTLS, want) {
					t.Errorf("GRPCTLS = %+v, want %+v", c.GRPCTLS, want)
				}
			}},
		{name: "grpc mutual tls", env: map[string]string{"MANGO_GRPC_TLS_CERT_FILE": pki.Server.CertFile, "MANGO_GRPC_TLS_KEY_FILE": pki.Server.KeyFile,
			"MANGO_GRPC_TLS_CLIENT_CA_FILE": pki.CA.CertFile},
			check: func(t *testing.T, c *Config) {
				if c.GRPCTLS == nil || c.GRPCTLS.ClientCAFile != pki.CA.CertFile || !c.GRPCTLS.MutualTLS() {
					t.Errorf("GRPCTLS = %+v, want mutual TLS with client CA %s", c.GRPCTLS, pki.CA.CertFile)
				}
			}},
		{name: "grpc cert without key", env: map[string]string{"MANGO_GRPC_TLS_CERT_FILE": pki.Server.CertFile},
			wantErr: "MANGO_GRPC_TLS_KEY_FILE: is required with MANGO_GRPC_TLS_CERT_FILE"},
		{name: "grpc key without cert", env: map[string]string{"MANGO_GRPC_TLS_KEY_FILE": pki.Server.KeyFile},
			wantErr: "MANGO_GRPC_TLS_CERT_FILE: is required with MANGO_GRPC_TLS_KEY_FILE"},
		{name: "grpc client CA without server cert", env: map[string]string{"MANGO_GRPC_TLS_CLIENT_CA_FILE": pki.CA.CertFile},
			wantErr: "MANGO_GRPC_TLS_CLIENT_CA_FILE: requires MANGO_GRPC_TLS_CERT_FILE and MANGO_GRPC_TLS_KEY_FILE"},
		{name: "grpc cert unreadable", env: map[string]string{"MANGO_GRPC_TLS_CERT_FILE": missing, "MANGO_GRPC_TLS_KEY_FILE": pki.Server.KeyFile},
			wantErr: "MANGO_GRPC_TLS_CERT_FILE: read certificates: open " + missing},
		{name: "grpc cert file without a certificate", env: map[string]string{"MANGO_GRPC_TLS_CERT_FILE": pki.Server.KeyFile, "MANGO_GRPC_TLS_KEY_FILE": pki.Server.KeyFile},
			wantErr: "MANGO_GRPC_TLS_CERT_FILE: no PEM certificate in " + pki.Server.KeyFile},
		{name: "grpc key of another cert", env: map[string]string{"MANGO_GRPC_TLS_CERT_FILE": pki.Server.CertFile, "MANGO_GRPC_TLS_KEY_FILE": pki.Client.KeyFile},
			wantErr: "MANGO_GRPC_TLS_KEY_FILE: the private key in " + pki.Client.KeyFile + " does not match the certificate in " + pki.Server.CertFile},
		{name: "grpc key file without a key", env: map[string]string{"MANGO_GRPC_TLS_CERT_FILE": pki.Server.CertFile, "MANGO_GRPC_TLS_KEY_FILE": pki.Server.CertFile},
			wantErr: "MANGO_GRPC_TLS_KEY_FILE: no PEM private key"},
		{name: "grpc client CA without a certificate", env: map[string]string{"MANGO_GRPC_TLS_CERT_FILE": pki.Server.CertFile, "MANGO_GRPC_TLS_KEY_FILE": pki.Server.KeyFile,
			"MANGO_GRPC_TLS_CLIENT_CA_FILE": pki.Client.KeyFile}, wantErr: "MANGO_GRPC_TLS_CLIENT_CA_FILE: no PEM certificate"},
		{name: "temporal tls with the system roots", env: map[string]string{"MANGO_TEMPORAL_TLS": "true"},
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c.TemporalTLS, &tlsconf.Client{}) {
					t.Errorf("TemporalTLS = %+v, want TLS with the system roots", c.TemporalTLS)
				}
			}},
		{name: "temporal mutual tls, implied by the files", env: map[string]string{"MANGO_TEMPORAL_TLS_CA_FILE": pki.CA.CertFile,
			"MANGO_TEMPORAL_TLS_CERT_FILE": pki.Client.CertFile, "MANGO_TEMPORAL_TLS_KEY_FILE": pki.Client.KeyFile, "MANGO_TEMPORAL_TLS_SERVER_NAME": "ns.tmprl.cloud"},
			check: func(t *testing.T, c *Config) {
				want := &tlsconf.Client{CAFile: pki.CA.CertFile, CertFile: pki.Client.CertFile, KeyFile: pki.Client.KeyFile, ServerName: "ns.tmprl.cloud"}
				if !reflect.DeepEqual(c.TemporalTLS, want) {
					t.Errorf("TemporalTLS = %+v, want %+v", c.TemporalTLS, want)
				}
			}},
		{name: "temporal tls off but a CA set", env: map[string]string{"MANGO_TEMPORAL_TLS": "false", "MANGO_TEMPORAL_TLS_CA_FILE": pki.CA.CertFile},
			wantErr: "MANGO_TEMPORAL_TLS: is false, but MANGO_TEMPORAL_TLS_CA_FILE"},
		{name: "temporal server name without tls", env: map[string]string{"MANGO_TEMPORAL_TLS_SERVER_NAME": "temporal"},
			wantErr: "MANGO_TEMPORAL_TLS_SERVER_NAME: applies only to TLS"},
		{name: "temporal tls bad bool", env: map[string]string{"MANGO_TEMPORAL_TLS": "yes please"}, wantErr: "MANGO_TEMPORAL_TLS: must be a boolean"},
		{name: "temporal CA unreadable", env: map[string]string{"MANGO_TEMPORAL_TLS_CA_FILE": missing}, wantErr: "MANGO_TEMPORAL_TLS_CA_FILE: read certificates"},
		{name: "temporal key without cert", env: map[string]string{"MANGO_TEMPORAL_TLS": "1", "MANGO_TEMPORAL_TLS_KEY_FILE": pki.Client.KeyFile},
			wantErr: "MANGO_TEMPORAL_TLS_CERT_FILE: is required with MANGO_TEMPORAL_TLS_KEY_FILE"},
	}
}

func TestLoadReportsEveryTLSError(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	env := map[string]string{
		"MANGO_DATABASE_URL":         "postgres://u@127.0.0.1:5432/mango",
		"MANGO_GRPC_TLS_CERT_FILE":   pki.Server.CertFile,
		"MANGO_GRPC_TLS_KEY_FILE":    pki.Client.KeyFile,
		"MANGO_TEMPORAL_TLS_CA_FILE": missing,
		"MANGO_LOG_LEVEL":            "loud",
	}
	_, err := Load(func(k string) string { return env[k] })
	for _, want := range []string{"MANGO_GRPC_TLS_KEY_FILE: the private key", "MANGO_TEMPORAL_TLS_CA_FILE: read certificates", "MANGO_LOG_LEVEL"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load error = %v, want it to contain %q", err, want)
		}
	}
}
