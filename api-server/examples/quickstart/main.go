// Command quickstart creates an agent on a running Mango with the official
// Anthropic Go SDK. It reads MANGO_BASE_URL and MANGO_API_KEY (written to
// .dev.env by `make dev-up`):
//
//	set -a; . ./.dev.env; set +a
//	go run ./api-server/examples/quickstart
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	base, key := os.Getenv("MANGO_BASE_URL"), os.Getenv("MANGO_API_KEY")
	if base == "" || key == "" {
		return fmt.Errorf("MANGO_BASE_URL and MANGO_API_KEY must be set (run `make dev-up` and load .dev.env)")
	}
	client := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey(key))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name:  "quickstart",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-5"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{
			{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}},
		},
	})
	if err != nil {
		return fmt.Errorf("create agent: %w", err)
	}
	got, err := client.Beta.Agents.Get(ctx, agent.ID, anthropic.BetaAgentGetParams{})
	if err != nil {
		return fmt.Errorf("get agent: %w", err)
	}
	fmt.Printf("created agent %s (version %d, model %s, %d tools)\n", got.ID, got.Version, got.Model.ID, len(got.Tools))
	return nil
}
