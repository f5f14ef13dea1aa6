// Package temporalclient builds the Temporal client options both Mango
// binaries dial with, so the api-server and the execution workers connect
// the same way: frontend and namespace, TLS from PEM files (package
// tlsconf), gRPC compression off unless asked for, and one log line saying
// how the connection is made.
package temporalclient

import (
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"
	temporallog "go.temporal.io/sdk/log"

	"github.com/mangohq/mango/internal/tlsconf"
)

// EnvTLS is the prefix of the variables that configure the Temporal
// connection's TLS (MANGO_TEMPORAL_TLS, MANGO_TEMPORAL_TLS_CA_FILE, ...),
// named in errors.
const EnvTLS = "MANGO_TEMPORAL_TLS"

// Settings are a binary's configured Temporal connection.
type Settings struct {
	// HostPort is the frontend address (MANGO_TEMPORAL_HOSTPORT).
	HostPort string
	// Namespace is the Temporal namespace (MANGO_TEMPORAL_NAMESPACE).
	Namespace string
	// Identity names the client in Temporal; empty leaves the SDK's
	// default (pid@host).
	Identity string
	// TLS is the connection's TLS (MANGO_TEMPORAL_TLS_*); nil is
	// plaintext.
	TLS *tlsconf.Client
	// Gzip compresses gRPC requests and answers (MANGO_TEMPORAL_GZIP).
	Gzip bool
	// ConnectTimeout bounds the dial's first call; zero leaves the SDK's
	// default.
	ConnectTimeout time.Duration
	// SDKLog receives the SDK's own logs; nil sends them to the logger
	// Options is given.
	SDKLog slog.Handler
}

// Options returns the client options of s and logs on logger whether the
// connection uses TLS and compression. It fails only when the TLS files
// cannot be loaded.
func Options(s Settings, logger *slog.Logger) (client.Options, error) {
	sdkLog := s.SDKLog
	if sdkLog == nil {
		sdkLog = logger.Handler()
	}
	opts := client.Options{
		HostPort:  s.HostPort,
		Namespace: s.Namespace,
		Identity:  s.Identity,
		Logger:    temporallog.NewStructuredLogger(slog.New(sdkLog).With("component", "temporal")),
		ConnectionOptions: client.ConnectionOptions{
			GetSystemInfoTimeout: s.ConnectTimeout,
			GrpcCompression:      compression(s.Gzip),
		},
	}
	if s.TLS != nil {
		tlsConf, err := s.TLS.Config()
		if err != nil {
			return client.Options{}, fmt.Errorf("temporal TLS (%s_*): %w", EnvTLS, err)
		}
		opts.ConnectionOptions.TLS = tlsConf
	}
	logger.Info("temporal transport", "hostport", s.HostPort, "namespace", s.Namespace, "tls", s.TLS, "gzip", s.Gzip)
	return opts, nil
}

// compression is gzip when asked for, else none. The SDK's default, gzip
// on every request and answer, cost Temporal and both services about 2 ms
// of CPU per turn on loopback.
func compression(gzip bool) client.GrpcCompression {
	if gzip {
		return &client.GrpcCompressionGzip{}
	}
	return &client.GrpcCompressionNone{}
}
