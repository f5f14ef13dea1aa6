package temporalclient_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/mangohq/mango/internal/temporalclient"
	"github.com/mangohq/mango/internal/tlsconf"
	"github.com/mangohq/mango/internal/tlsconf/tlsconftest"
)

func TestOptions(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	tests := []struct {
		name     string
		s        temporalclient.Settings
		wantGzip bool
		wantTLS  bool
		wantLog  string
	}{
		{name: "plaintext without compression", s: temporalclient.Settings{HostPort: "127.0.0.1:7233", Namespace: "default"},
			wantLog: "tls.enabled=false"},
		{name: "gzip", s: temporalclient.Settings{HostPort: "127.0.0.1:7233", Gzip: true}, wantGzip: true, wantLog: "gzip=true"},
		{name: "identity and connect timeout", s: temporalclient.Settings{HostPort: "t:7233", Identity: "worker-1", ConnectTimeout: 3 * time.Second},
			wantLog: "hostport=t:7233"},
		{name: "mutual TLS", s: temporalclient.Settings{HostPort: "ns.tmprl.cloud:7233", TLS: &tlsconf.Client{
			CAFile: pki.CA.CertFile, CertFile: pki.Client.CertFile, KeyFile: pki.Client.KeyFile, ServerName: "localhost"}},
			wantTLS: true, wantLog: "tls.mtls=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs strings.Builder
			opts, err := temporalclient.Options(tt.s, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatalf("Options(%+v) error = %v, want none", tt.s, err)
			}
			if opts.HostPort != tt.s.HostPort || opts.Namespace != tt.s.Namespace || opts.Identity != tt.s.Identity ||
				opts.ConnectionOptions.GetSystemInfoTimeout != tt.s.ConnectTimeout {
				t.Errorf("options = %q %q %q %v, want the settings' %q %q %q %v", opts.HostPort, opts.Namespace, opts.Identity,
					opts.ConnectionOptions.GetSystemInfoTimeout, tt.s.HostPort, tt.s.Namespace, tt.s.Identity, tt.s.ConnectTimeout)
			}
			_, gzip := opts.ConnectionOptions.GrpcCompression.(*client.GrpcCompressionGzip)
			if _, none := opts.ConnectionOptions.GrpcCompression.(*client.GrpcCompressionNone); gzip == none || gzip != tt.wantGzip {
				t.Errorf("compression = %T, want gzip %v (and never the SDK default)", opts.ConnectionOptions.GrpcCompression, tt.wantGzip)
			}
			if tt.wantTLS {
				pki.CheckClientConfig(t, opts.ConnectionOptions.TLS, "localhost")
			} else if opts.ConnectionOptions.TLS != nil {
				t.Errorf("TLS = %+v, want none", opts.ConnectionOptions.TLS)
			}
			if out := logs.String(); !strings.Contains(out, "temporal transport") || !strings.Contains(out, tt.wantLog) {
				t.Errorf("logs = %q, want the transport line with %q", out, tt.wantLog)
			}
		})
	}
}

func TestOptionsTLSError(t *testing.T) {
	t.Parallel()
	s := temporalclient.Settings{HostPort: "t:7233", TLS: &tlsconf.Client{CAFile: filepath.Join(t.TempDir(), "missing.pem")}}
	_, err := temporalclient.Options(s, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "MANGO_TEMPORAL_TLS_*") {
		t.Fatalf("Options with a missing CA file: error = %v, want one naming MANGO_TEMPORAL_TLS_*", err)
	}
}
