package deployments

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// A schedule's fire starts FireWorkflow on the api-server's task queue.
// The workflow reads the occurrence it is for (Temporal's
// TemporalScheduledStartTime search attribute) and runs the Run activity,
// which records the run in PostgreSQL; it is retried until it succeeds
// or an hour passes, after which the Fail activity records the
// occurrence as a run with an unknown_error. The api-server executes
// these itself: a fire is a database write the api-server owns, and
// needs no sandbox or model.

// Names of the workflow and activities (part of Temporal histories: do
// not rename).
const (
	FireWorkflowName = "DeploymentFire"
	runActivityName  = "DeploymentRun"
	failActivityName = "DeploymentRunFail"
)

// Runner makes the runs of scheduled occurrences (the HTTP API's
// RunScheduled and FailScheduled).
type Runner interface {
	RunScheduled(ctx context.Context, deploymentID string, scheduledAt time.Time) error
	FailScheduled(ctx context.Context, deploymentID string, scheduledAt time.Time, cause string) error
}

// FireInput is the input of the activities.
type FireInput struct {
	DeploymentID string
	ScheduledAt  time.Time
	// Cause is why the run could not be made (the Fail activity).
	Cause string `json:",omitempty"`
}

var scheduledStartTime = temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime")

// FireWorkflow makes the run of one fire of a deployment's schedule.
func FireWorkflow(ctx workflow.Context, deploymentID string) error {
	at, ok := workflow.GetTypedSearchAttributes(ctx).GetTime(scheduledStartTime)
	if !ok {
		at = workflow.GetInfo(ctx).WorkflowStartTime
	}
	in := FireInput{DeploymentID: deploymentID, ScheduledAt: at.UTC().Truncate(time.Second)}
	runCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    time.Minute,
		ScheduleToCloseTimeout: time.Hour,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute},
	})
	err := workflow.ExecuteActivity(runCtx, runActivityName, in).Get(ctx, nil)
	if err == nil {
		return nil
	}
	workflow.GetLogger(ctx).Warn("deployment run failed past its retries; recording it", "deployment_id", deploymentID, "error", err)
	in.Cause = "it failed for an hour of retries"
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		in.Cause = appErr.Message()
	}
	failCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute},
	})
	return workflow.ExecuteActivity(failCtx, failActivityName, in).Get(ctx, nil)
}

type activities struct{ runner Runner }

// run makes the occurrence's run; a failure is logged by the Temporal
// worker with the attempt and retried.
func (a activities) run(ctx context.Context, in FireInput) error {
	return a.runner.RunScheduled(ctx, in.DeploymentID, in.ScheduledAt)
}

func (a activities) fail(ctx context.Context, in FireInput) error {
	return a.runner.FailScheduled(ctx, in.DeploymentID, in.ScheduledAt, in.Cause)
}

// NewWorker returns the worker that executes fires on queue.
func NewWorker(c client.Client, queue string, runner Runner) worker.Worker {
	w := worker.New(c, queue, worker.Options{})
	Register(w, runner)
	return w
}

// Register registers the fire workflow and its activities on r.
func Register(r worker.Registry, runner Runner) {
	r.RegisterWorkflowWithOptions(FireWorkflow, workflow.RegisterOptions{Name: FireWorkflowName})
	acts := activities{runner: runner}
	r.RegisterActivityWithOptions(acts.run, activity.RegisterOptions{Name: runActivityName})
	r.RegisterActivityWithOptions(acts.fail, activity.RegisterOptions{Name: failActivityName})
}

// RunWorker starts w once Temporal can be reached (retrying every few
// seconds, so that the api-server serves while Temporal is down) and
// stops it when ctx ends.
func RunWorker(ctx context.Context, w worker.Worker, log *slog.Logger) {
	for {
		err := w.Start()
		if err == nil {
			break
		}
		log.WarnContext(ctx, "start the deployment fire worker; retrying", slog.Any("error", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
	<-ctx.Done()
	w.Stop()
}
