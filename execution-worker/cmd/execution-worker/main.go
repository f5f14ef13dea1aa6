// Command execution-worker runs Mango agent turns on Temporal for one sandbox
// provider. It is configured entirely by environment variables (see
// internal/config); on a configuration or startup error it prints one line to
// stderr and exits with status 1. SIGINT and SIGTERM stop it gracefully
// within MANGO_SHUTDOWN_TIMEOUT.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mangohq/mango/execution-worker/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := app.Run(ctx, os.Getenv, os.Stderr)
	stop()
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		fmt.Fprintf(os.Stderr, "execution-worker: %s\n", msg)
		os.Exit(1)
	}
}
