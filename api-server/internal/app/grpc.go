package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/mangohq/mango/api-server/internal/broadcast"
	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/api-server/internal/controlplane"
	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/db"
)

// controlPlane is the internal gRPC listener serving the ControlPlane to
// execution workers.
type controlPlane struct {
	srv   *grpc.Server
	ln    net.Listener
	drain chan struct{} // closed by stop: ends the preview and interrupt streams
	// eventWaits, set before listen, wakes AwaitToolResult calls.
	eventWaits *broadcast.Keyed
	// wake, set before listen, signals a session's workflow at once
	// (outbox.Relay.Wake) after a ControlPlane call owed it a wake-up.
	wake func(ctx context.Context, sessionID string)
}

// listen builds the gRPC server, over TLS when MANGO_GRPC_TLS_CERT_FILE is
// set, and binds MANGO_GRPC_ADDR.
func (c *controlPlane) listen(cfg *config.Config, store *db.Store, files filestore.Blobs, previews controlplane.PreviewSink,
	interrupts controlplane.InterruptSource, reg prometheus.Registerer, log *slog.Logger, extra ...grpc.ServerOption) error {
	c.drain = make(chan struct{})
	var tlsConf *tls.Config
	if cfg.GRPCTLS != nil {
		var err error
		if tlsConf, err = cfg.GRPCTLS.Config(); err != nil {
			return fmt.Errorf("MANGO_GRPC_TLS_CERT_FILE: %w", err)
		}
	}
	srv, err := controlplane.NewGRPCServer(controlplane.Deps{
		Store: store, Token: cfg.WorkerToken, Logger: log.With("component", "controlplane"), Registry: reg, Previews: previews,
		Interrupts: interrupts, EventWaits: c.eventWaits, Wake: c.wake,
		TLS: tlsConf, Drain: c.drain, Prices: cfg.Prices, Secrets: cfg.Secrets,
		Files: files, FilesMaxBytes: cfg.FilesMaxBytes, AllowPrivate: cfg.AllowPrivate, ServerOptions: extra,
	})
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("MANGO_GRPC_ADDR: listen on %s: %w", cfg.GRPCAddr, err)
	}
	c.srv, c.ln = srv, ln
	log.Info("controlplane transport", "grpc", cfg.GRPCAddr, "tls", cfg.GRPCTLS)
	return nil
}

// serve serves until stop; it returns nil after a stop.
func (c *controlPlane) serve() error {
	if err := c.srv.Serve(c.ln); err != nil {
		return fmt.Errorf("grpc server: %w", err)
	}
	return nil
}

// stop drains in-flight calls until ctx ends, then closes the remaining
// ones.
func (c *controlPlane) stop(ctx context.Context) {
	if c.srv == nil {
		return
	}
	close(c.drain)
	done := make(chan struct{})
	go func() {
		c.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		c.srv.Stop()
		<-done
	}
}

// close stops the server at once and releases its listener; it is safe
// after stop and on a server that never served.
func (c *controlPlane) close() {
	if c.srv != nil {
		c.srv.Stop()
	}
	if c.ln != nil {
		_ = c.ln.Close()
	}
}

// GRPCAddr returns the bound ControlPlane (gRPC) address.
func (s *Server) GRPCAddr() string { return s.cp.ln.Addr().String() }
