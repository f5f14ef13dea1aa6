package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/internal/poll"
)

// TestOutcomeFaults kills the execution worker, then the api-server, then
// stops PostgreSQL, each while the graders of a group of sessions'
// outcomes run (scripted: the first evaluation asks for a revision, the
// second is satisfied). Every outcome must end satisfied at its second
// evaluation, with each event once, two evaluations (each one start and
// one end), one idle status and the agent's command run once.
func TestOutcomeFaults(t *testing.T) {
	if os.Getenv("MANGO_FAULTS") != "1" {
		t.Skip("the fault-injection suite runs with MANGO_FAULTS=1 (make test-faults)")
	}
	sys := startSystem(t, false)
	ctx := context.Background()
	agent, err := sys.cli.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "outcomes",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}}})
	if err != nil {
		t.Fatal(err)
	}
	all := newFaultSessions(t, ctx, sys.cli, agent.ID, 3*groupSize, false)
	d := &driver{t: t, cli: sys.cli}
	inject := func(name string, group []*sess, do func()) {
		startOutcomes(t, d, group)
		do()
		t.Logf("fault %-40s injected", name)
	}
	inject("SIGKILL worker mid-grading, restart after 2s", all[:groupSize], func() {
		sys.local.kill(t)
		time.Sleep(2 * time.Second)
		sys.startWorker(sys.local)
	})
	inject("SIGKILL api-server mid-grading, restart", all[groupSize:2*groupSize], func() {
		sys.api.kill(t)
		sys.startAPI()
	})
	inject("PostgreSQL immediate stop mid-grading for 3s", all[2*groupSize:], func() {
		sys.pg.crash(t)
		time.Sleep(3 * time.Second)
		sys.pg.start(t)
	})
	for _, s := range all {
		if err := d.waitIdle(s, 1); err != nil {
			t.Fatalf("session %s: %v", s.id, err)
		}
	}
	markers := localMarkers(t, sys.sandboxes)
	for _, s := range all {
		evs := d.list(s.id)
		checkOutcomeSession(t, sys.cli, s, evs, markers)
		checkReplay(t, sys.cli, s.id, evs)
	}
}

// startOutcomes defines an outcome on each session of group, whose agent
// writes the session's marker and whose grader takes 2 s, and returns
// once every session's grader runs.
func startOutcomes(t *testing.T, d *driver, group []*sess) {
	t.Helper()
	for _, s := range group {
		bash, _ := json.Marshal(map[string]any{"command": fmt.Sprintf("echo %s >> markers.log", marker(s.id, 1))})
		if err := sendOutcome(d, s, "#tool bash "+string(bash)+"\n#reply draft",
			"#slow 2s\n#grade HEADLINE Add a line with the word HEADLINE."); err != nil {
			t.Fatalf("session %s: define the outcome: %v", s.id, err)
		}
	}
	poll.Until(t, 2*time.Minute, "every session's grader running", func() (bool, string) {
		n := 0
		for _, s := range group {
			evs := d.list(s.id)
			if slices.ContainsFunc(evs, func(e event) bool { return e.Type == "span.outcome_evaluation_ongoing" }) {
				n++
			}
		}
		return n == len(group), fmt.Sprintf("%d of %d", n, len(group))
	})
}

// sendOutcome defines an outcome, riding out a fault: a send whose fate is
// unknown is looked up in the log before it is sent again.
func sendOutcome(d *driver, s *sess, desc, rubric string) error {
	ev := anthropic.BetaManagedAgentsEventParamsUnion{OfUserDefineOutcome: &anthropic.BetaManagedAgentsUserDefineOutcomeEventParams{
		Description: desc, Rubric: anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{
			OfText: &anthropic.BetaManagedAgentsTextRubricParams{Content: rubric}}}}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := d.cli.Beta.Sessions.Events.Send(ctx, s.id, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{ev}})
		cancel()
		var apiErr *anthropic.Error
		switch {
		case err == nil:
			return nil
		case errors.As(err, &apiErr) && apiErr.StatusCode >= 400 && apiErr.StatusCode < 500:
			return err
		}
		if evs, lerr := d.tryList(s.id); lerr == nil && slices.ContainsFunc(evs, func(e event) bool { return e.Type == "user.define_outcome" }) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("not accepted within 2 minutes")
}

// checkOutcomeSession: one define, each event once, two evaluations
// (needs_revision then satisfied) each with one start and one end, one
// idle status, the agent's command run once, and the outcome satisfied at
// iteration 1 as Sessions.Get shows it.
func checkOutcomeSession(t *testing.T, cli anthropic.Client, s *sess, evs []event, markers map[string]int) {
	t.Helper()
	ids, counts := map[string]bool{}, map[string]int{}
	var results []string
	for _, e := range evs {
		if ids[e.ID] {
			t.Errorf("session %s: event %s listed twice", s.id, e.ID)
		}
		ids[e.ID] = true
		counts[e.Type]++
		if e.Type == "span.outcome_evaluation_end" {
			var end anthropic.BetaManagedAgentsSpanOutcomeEvaluationEndEvent
			_ = json.Unmarshal([]byte(e.raw), &end)
			results = append(results, end.Result)
		}
	}
	if counts["user.define_outcome"] != 1 || counts["span.outcome_evaluation_start"] != 2 || counts["session.status_idle"] != 1 ||
		strings.Join(results, ",") != "needs_revision,satisfied" {
		t.Errorf("session %s: counts %v, verdicts %v; want one define, two evaluations (needs_revision, satisfied), one idle", s.id, counts, results)
	}
	if m := markers[marker(s.id, 1)]; m != 1 {
		t.Errorf("session %s: the agent's command ran %d times, want 1", s.id, m)
	}
	got, err := cli.Beta.Sessions.Get(context.Background(), s.id, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.OutcomeEvaluations) != 1 || got.OutcomeEvaluations[0].Result != "satisfied" || got.OutcomeEvaluations[0].Iteration != 1 {
		t.Errorf("session %s: outcome_evaluations %s, want one, satisfied at iteration 1", s.id, got.RawJSON())
	}
}
