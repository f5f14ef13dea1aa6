// Package pprofserve serves the Go runtime's profiles (net/http/pprof) on
// an address of their own, for the MANGO_PPROF_ADDR setting of both
// binaries. It is off unless configured: profiles expose the process's
// internals, so bind it to loopback or a private network only.
package pprofserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// EnvAddr is the setting naming the host:port to serve on.
const EnvAddr = "MANGO_PPROF_ADDR"

// Handler serves the pprof index under /debug/pprof/ and its profiles.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Start binds addr and serves Handler on it until ctx ends. It returns
// the bound address (addr may name port 0).
func Start(ctx context.Context, addr string, log *slog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", EnvAddr, addr, err)
	}
	// No write timeout: a CPU profile or a trace streams for its seconds.
	srv := &http.Server{Handler: Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.ErrorContext(ctx, "pprof server stopped", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	log.InfoContext(ctx, "pprof serving", "addr", ln.Addr().String())
	return ln.Addr(), nil
}
