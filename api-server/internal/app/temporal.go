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
		HostPort:  cfg.TemporalHostPort,
		Namespace: cfg.TemporalNamespace,
		Logger:    tlog.NewStructuredLogger(log.With("component", "temporal")),
	}
	if cfg.TemporalTLS != nil {
		tlsConf, err := cfg.TemporalTLS.Config()
		if err != nil {
			return client.Options{}, fmt.Errorf("temporal TLS (MANGO_TEMPORAL_TLS_*): %w", err)
		}
		opts.ConnectionOptions.TLS = tlsConf
	}
	log.Info("temporal transport", "hostport", cfg.TemporalHostPort, "namespace", cfg.TemporalNamespace, "tls", cfg.TemporalTLS)
	return opts, nil
}
