package config

import (
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	base := map[string]string{"MANGO_DATABASE_URL": "postgres://u@127.0.0.1:5432/mango"}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, c *Config)
	}{
		{name: "defaults", env: base, check: func(t *testing.T, c *Config) {
			if c.HTTPAddr != "127.0.0.1:8080" || c.TemporalNamespace != "default" || c.DefaultSandbox != "local" || c.MaxBodyBytes != 32<<20 || c.ShutdownTimeout != 30*time.Second {
				t.Errorf("defaults = %+v", c)
			}
			if len(c.SandboxProviders) != 1 || c.SandboxProviders[0] != "local" {
				t.Errorf("providers = %v, want [local]", c.SandboxProviders)
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
		{name: "several errors at once", env: map[string]string{"MANGO_HTTP_ADDR": "x", "MANGO_GRPC_ADDR": "y"}, wantErr: "MANGO_GRPC_ADDR"},
	}
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
