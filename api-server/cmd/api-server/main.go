// Command api-server serves Mango's public HTTP API and the internal
// ControlPlane for execution workers. `api-server migrate` applies the
// database migrations and exits; `api-server vault rotate` re-wraps every
// stored secret under the first key of MANGO_VAULT_KEYS and exits;
// `api-server environment-key create|list|revoke` manages the keys of
// self-hosted environments' workers.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mangohq/mango/api-server/internal/app"
	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/internal/pprofserve"
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
	case len(args) == 2 && args[0] == "vault" && args[1] == "rotate":
		rep, err := app.VaultRotate(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("vault rotate: %d secrets re-wrapped under key %s, %d already under it\n", rep.Rewrapped, cfg.Secrets.Primary(), rep.Current)
		return nil
	case len(args) > 0 && args[0] == "environment-key":
		ek, err := app.ParseEnvironmentKeyArgs(args[1:])
		if err != nil {
			return err
		}
		return app.EnvironmentKey(ctx, cfg, ek, os.Stdout)
	case len(args) > 0:
		return fmt.Errorf("unknown arguments %q (usage: api-server [migrate | vault rotate | environment-key create|list|revoke])", args)
	}
	log := app.NewLogger(cfg, os.Stderr)
	if cfg.PprofAddr != "" {
		if _, err := pprofserve.Start(ctx, cfg.PprofAddr, log); err != nil {
			return err
		}
	}
	srv, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	return srv.Serve(ctx)
}
