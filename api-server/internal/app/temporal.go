package app

import (
	"log/slog"

	"go.temporal.io/sdk/client"

	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/internal/temporalclient"
)

// temporalOptions returns the Temporal client's options: the frontend and
// namespace, and TLS when MANGO_TEMPORAL_TLS (or one of its files) is set.
// It logs whether the connection uses TLS.
func temporalOptions(cfg *config.Config, log *slog.Logger) (client.Options, error) {
	return temporalclient.Options(temporalclient.Settings{
		HostPort:  cfg.TemporalHostPort,
		Namespace: cfg.TemporalNamespace,
		TLS:       cfg.TemporalTLS,
		Gzip:      cfg.TemporalGzip,
	}, log)
}
