package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/mangohq/mango/api-server/internal/deployments"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/proto/sessionwf"
)

// deployEnv is a server with a worker, a webhook receiver subscribed to
// the deployment events, an agent and an environment.
type deployEnv struct {
	*turnEnv
	rcv      *receiver
	temporal client.Client
	agentID  string
	envID    string
}

func newDeployEnv(t *testing.T) *deployEnv {
	t.Helper()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_WEBHOOK_ALLOW_PRIVATE", "1"))
	e := &deployEnv{turnEnv: &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}, rcv: newReceiver(t)}
	e.worker = startWorker(t, srv, "wire-deployments", e.root)
	ctx := context.Background()
	ep, err := e.client.Beta.Organization.Webhooks.New(ctx, anthropic.BetaOrganizationWebhookNewParams{URL: e.rcv.srv.URL + "/hook",
		EnabledEvents: []string{"deployment.created", "deployment.updated", "deployment.paused", "deployment.unpaused",
			"deployment.archived", "deployment_run.started", "deployment_run.succeeded", "deployment_run.failed"}})
	if err != nil {
		t.Fatal(err)
	}
	e.rcv.secret.Store(ep.SigningSecret)
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "deployed",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("deploy-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	e.agentID, e.envID = agent.ID, env.ID
	c, err := client.DialContext(ctx, client.Options{HostPort: os.Getenv("MANGO_TEST_TEMPORAL_HOSTPORT")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e.temporal = c
	return e
}

func (e *deployEnv) create(t *testing.T, p anthropic.BetaDeploymentNewParams) *anthropic.BetaManagedAgentsDeployment {
	t.Helper()
	if p.Agent.OfString.Value == "" && p.Agent.OfBetaManagedAgentsAgent == nil {
		p.Agent = anthropic.BetaDeploymentNewParamsAgentUnion{OfString: anthropic.String(e.agentID)}
	}
	if p.EnvironmentID == "" {
		p.EnvironmentID = e.envID
	}
	if p.InitialEvents == nil {
		p.InitialEvents = []anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{deployMessage("#reply deployed hello")}
	}
	d, err := e.client.Beta.Deployments.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	// An archived deployment's schedule is deleted, so that the shared
	// Temporal server does not keep firing it after the test.
	t.Cleanup(func() {
		_, _ = e.client.Beta.Deployments.Archive(context.Background(), d.ID, anthropic.BetaDeploymentArchiveParams{})
	})
	return d
}

// sdkDecodesDeployment: the deployment's unions decode through the SDK
// into their concrete variants.
func sdkDecodesDeployment(t *testing.T, d *anthropic.BetaManagedAgentsDeployment) {
	t.Helper()
	for i, ev := range d.InitialEvents {
		if ev.AsAny() == nil {
			t.Errorf("initial_events[%d] %s decodes to no variant", i, ev.RawJSON())
		}
	}
	for i, r := range d.Resources {
		if r.AsAny() == nil {
			t.Errorf("resources[%d] %s decodes to no variant", i, r.RawJSON())
		}
	}
}

func deployMessage(text string) anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion {
	return anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
		Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: text}}}}}
}

func cron(expr, tz string) anthropic.BetaManagedAgentsScheduleParams {
	return anthropic.BetaManagedAgentsScheduleParams{Expression: expr, Timezone: tz}
}

// scheduleState is the paused state of the deployment's Temporal
// Schedule; found is false when it has none.
func (e *deployEnv) scheduleState(t *testing.T, id string) (paused, found bool) {
	t.Helper()
	s := deployments.NewSyncer(deployments.Options{Queues: queuesOf(e.srv)})
	desc, err := e.temporal.ScheduleClient().GetHandle(context.Background(), s.ScheduleID(id)).Describe(context.Background())
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return desc.Schedule.State.Paused, true
}

func queuesOf(srv *testserver.Server) sessionwf.Queues {
	return sessionwf.Queues{Prefix: srv.TaskQueuePrefix}
}

// fireNow runs a fire of the deployment as its schedule would start one
// (a fire racing a pause: a paused Temporal Schedule takes no action, not
// even a triggered one) and waits until it has completed.
func (e *deployEnv) fireNow(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	run, err := e.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "forced-fire-" + id,
		TaskQueue: deployments.TaskQueue(queuesOf(e.srv))}, deployments.FireWorkflowName, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("forced fire: %v", err)
	}
}

// upcoming returns the upcoming runs of d (as created): its own, or, when
// the create's sync with Temporal did not finish within the request's
// bound (a loaded machine), those a later Get shows once the syncer made
// the schedule.
func (e *deployEnv) upcoming(t *testing.T, d *anthropic.BetaManagedAgentsDeployment) []time.Time {
	t.Helper()
	up := d.Schedule.UpcomingRunsAt
	poll.Until(t, 30*time.Second, "the upcoming runs of "+d.ID, func() (bool, string) {
		if len(up) > 0 {
			return true, ""
		}
		got, err := e.client.Beta.Deployments.Get(context.Background(), d.ID, anthropic.BetaDeploymentGetParams{})
		if err != nil {
			return false, err.Error()
		}
		up = got.Schedule.UpcomingRunsAt
		return len(up) > 0, "none yet"
	})
	return up
}

// runs lists the deployment's runs of a trigger type, newest first.
func (e *deployEnv) runs(t *testing.T, id, trigger string) []anthropic.BetaManagedAgentsDeploymentRun {
	t.Helper()
	p := anthropic.BetaDeploymentRunListParams{DeploymentID: anthropic.String(id)}
	if trigger != "" {
		p.TriggerType = anthropic.BetaManagedAgentsTriggerType(trigger)
	}
	page, err := e.client.Beta.DeploymentRuns.List(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return page.Data
}

// waitIdleWith waits until the session is idle and its events hold an
// agent.message containing text.
func (e *deployEnv) waitIdleWith(t *testing.T, sid, text string) {
	t.Helper()
	poll.Until(t, time.Minute, "session "+sid+" idle with "+text, func() (bool, string) {
		s, err := e.client.Beta.Sessions.Get(context.Background(), sid, anthropic.BetaSessionGetParams{})
		if err != nil {
			return false, err.Error()
		}
		page, err := e.client.Beta.Sessions.Events.List(context.Background(), sid, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(100)})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range page.Data {
			if ev.Type == "agent.message" && strings.Contains(ev.RawJSON(), text) && s.Status == "idle" {
				return true, ""
			}
		}
		return false, "status " + string(s.Status)
	})
}

// TestDeploymentsThroughSDK: a deployment on a one-minute cron creates
// sessions (deployment_id set) recorded as schedule runs; Run makes a
// manual run; pause stops scheduled runs (the Temporal Schedule is
// paused, and a fire forced through makes no run); archiving the agent pauses the deployment with the error and
// sends deployment.paused; a manual run then records the error; the
// deployment and run webhooks arrive; archive deletes the schedule.
func TestDeploymentsThroughSDK(t *testing.T) {
	t.Parallel()
	e := newDeployEnv(t)
	ctx := context.Background()
	d := e.create(t, anthropic.BetaDeploymentNewParams{Name: "every minute", Description: anthropic.String("ci"),
		Schedule: cron("* * * * *", "UTC"), Metadata: map[string]string{"team": "ci"}})
	if d.Type != "deployment" || d.Status != "active" || d.Agent.ID != e.agentID || d.Agent.Version != 1 || d.EnvironmentID != e.envID ||
		d.Metadata["team"] != "ci" || !strings.Contains(d.RawJSON(), `"paused_reason":null`) || len(d.InitialEvents) != 1 {
		t.Fatalf("created deployment: %s", d.RawJSON())
	}
	up := e.upcoming(t, d)
	if len(up) != 5 || up[0].Second() != 0 || up[1].Sub(up[0]) != time.Minute || !up[0].After(time.Now()) {
		t.Fatalf("upcoming_runs_at of * * * * *: %v", up)
	}
	if paused, found := e.scheduleState(t, d.ID); !found || paused {
		t.Fatalf("Temporal schedule: found %v paused %v; want an active one", found, paused)
	}

	// The first scheduled run.
	var sched anthropic.BetaManagedAgentsDeploymentRun
	poll.Until(t, 150*time.Second, "a scheduled run", func() (bool, string) {
		runs := e.runs(t, d.ID, "schedule")
		if len(runs) == 0 {
			return false, "none yet"
		}
		sched = runs[len(runs)-1]
		return true, ""
	})
	at := sched.TriggerContext.ScheduledAt
	if sched.TriggerContext.Type != "schedule" || at.IsZero() || at.Second() != 0 || sched.SessionID == "" ||
		!strings.Contains(sched.RawJSON(), `"error":null`) || sched.Agent.Version != 1 {
		t.Fatalf("scheduled run: %s", sched.RawJSON())
	}
	if _, ok := sched.TriggerContext.AsAny().(anthropic.BetaManagedAgentsScheduleTriggerContext); !ok {
		t.Errorf("scheduled run's trigger_context decodes as %T", sched.TriggerContext.AsAny())
	}
	sdkDecodesDeployment(t, d)
	e.waitIdleWith(t, sched.SessionID, "deployed hello")
	sess, err := e.client.Beta.Sessions.Get(ctx, sched.SessionID, anthropic.BetaSessionGetParams{})
	if err != nil || sess.DeploymentID != d.ID {
		t.Fatalf("session of the scheduled run: %v deployment_id %q, want %s", err, sess.DeploymentID, d.ID)
	}
	got, err := e.client.Beta.Deployments.Get(ctx, d.ID, anthropic.BetaDeploymentGetParams{})
	if err != nil || got.Schedule.LastRunAt.IsZero() || got.Schedule.LastRunAt.Before(at) {
		t.Fatalf("last_run_at after a scheduled run at %v: %v %v", at, err, got.Schedule.LastRunAt)
	}

	// Pause: no scheduled run for an occurrence after it.
	paused, err := e.client.Beta.Deployments.Pause(ctx, d.ID, anthropic.BetaDeploymentPauseParams{})
	if err != nil || paused.Status != "paused" || paused.PausedReason.Type != "manual" {
		t.Fatalf("pause: %v %s", err, paused.RawJSON())
	}
	e.upcoming(t, paused) // a paused schedule still shows its occurrences
	if _, ok := paused.PausedReason.AsAny().(anthropic.BetaManagedAgentsManualDeploymentPausedReason); !ok {
		t.Errorf("manual paused_reason decodes as %T", paused.PausedReason.AsAny())
	}
	pausedAt := time.Now()
	if p, _ := e.scheduleState(t, d.ID); !p {
		t.Error("the Temporal schedule is not paused after Pause")
	}

	// Meanwhile: a manual run, listed apart from the scheduled ones.
	manual, err := e.client.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{})
	if err != nil || manual.TriggerContext.Type != "manual" || manual.SessionID == "" || manual.DeploymentID != d.ID {
		t.Fatalf("manual run of a paused deployment: %v %s", err, manual.RawJSON())
	}
	if _, ok := manual.TriggerContext.AsAny().(anthropic.BetaManagedAgentsManualTriggerContext); !ok {
		t.Errorf("manual run's trigger_context decodes as %T", manual.TriggerContext.AsAny())
	}
	e.waitIdleWith(t, manual.SessionID, "deployed hello")
	if runs := e.runs(t, d.ID, "manual"); len(runs) != 1 || runs[0].ID != manual.ID {
		t.Errorf("manual runs: %v", runs)
	}
	run, err := e.client.Beta.DeploymentRuns.Get(ctx, manual.ID, anthropic.BetaDeploymentRunGetParams{})
	if err != nil || run.SessionID != manual.SessionID {
		t.Errorf("get run: %v %+v", err, run)
	}
	sessions, err := e.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{DeploymentID: anthropic.String(d.ID)})
	if err != nil || len(sessions.Data) < 2 {
		t.Fatalf("sessions of the deployment: %v %d", err, len(sessions.Data))
	}
	deploymentUpdates(t, e, d.ID)

	// The paused schedule does not fire (Temporal's part, shown by its
	// paused state); a fire that still comes (one racing the pause) makes
	// no run.
	// The forced fire is for a second of its own (a fire of the first
	// run's second would be that occurrence's, recorded once).
	poll.Until(t, 5*time.Second, "a second after the first run's", func() (bool, string) {
		return time.Now().Truncate(time.Second).After(at), ""
	})
	e.fireNow(t, d.ID)
	for _, r := range e.runs(t, d.ID, "schedule") {
		if r.CreatedAt.After(pausedAt) {
			t.Errorf("scheduled run %s for %v recorded after the pause at %v", r.ID, r.TriggerContext.ScheduledAt, pausedAt)
		}
	}

	unpaused, err := e.client.Beta.Deployments.Unpause(ctx, d.ID, anthropic.BetaDeploymentUnpauseParams{})
	if err != nil || unpaused.Status != "active" || !strings.Contains(unpaused.RawJSON(), `"paused_reason":null`) {
		t.Fatalf("unpause: %v %s", err, unpaused.RawJSON())
	}
	if p, found := e.scheduleState(t, d.ID); p || !found {
		t.Error("the Temporal schedule is paused after Unpause")
	}

	// Archiving the agent pauses the deployment with the error.
	if _, err := e.client.Beta.Agents.Archive(ctx, e.agentID, anthropic.BetaAgentArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	got, err = e.client.Beta.Deployments.Get(ctx, d.ID, anthropic.BetaDeploymentGetParams{})
	if err != nil || got.Status != "paused" || got.PausedReason.Type != "error" || got.PausedReason.AsError().Error.Type != "agent_archived_error" {
		t.Fatalf("after archiving the agent: %v %s", err, got.RawJSON())
	}
	if reason, ok := got.PausedReason.AsAny().(anthropic.BetaManagedAgentsErrorDeploymentPausedReason); !ok {
		t.Errorf("error paused_reason decodes as %T", got.PausedReason.AsAny())
	} else if _, ok := reason.Error.AsAny().(anthropic.BetaManagedAgentsAgentArchivedDeploymentPausedReasonErrorObject); !ok {
		t.Errorf("paused_reason.error decodes as %T", reason.Error.AsAny())
	}
	poll.Until(t, 30*time.Second, "the schedule paused", func() (bool, string) {
		p, _ := e.scheduleState(t, d.ID)
		return p, "not yet"
	})
	_, err = e.client.Beta.Deployments.Unpause(ctx, d.ID, anthropic.BetaDeploymentUnpauseParams{})
	if apiErr := apiErrorWithStatus(t, err, http.StatusConflict); !strings.Contains(apiErr.Error(), "agent_archived_error") {
		t.Errorf("unpause with the agent archived: %v", apiErr)
	}
	failed, err := e.client.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{})
	if err != nil || failed.Error.Type != "agent_archived_error" || failed.SessionID != "" || !strings.Contains(failed.RawJSON(), `"session_id":null`) {
		t.Fatalf("manual run with the agent archived: %v %s", err, failed.RawJSON())
	}
	if v, ok := failed.Error.AsAny().(anthropic.BetaManagedAgentsAgentArchivedRunErrorObject); !ok || v.Message == "" {
		t.Errorf("run error decodes as %T (%+v)", failed.Error.AsAny(), v)
	}
	withErr, err := e.client.Beta.DeploymentRuns.List(ctx, anthropic.BetaDeploymentRunListParams{DeploymentID: anthropic.String(d.ID), HasError: anthropic.Bool(true)})
	if err != nil || len(withErr.Data) != 1 || withErr.Data[0].ID != failed.ID {
		t.Errorf("runs with an error: %v %+v", err, withErr)
	}

	archived, err := e.client.Beta.Deployments.Archive(ctx, d.ID, anthropic.BetaDeploymentArchiveParams{})
	if err != nil || archived.ArchivedAt.IsZero() || len(archived.Schedule.UpcomingRunsAt) != 0 || archived.Schedule.LastRunAt.IsZero() {
		t.Fatalf("archive: %v %s", err, archived.RawJSON())
	}
	poll.Until(t, 30*time.Second, "the schedule deleted", func() (bool, string) {
		_, found := e.scheduleState(t, d.ID)
		return !found, "still there"
	})
	_, err = e.client.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{})
	wantAPIError(t, err, http.StatusConflict)

	metrics := scrape(t, e.srv.BaseURL+"/metrics")
	for _, want := range []string{`mango_deployment_runs_total{result="session",trigger="schedule"}`,
		`mango_deployment_runs_total{result="session",trigger="manual"} 1`, `mango_deployment_runs_total{result="error",trigger="manual"} 1`,
		`mango_deployment_schedule_syncs_total{result="ok"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	e.rcv.waitTypes(d.ID, time.Minute, "deployment.created", "deployment.updated", "deployment.paused", "deployment.unpaused", "deployment.archived")
	e.rcv.waitTypes(sched.ID, time.Minute, "deployment_run.started", "deployment_run.succeeded")
	e.rcv.waitTypes(failed.ID, time.Minute, "deployment_run.started", "deployment_run.failed")
	e.rcv.mu.Lock()
	if len(e.rcv.failed) > 0 {
		t.Errorf("deliveries that failed verification or decoding: %v", e.rcv.failed)
	}
	e.rcv.mu.Unlock()
	paused2 := 0
	for _, dl := range e.rcv.of(d.ID) {
		if dl.typ == "deployment.paused" {
			paused2++
		}
	}
	if paused2 != 2 {
		t.Errorf("deployment.paused delivered %d times, want 2 (the pause, the agent's archival)", paused2)
	}
}

// deploymentUpdates: update's patch semantics, list filters and the
// errors of bad input.
func deploymentUpdates(t *testing.T, e *deployEnv, id string) {
	t.Helper()
	ctx := context.Background()
	up, err := e.client.Beta.Deployments.Update(ctx, id, anthropic.BetaDeploymentUpdateParams{Name: anthropic.String("renamed"),
		Metadata: map[string]string{"owner": "wire"}})
	if err != nil || up.Name != "renamed" || up.Metadata["team"] != "ci" || up.Metadata["owner"] != "wire" || up.Description != "ci" ||
		up.Schedule.Expression != "* * * * *" || up.Status != "paused" {
		t.Fatalf("update: %v %s", err, up.RawJSON())
	}
	list, err := e.client.Beta.Deployments.List(ctx, anthropic.BetaDeploymentListParams{AgentID: anthropic.String(e.agentID),
		Status: anthropic.BetaManagedAgentsDeploymentStatusPaused})
	if err != nil || len(list.Data) != 1 || list.Data[0].ID != id {
		t.Errorf("list paused deployments of the agent: %v %+v", err, list)
	}
	for name, p := range map[string]anthropic.BetaDeploymentNewParams{
		"no initial events": {Name: "x", Agent: anthropic.BetaDeploymentNewParamsAgentUnion{OfString: anthropic.String(e.agentID)},
			EnvironmentID: e.envID, InitialEvents: []anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{}},
		"six-field cron": {Name: "x", Schedule: cron("0 * * * * *", "UTC")},
		"L in cron":      {Name: "x", Schedule: cron("0 0 L * *", "UTC")},
		"bad time zone":  {Name: "x", Schedule: cron("0 9 * * *", "Mars/Olympus")},
		"unknown env":    {Name: "x", EnvironmentID: "env_000000000000000000000000"},
	} {
		if p.Agent.OfString.Value == "" {
			p.Agent = anthropic.BetaDeploymentNewParamsAgentUnion{OfString: anthropic.String(e.agentID)}
		}
		if p.EnvironmentID == "" {
			p.EnvironmentID = e.envID
		}
		if p.InitialEvents == nil {
			p.InitialEvents = []anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{deployMessage("x")}
		}
		_, err := e.client.Beta.Deployments.New(ctx, p)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || (apiErr.StatusCode != http.StatusBadRequest && apiErr.StatusCode != http.StatusNotFound) {
			t.Errorf("%s: got %v, want a 400 or 404", name, err)
		}
	}
}

// TestDeploymentSchedulesThroughSDK: the upcoming runs Temporal computes
// for a schedule are exactly the expression's occurrences in its time
// zone, including the cron rules Temporal does not share (either day
// field matching when both are restricted, Sunday as 7); clearing the
// schedule deletes it.
func TestDeploymentSchedulesThroughSDK(t *testing.T) {
	t.Parallel()
	e := newDeployEnv(t)
	ctx := context.Background()
	for _, c := range []struct{ expr, tz string }{
		{"0 9 * * 1-5", "America/Los_Angeles"},
		{"30 6 1,15 * MON", "Europe/Paris"},
		{"*/20 22 * * 5-7", "Asia/Kolkata"},
		{"0 0 29 2 *", "UTC"},
	} {
		d := e.create(t, anthropic.BetaDeploymentNewParams{Name: c.expr, Schedule: cron(c.expr, c.tz)})
		parsed, err := deployments.ParseCron(c.expr)
		if err != nil {
			t.Fatal(err)
		}
		loc, _ := time.LoadLocation(c.tz)
		up := e.upcoming(t, d)
		if len(up) != 5 || d.Schedule.Timezone != c.tz {
			t.Fatalf("%s in %s: upcoming %v", c.expr, c.tz, up)
		}
		// Each is an occurrence, and none lies between two of them.
		prev := time.Now().Truncate(time.Minute)
		for _, u := range up {
			for m := prev.Add(time.Minute); m.Before(u); m = m.Add(time.Minute) {
				if parsed.Matches(m.In(loc)) {
					t.Fatalf("%s in %s: %v is an occurrence missing from %v", c.expr, c.tz, m.In(loc), up)
				}
			}
			if !parsed.Matches(u.In(loc)) {
				t.Fatalf("%s in %s: upcoming %v is not an occurrence", c.expr, c.tz, u.In(loc))
			}
			prev = u
		}
		if !slices.IsSortedFunc(up, func(a, b time.Time) int { return a.Compare(b) }) {
			t.Errorf("%s: upcoming not in order: %v", c.expr, up)
		}
	}

	// Clearing the schedule (null) makes the deployment manual-only.
	d := e.create(t, anthropic.BetaDeploymentNewParams{Name: "cleared", Schedule: cron("0 9 * * *", "UTC")})
	var cleared anthropic.BetaManagedAgentsDeployment
	if err := e.client.Post(ctx, "v1/deployments/"+d.ID+"?beta=true", map[string]any{"schedule": nil}, &cleared); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cleared.RawJSON(), `"schedule":null`) {
		t.Fatalf("schedule cleared: %s", cleared.RawJSON())
	}
	if _, found := e.scheduleState(t, d.ID); found {
		t.Error("a cleared schedule is still in Temporal")
	}
	otherInstallation(t, e)
}

// otherInstallation: a second installation on the same Temporal namespace
// (its own database and task queue prefix) archiving its deployments
// leaves this one's schedules as they are.
func otherInstallation(t *testing.T, e *deployEnv) {
	t.Helper()
	ours := e.create(t, anthropic.BetaDeploymentNewParams{Name: "ours", Schedule: cron("0 9 * * *", "UTC")})
	other := newDeployEnv(t)
	theirs := other.create(t, anthropic.BetaDeploymentNewParams{Name: "theirs", Schedule: cron("0 9 * * *", "UTC")})
	if _, found := other.scheduleState(t, theirs.ID); !found {
		t.Fatal("the other installation's schedule was not created")
	}
	if _, err := other.client.Beta.Deployments.Archive(context.Background(), theirs.ID, anthropic.BetaDeploymentArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the other installation's schedule deleted", func() (bool, string) {
		_, found := other.scheduleState(t, theirs.ID)
		return !found, "still there"
	})
	if paused, found := e.scheduleState(t, ours.ID); !found || paused {
		t.Errorf("our schedule after the other installation archived its own: found %v, paused %v", found, paused)
	}
}

// TestDeploymentResourcesThroughSDK: a deployment's resources (a file, a
// repository with a token, a memory store) are shown without the token
// and become each run's session resources, the token sealed anew for the
// session's resource; a run after the file's deletion records
// file_not_found_error.
func TestDeploymentResourcesThroughSDK(t *testing.T) {
	t.Parallel()
	e := newDeployEnv(t)
	ctx := context.Background()
	up := uploadCSV(t, e.client, "rows.csv")
	store, err := e.client.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "notes"})
	if err != nil {
		t.Fatal(err)
	}
	d := e.create(t, anthropic.BetaDeploymentNewParams{Name: "with resources",
		InitialEvents: []anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{deployMessage("#reply ok")},
		Resources: []anthropic.BetaDeploymentNewParamsResourceUnion{
			{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: up.ID, MountPath: anthropic.String("rows.csv")}},
			{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{URL: "https://github.com/acme/widgets.git",
				AuthorizationToken: plantedToken}},
			{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: store.ID,
				Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadOnly}},
		}})
	if strings.Contains(d.RawJSON(), plantedToken) || strings.Contains(d.RawJSON(), "token") || len(d.Resources) != 3 ||
		d.Resources[0].FileID != up.ID || d.Resources[0].MountPath != "/mnt/session/uploads/rows.csv" ||
		d.Resources[1].URL != "https://github.com/acme/widgets.git" || d.Resources[2].MemoryStoreID != store.ID || d.Resources[2].Access != "read_only" {
		t.Fatalf("deployment resources: %s", d.RawJSON())
	}
	sdkDecodesDeployment(t, d)
	run, err := e.client.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{})
	if err != nil || run.SessionID == "" {
		t.Fatalf("run: %v %s", err, run.RawJSON())
	}
	sess, err := e.client.Beta.Sessions.Get(ctx, run.SessionID, anthropic.BetaSessionGetParams{})
	if err != nil || len(sess.Resources) != 3 {
		t.Fatalf("the run's session: %v %s", err, sess.RawJSON())
	}
	pool, err := pgxpool.New(ctx, e.srv.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rs, err := db.NewStore(pool).ResourcesOfSessions(ctx, []string{run.SessionID})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := envelope.Parse(testserver.VaultKeys)
	if err != nil {
		t.Fatal(err)
	}
	opened := false
	for _, r := range rs[run.SessionID] {
		if r.Type == db.ResourceRepository {
			token, err := keys.Open(r.TokenSealed, db.ResourceTokenPurpose(r.ID))
			opened = err == nil && string(token) == plantedToken
		}
	}
	if !opened {
		t.Error("the run's repository resource does not hold the deployment's token sealed for itself")
	}

	if _, err := e.client.Beta.Files.Delete(ctx, up.ID, anthropic.BetaFileDeleteParams{}); err != nil {
		t.Fatal(err)
	}
	failed, err := e.client.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{})
	if err != nil || failed.Error.Type != "file_not_found_error" || !strings.Contains(failed.Error.Message, up.ID) {
		t.Fatalf("run after the file's deletion: %v %s", err, failed.RawJSON())
	}
	if got, _ := e.client.Beta.Deployments.Get(ctx, d.ID, anthropic.BetaDeploymentGetParams{}); got.Status != "active" {
		t.Errorf("a manual run's error paused the deployment: %s", got.RawJSON())
	}
}

// scrape returns the Prometheus text of url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
