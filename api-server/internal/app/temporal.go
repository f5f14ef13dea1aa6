package app

import (
	"fmt"
	"log/slog"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/mangohq/mango/api-server/internal/config"
)

// temporalOptions returns the Temporal client's options: the frontend and
// namespace, and TLS when MANGO_TEMPORAL_TLS (or one of its files) is set.
// It logs whether the connection uses TLS.
func temporalOptions(cfg *config.Config, log *slog.Logger) (client.Options, error) {
	opts := client.Options{
		HostPort:          cfg.TemporalHostPort,
		Namespace:         cfg.TemporalNamespace,
		Logger:            tlog.NewStructuredLogger(log.With("component", "temporal")),
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: grpcCompression(cfg.TemporalGzip)},
	}
	if cfg.TemporalTLS != nil {
		tlsConf, err := cfg.TemporalTLS.Config()
		if err != nil {
			return client.Options{}, fmt.Errorf("temporal TLS (MANGO_TEMPORAL_TLS_*): %w", err)
		}
		opts.ConnectionOptions.TLS = tlsConf
	}
	log.Info("temporal transport", "hostport", cfg.TemporalHostPort, "namespace", cfg.TemporalNamespace, "tls", cfg.TemporalTLS, "gzip", cfg.TemporalGzip)
	return opts, nil
}

// grpcCompression is gzip when asked for, else none. The SDK's default,
// gzip on every request and answer, cost Temporal and both services
// about 2 ms of CPU per turn on loopback.
func grpcCompression(gzip bool) client.GrpcCompression {
	if gzip {
		return &client.GrpcCompressionGzip{}
	}
	return &client.GrpcCompressionNone{}
}
