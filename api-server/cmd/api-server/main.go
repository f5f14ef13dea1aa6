// Command api-server serves Mango's public HTTP API and the internal
// ControlPlane for execution workers. `api-server migrate` applies the
// database migrations and exits.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mangohq/mango/api-server/internal/app"
	"github.com/mangohq/mango/api-server/internal/config"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "api-server:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case len(args) == 1 && args[0] == "migrate":
		return app.Migrate(ctx, cfg)
	case len(args) > 0:
		return fmt.Errorf("unknown arguments %q (usage: api-server [migrate])", args)
	}
	log := app.NewLogger(cfg, os.Stderr)
	srv, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	return srv.Serve(ctx)
}
