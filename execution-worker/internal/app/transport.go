package app

import (
	"crypto/tls"
	"fmt"
	"log/slog"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/mangohq/mango/execution-worker/internal/config"
	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	"github.com/mangohq/mango/internal/temporalclient"
)

// dialControlPlane returns the ControlPlane client, over TLS when
// MANGO_CONTROLPLANE_TLS (or one of its files) is set, and logs which. A
// plaintext connection to an address other than this machine's logs a
// warning: the worker token then crosses the network unencrypted (fine on
// a private network, which compose and Kubernetes clusters often are).
func dialControlPlane(cfg *config.Config, logger *slog.Logger, opts ...grpc.DialOption) (*controlplane.Client, error) {
	var tlsConf *tls.Config
	if cfg.ControlPlaneTLS != nil {
		var err error
		if tlsConf, err = cfg.ControlPlaneTLS.Config(); err != nil {
			return nil, fmt.Errorf("controlplane TLS (%s_*): %w", config.EnvControlPlaneTLS, err)
		}
	}
	cp, err := controlplane.DialTLS(cfg.ControlPlaneAddr, cfg.WorkerToken, tlsConf, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", config.EnvControlPlaneAddr, cfg.ControlPlaneAddr, err)
	}
	logger.Info("controlplane transport", "addr", cfg.ControlPlaneAddr, "tls", cfg.ControlPlaneTLS)
	if cfg.ControlPlaneTLS == nil && !controlplane.Loopback(cfg.ControlPlaneAddr) {
		logger.Warn(PlaintextTokenWarning, "addr", cfg.ControlPlaneAddr,
			"fix", fmt.Sprintf("set %s=true or %s on the worker and MANGO_GRPC_TLS_CERT_FILE on the api-server, unless the network is private",
				config.EnvControlPlaneTLS, config.EnvControlPlaneTLSCAFile))
	}
	return cp, nil
}

// PlaintextTokenWarning is the warning logged at startup when the worker
// token goes to a ControlPlane on another machine without TLS.
const PlaintextTokenWarning = "the worker token crosses the network in plaintext: the ControlPlane connection has no TLS"

// temporalOptions returns the Temporal client's options, with TLS when
// MANGO_TEMPORAL_TLS (or one of its files) is set, and logs which. The
// SDK's own logs go through sdkLogHandler.
func temporalOptions(cfg *config.Config, logger *slog.Logger) (client.Options, error) {
	return temporalclient.Options(temporalclient.Settings{
		HostPort:       cfg.TemporalHostPort,
		Namespace:      cfg.TemporalNamespace,
		Identity:       cfg.WorkerID,
		TLS:            cfg.TemporalTLS,
		Gzip:           cfg.TemporalGzip,
		ConnectTimeout: cfg.TemporalConnectTimeout,
		SDKLog:         sdkLogHandler{logger.Handler()},
	}, logger)
}
