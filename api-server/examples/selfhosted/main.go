// Command selfhosted is a self-hosted environment worker for Mango: the
// official Anthropic Go SDK's EnvironmentWorker, unchanged, pointed at
// Mango's base URL. It polls the environment's work queue, claims the work
// of each session, runs the agent's built-in tools (bash, read, write,
// edit, glob, grep) in WORKDIR on this machine, and posts their results
// back. Nothing but outbound HTTP(S) to Mango is needed.
//
// Create a self_hosted environment and an environment key first (the key is
// shown once):
//
//	curl -s $MANGO_BASE_URL/v1/environments -H "x-api-key: $MANGO_API_KEY" \
//	  -H 'content-type: application/json' \
//	  -d '{"name":"my-laptop","config":{"type":"self_hosted"}}'
//	api-server environment-key create --environment env_... --name laptop
//
// then run:
//
//	MANGO_BASE_URL=http://127.0.0.1:8080 ANTHROPIC_ENVIRONMENT_ID=env_... \
//	ANTHROPIC_ENVIRONMENT_KEY=mango_envkey_... WORKDIR=/srv/agent \
//	go run ./api-server/examples/selfhosted
//
// Sessions created in that environment run their tools here; see
// docs/self-hosted.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/lib/environments"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "selfhosted:", err)
		os.Exit(1)
	}
}

func run() error {
	base := os.Getenv("MANGO_BASE_URL")
	envID, envKey := os.Getenv("ANTHROPIC_ENVIRONMENT_ID"), os.Getenv("ANTHROPIC_ENVIRONMENT_KEY")
	if base == "" || envID == "" || envKey == "" {
		return errors.New("MANGO_BASE_URL, ANTHROPIC_ENVIRONMENT_ID and ANTHROPIC_ENVIRONMENT_KEY must be set")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The worker authenticates each request itself (the environment key, or
	// the per-item token of a claimed work item): the client carries only
	// the base URL.
	client := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey(""))
	worker := environments.NewEnvironmentWorker(client, environments.EnvironmentWorkerOptions{
		EnvironmentID:  envID,
		EnvironmentKey: envKey,
		Workdir:        os.Getenv("WORKDIR"), // empty: the current directory
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	slog.Info("polling for work", "base_url", base, "environment_id", envID)
	return worker.Run(ctx)
}
