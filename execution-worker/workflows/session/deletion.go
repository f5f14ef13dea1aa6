package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/mangohq/mango/execution-worker/sandbox"
	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// Activity names of the deletion workflow.
const (
	LookupBindingActivity    = "LookupSandboxBinding"
	TeardownSandboxActivity  = "TeardownSandbox"
	FinalizeDeletionActivity = "FinalizeSessionDeletion"
)

// DeletionWorkflow deletes a fenced session: it cancels the session's
// workflow, tears the sandbox down on the queue that can reach it (the
// binding's host queue for host-bound providers), removes the binding and
// then has the api-server delete the session row. Every step retries
// without limit: if the sandbox's worker is down, teardown waits in its
// queue and completes when a worker returns.
func DeletionWorkflow(ctx workflow.Context, in *sessionv1.SessionWorkflowInput) error {
	sessionID := in.GetSessionId()
	// Stop any turn in flight; a session without workflow is fine.
	if err := workflow.RequestCancelExternalWorkflow(ctx, sessionwf.WorkflowID(sessionID), "").Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Info("session workflow not cancelled", "session_id", sessionID, "reason", err.Error())
	}
	retry := &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute}
	local := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second, RetryPolicy: retry})
	var queue string
	if err := workflow.ExecuteActivity(local, LookupBindingActivity, sessionID).Get(ctx, &queue); err != nil {
		return fmt.Errorf("look up sandbox binding: %w", err)
	}
	if queue != "" {
		teardown := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:           queue,
			StartToCloseTimeout: 5 * time.Minute,
			HeartbeatTimeout:    time.Minute,
			RetryPolicy:         retry,
		})
		if err := workflow.ExecuteActivity(teardown, TeardownSandboxActivity, sessionID).Get(ctx, nil); err != nil {
			return fmt.Errorf("tear down sandbox: %w", err)
		}
	}
	if err := workflow.ExecuteActivity(local, FinalizeDeletionActivity, sessionID).Get(ctx, nil); err != nil {
		return fmt.Errorf("finalize deletion: %w", err)
	}
	return nil
}

// ControlPlane is what the sandbox activities need from the api-server.
type ControlPlane interface {
	sandbox.Bindings
	// FinalizeSessionDeletion deletes the fenced, unbound session row.
	FinalizeSessionDeletion(ctx context.Context, sessionID string) error
}

// SandboxActivities are the activities that touch a session's sandbox.
type SandboxActivities struct {
	Manager      *sandbox.SessionManager
	ControlPlane ControlPlane
	// ProviderQueue is the provider's shared queue, used for intents that
	// never recorded a host queue.
	ProviderQueue string
}

// Register registers the deletion workflow and the sandbox activities.
func (a *SandboxActivities) Register(w interface {
	Registrar
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}) {
	w.RegisterWorkflowWithOptions(DeletionWorkflow, workflow.RegisterOptions{Name: sessionwf.DeletionWorkflowType})
	w.RegisterActivityWithOptions(a.LookupBinding, activity.RegisterOptions{Name: LookupBindingActivity})
	w.RegisterActivityWithOptions(a.Teardown, activity.RegisterOptions{Name: TeardownSandboxActivity})
	w.RegisterActivityWithOptions(a.Finalize, activity.RegisterOptions{Name: FinalizeDeletionActivity})
}

// LookupBinding returns the task queue of the session's sandbox, or ""
// when it has none.
func (a *SandboxActivities) LookupBinding(ctx context.Context, sessionID string) (string, error) {
	b, err := a.ControlPlane.GetBinding(ctx, sessionID)
	if errors.Is(err, sandbox.ErrNoBinding) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if b.TaskQueue == "" {
		return a.ProviderQueue, nil
	}
	return b.TaskQueue, nil
}

// Teardown destroys the session's sandbox and removes its binding.
func (a *SandboxActivities) Teardown(ctx context.Context, sessionID string) error {
	activity.RecordHeartbeat(ctx)
	return a.Manager.Teardown(ctx, sessionID)
}

// Finalize asks the api-server to delete the session row.
func (a *SandboxActivities) Finalize(ctx context.Context, sessionID string) error {
	return a.ControlPlane.FinalizeSessionDeletion(ctx, sessionID)
}
