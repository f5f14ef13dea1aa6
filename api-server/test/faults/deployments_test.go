package faults

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"go.temporal.io/sdk/client"

	"github.com/mangohq/mango/api-server/internal/deployments"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/proto/sessionwf"
)

// TestDeploymentFaults: a fire whose api-server is killed before it runs
// (it waits in Temporal), a fire during a PostgreSQL stop (its activity
// retries), both started as the schedule starts them, and a fire of the
// one-minute cron while Temporal itself is killed (the schedule catches
// up when it returns) each record exactly one run, with a session of its
// own (no session without a run), whose turn runs once.
func TestDeploymentFaults(t *testing.T) {
	if os.Getenv("MANGO_FAULTS") != "1" {
		t.Skip("the fault-injection suite runs with MANGO_FAULTS=1 (make test-faults)")
	}
	sys := startSystem(t, false)
	ctx := context.Background()
	agent, err := sys.cli.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "deployed",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := sys.cli.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "deploy-faults"})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := sys.cli.Beta.Deployments.New(ctx, anthropic.BetaDeploymentNewParams{Name: "every minute",
		Agent: anthropic.BetaDeploymentNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID,
		Schedule: anthropic.BetaManagedAgentsScheduleParams{Expression: "* * * * *", Timezone: "UTC"},
		InitialEvents: []anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "#reply fired"}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.DialContext(ctx, client.Options{HostPort: sys.temporalAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	// fire starts a fire as the schedule does; each is for its own second.
	var fired []string
	fire := func() {
		last := time.Now().Truncate(time.Second)
		poll.Until(t, 5*time.Second, "a new second", func() (bool, string) { return time.Now().Truncate(time.Second).After(last), "" })
		id := fmt.Sprintf("fault-fire-%d", len(fired))
		if _, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: deployments.TaskQueue(sessionwf.Queues{})},
			deployments.FireWorkflowName, dep.ID); err != nil {
			t.Fatal(err)
		}
		fired = append(fired, id)
	}
	sys.api.kill(t)
	fire()
	sys.startAPI()
	t.Logf("fault %-44s injected", "SIGKILL api-server with a fire waiting")
	sys.pg.crash(t)
	fire()
	time.Sleep(3 * time.Second) // the outage the fire's activity retries across
	sys.pg.start(t)
	t.Logf("fault %-44s injected", "PostgreSQL stopped for 3s across a fire")
	for _, id := range fired {
		if err := tc.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
			t.Fatalf("fire %s: %v", id, err)
		}
	}
	// Temporal down across the next fire of the cron.
	next := time.Now().Truncate(time.Minute).Add(time.Minute)
	if time.Until(next) < 8*time.Second {
		next = next.Add(time.Minute)
	}
	time.Sleep(time.Until(next.Add(-5 * time.Second))) // the outage must span the fire
	sys.temporal.kill(t)
	time.Sleep(time.Until(next.Add(3 * time.Second)))
	sys.temporal.start(t)
	waitTemporal(t, sys.temporal, sys.temporalAddr)
	t.Logf("fault %-44s injected across the fire of %s", "SIGKILL Temporal", next.Format(time.TimeOnly))

	var runs []anthropic.BetaManagedAgentsDeploymentRun
	poll.Until(t, 2*time.Minute, "the run of the fire Temporal missed", func() (bool, string) {
		page, err := sys.cli.Beta.DeploymentRuns.List(ctx, anthropic.BetaDeploymentRunListParams{DeploymentID: anthropic.String(dep.ID),
			Limit: anthropic.Int(100)})
		if err != nil {
			return false, err.Error()
		}
		runs = page.Data
		return slices.ContainsFunc(runs, func(r anthropic.BetaManagedAgentsDeploymentRun) bool {
			return r.TriggerContext.ScheduledAt.Equal(next)
		}), fmt.Sprintf("%d runs", len(runs))
	})
	byOccurrence := map[int64]int{} // by Unix second: times from the clock carry a monotonic reading
	sessions := map[string]bool{}
	for _, r := range runs {
		byOccurrence[r.TriggerContext.ScheduledAt.Unix()]++
		if r.TriggerContext.Type != "schedule" || r.SessionID == "" || r.Error.Type != "" {
			t.Errorf("run %s: %s; want a scheduled run with a session", r.ID, r.RawJSON())
		}
		sessions[r.SessionID] = true
	}
	for at, n := range byOccurrence {
		if n != 1 {
			t.Errorf("occurrence %v has %d runs, want exactly 1", time.Unix(at, 0).UTC(), n)
		}
	}
	if len(runs) < len(fired)+1 {
		t.Errorf("%d runs for %d forced fires and the cron's fire of %v", len(runs), len(fired), next)
	}
	checkDeploymentSessions(t, sys, dep.ID, sessions)
}

// checkDeploymentSessions: the sessions with the deployment's id are the
// runs' sessions, and each ran its turn once.
func checkDeploymentSessions(t *testing.T, sys *system, depID string, runSessions map[string]bool) {
	t.Helper()
	page, err := sys.cli.Beta.Sessions.List(context.Background(), anthropic.BetaSessionListParams{DeploymentID: anthropic.String(depID),
		Limit: anthropic.Int(100)})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != len(runSessions) {
		t.Errorf("%d sessions carry the deployment's id, %d runs have sessions", len(page.Data), len(runSessions))
	}
	d := &driver{t: t, cli: sys.cli}
	for _, s := range page.Data {
		if !runSessions[s.ID] {
			t.Errorf("session %s carries the deployment's id but no run names it", s.ID)
		}
		var replies int
		poll.Until(t, time.Minute, "session "+s.ID+" replied", func() (bool, string) {
			replies = 0
			for _, ev := range d.list(s.ID) {
				if ev.Type == "agent.message" {
					replies++
				}
			}
			return replies > 0, "no reply yet"
		})
		if replies != 1 {
			t.Errorf("session %s: %d agent messages, want the turn once", s.ID, replies)
		}
	}
}
