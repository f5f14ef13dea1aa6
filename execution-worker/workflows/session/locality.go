package session

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// CheckLocalityActivity is the activity the Session Workflow runs, on the
// provider's shared queue, when a turn waited on its sandbox's locality
// queue for the host-gone window without any worker picking it up.
const CheckLocalityActivity = "CheckLocality"

// Outcomes of CheckLocality.
const (
	// LocalityAlive: a worker of the locality heartbeated within the
	// window; it is busy, not gone. The workflow schedules the turn again.
	LocalityAlive = "alive"
	// LocalityMoved: the session's binding now names another queue; the
	// workflow follows it.
	LocalityMoved = "moved"
	// LocalityGone: no worker of the locality heartbeated within the
	// window. The turn failed explicitly (session.error, then idle); a
	// worker that comes back later serves the next turn.
	LocalityGone = "gone"
	// LocalityDeleted: the session is deleted or being deleted.
	LocalityDeleted = "deleted"
)

// CheckLocalityInput is the input of CheckLocality.
type CheckLocalityInput struct {
	SessionID string `json:"session_id"`
	// TaskQueue is the locality queue the turn waited on.
	TaskQueue string `json:"task_queue"`
	// Window is how long it waited: a worker seen more recently than that
	// counts as alive.
	Window time.Duration `json:"window"`
}

// CheckLocalityResult is what CheckLocality found.
type CheckLocalityResult struct {
	Outcome string `json:"outcome"`
	// TaskQueue is the binding's queue when Outcome is LocalityMoved.
	TaskQueue string `json:"task_queue,omitempty"`
}

// CheckLocality decides what happens to a turn nobody picked up from its
// sandbox's locality queue. When no worker polling that queue heartbeated
// within the window it fails the turn explicitly: a session.error naming
// the sandbox and its locality queue, the pending work consumed, the
// session idle with retries_exhausted. It never silently moves the session
// to another sandbox.
func (a *TurnActivities) CheckLocality(ctx context.Context, in CheckLocalityInput) (*CheckLocalityResult, error) {
	run, err := a.ControlPlane.GetRun(ctx, &pb.GetRunRequest{SessionId: in.SessionID})
	if c := status.Code(err); c == codes.NotFound || c == codes.FailedPrecondition {
		return &CheckLocalityResult{Outcome: LocalityDeleted}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load run of session %s: %w", in.SessionID, err)
	}
	// A child thread's sandbox is its session's.
	box := in.SessionID
	if p := run.GetThread().GetParentSessionId(); p != "" {
		box = p
	}
	b, err := a.ControlPlane.GetBinding(ctx, &pb.GetBindingRequest{SessionId: box})
	if err != nil {
		return nil, fmt.Errorf("load binding of session %s: %w", box, err)
	}
	if q := b.GetBinding().GetTaskQueue(); q != "" && q != in.TaskQueue {
		return &CheckLocalityResult{Outcome: LocalityMoved, TaskQueue: q}, nil
	}
	health, err := a.ControlPlane.GetTaskQueueHealth(ctx, &pb.GetTaskQueueHealthRequest{TaskQueue: in.TaskQueue})
	if err != nil {
		return nil, fmt.Errorf("health of task queue %s: %w", in.TaskQueue, err)
	}
	seen := "no worker of that locality has ever reported"
	if last := health.GetLastHeartbeatAt(); last != nil {
		age := health.GetServerTime().AsTime().Sub(last.AsTime())
		if age < in.Window {
			return &CheckLocalityResult{Outcome: LocalityAlive}, nil
		}
		seen = fmt.Sprintf("its last worker reported %s ago", age.Round(time.Second))
	}
	sandboxName := "sandbox"
	if bb := b.GetBinding(); bb.GetExternalId() != "" {
		sandboxName = fmt.Sprintf("%s sandbox %s", bb.GetProvider(), bb.GetExternalId())
	}
	msg := fmt.Sprintf("this session's %s lives in locality %s, and no worker serving it has been alive for %s (%s); "+
		"the turn was not run. Send another message once a worker of that locality is back.",
		sandboxName, in.TaskQueue, in.Window.Round(time.Second), seen)
	// One ending per failed turn, the same for a retried activity.
	key := "locality_gone/" + in.TaskQueue
	if p := run.GetPendingTriggers(); len(p) > 0 {
		key = "locality_gone/" + p[0].GetId()
	}
	ev := errorEvent(key, "unknown_error", msg, retryExhausted)
	if err := a.complete(ctx, in.SessionID, key, pb.TurnOutcome_TURN_OUTCOME_RETRIES_EXHAUSTED, []*pb.NewEvent{ev},
		run.GetPendingTriggers()...); err != nil {
		return nil, err
	}
	return &CheckLocalityResult{Outcome: LocalityGone}, nil
}
