package faults

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/internal/poll"
)

// TestDeploymentFaults runs a deployment on a one-minute cron and, across
// three consecutive fires, kills the api-server (which executes fires),
// stops PostgreSQL and kills Temporal (which holds the schedule), each
// from a few seconds before the fire to a few seconds after it. Every
// occurrence from the first to the last must have exactly one run, each
// with its own session (no session without a run), and each session's
// turn must run once.
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
	// across waits until 5 s before the next fire, injects the fault and
	// ends it after the fire; it returns the fire's occurrence.
	across := func(name string, begin, end func(), after time.Duration) time.Time {
		next := time.Now().Truncate(time.Minute).Add(time.Minute)
		if time.Until(next) < 8*time.Second {
			next = next.Add(time.Minute)
		}
		time.Sleep(time.Until(next.Add(-5 * time.Second))) // the fault must span the fire
		begin()
		time.Sleep(time.Until(next.Add(after)))
		end()
		t.Logf("fault %-44s across the fire of %s", name, next.Format(time.TimeOnly))
		return next
	}
	first := across("SIGKILL api-server, restart 3s after", func() { sys.api.kill(t) }, sys.startAPI, 3*time.Second)
	across("PostgreSQL immediate stop until 5s after", func() { sys.pg.crash(t) }, func() { sys.pg.start(t) }, 5*time.Second)
	last := across("SIGKILL Temporal, restart 3s after", func() { sys.temporal.kill(t) }, func() {
		sys.temporal.start(t)
		waitTemporal(t, sys.temporal, sys.temporalAddr)
	}, 3*time.Second)

	want := int(last.Sub(first)/time.Minute) + 1
	var runs []anthropic.BetaManagedAgentsDeploymentRun
	poll.Until(t, 3*time.Minute, fmt.Sprintf("a run for each of the %d occurrences %v..%v", want, first, last), func() (bool, string) {
		page, err := sys.cli.Beta.DeploymentRuns.List(ctx, anthropic.BetaDeploymentRunListParams{DeploymentID: anthropic.String(dep.ID),
			Limit: anthropic.Int(100)})
		if err != nil {
			return false, err.Error()
		}
		runs = page.Data
		covered := 0
		for _, r := range runs {
			if at := r.TriggerContext.ScheduledAt; !at.Before(first) && !at.After(last) {
				covered++
			}
		}
		return covered >= want, fmt.Sprintf("%d runs cover the window", covered)
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
	for at := first; !at.After(last); at = at.Add(time.Minute) {
		if n := byOccurrence[at.Unix()]; n != 1 {
			t.Errorf("occurrence %v has %d runs, want exactly 1", at, n)
		}
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
