package deployments

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// fakeRunner records the runs asked of it; failures makes RunScheduled
// fail that many times first.
type fakeRunner struct {
	mu       sync.Mutex
	failures int
	runs     []FireInput
	failed   []FireInput
}

func (f *fakeRunner) RunScheduled(_ context.Context, id string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failures != 0 {
		f.failures--
		return errors.New("database unavailable")
	}
	f.runs = append(f.runs, FireInput{DeploymentID: id, ScheduledAt: at})
	return nil
}

func (f *fakeRunner) FailScheduled(_ context.Context, id string, at time.Time, cause string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = append(f.failed, FireInput{DeploymentID: id, ScheduledAt: at, Cause: cause})
	return nil
}

// TestFireWorkflowRunsTheOccurrence: the run is for the occurrence the
// schedule names (TemporalScheduledStartTime), not the time the workflow
// started; a failing run is retried until it succeeds.
func TestFireWorkflowRunsTheOccurrence(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	runner := &fakeRunner{failures: 3}
	Register(env, runner)
	occurrence := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	env.SetStartTime(occurrence.Add(7 * time.Second)) // jitter, a late start
	if err := env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(scheduledStartTime.ValueSet(occurrence))); err != nil {
		t.Fatal(err)
	}
	env.ExecuteWorkflow(FireWorkflowName, "depl_x")
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(runner.runs) != 1 || !runner.runs[0].ScheduledAt.Equal(occurrence) || runner.runs[0].DeploymentID != "depl_x" || len(runner.failed) != 0 {
		t.Fatalf("runs %+v, failed %+v; want one run for %v", runner.runs, runner.failed, occurrence)
	}
}

// TestFireWorkflowRecordsWhatNeverRan: a run failing for its whole
// retry window is recorded as failed, with the cause.
func TestFireWorkflowRecordsWhatNeverRan(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	runner := &fakeRunner{failures: -1}
	Register(env, runner)
	occurrence := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	if err := env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(scheduledStartTime.ValueSet(occurrence))); err != nil {
		t.Fatal(err)
	}
	env.ExecuteWorkflow(FireWorkflowName, "depl_x")
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(runner.runs) != 0 || len(runner.failed) != 1 || !runner.failed[0].ScheduledAt.Equal(occurrence) || runner.failed[0].Cause == "" {
		t.Fatalf("runs %+v, failed %+v; want the occurrence recorded as failed", runner.runs, runner.failed)
	}
}

// TestReplayRecordedFire replays a fire recorded from a real schedule
// (testdata/fire.history.json, `temporal workflow show -o json` of a
// DeploymentFire run by the wire tests) against the current workflow
// code: a change that would break fires in flight fails here.
func TestReplayRecordedFire(t *testing.T) {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(FireWorkflow, workflow.RegisterOptions{Name: FireWorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/fire.history.json"); err != nil {
		t.Fatal(err)
	}
}
