package session

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
)

// Activities holds the activities of the session family and their
// dependencies. Register its methods with [Activities.Register].
type Activities struct {
	// WorkerID identifies the worker process (MANGO_WORKER_ID).
	WorkerID string
	// Provider is the sandbox provider the worker serves.
	Provider string
	// Version is the worker's build version.
	Version string
	// TaskQueues lists every task queue the worker polls.
	TaskQueues []string
}

// Registrar is the part of a Temporal worker that registers activities
// (worker.Worker satisfies it).
type Registrar interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Register registers every activity of the family on w under its constant
// name.
func (a *Activities) Register(w Registrar) {
	w.RegisterActivityWithOptions(a.Ping, activity.RegisterOptions{Name: PingActivity})
}

// PingRequest is the input of [Activities.Ping].
type PingRequest struct{}

// PingResponse describes the worker that ran [Activities.Ping].
type PingResponse struct {
	// WorkerID identifies the worker that ran the activity.
	WorkerID string `json:"worker_id"`
	// Provider is the sandbox provider that worker serves.
	Provider string `json:"provider"`
	// Version is that worker's build version.
	Version string `json:"version"`
	// TaskQueues lists every task queue that worker polls.
	TaskQueues []string `json:"task_queues"`
	// TaskQueue is the queue this activity was dispatched on.
	TaskQueue string `json:"task_queue"`
	// Time is the worker's clock when the activity ran.
	Time time.Time `json:"time"`
}

// Ping reports which worker ran it. Health checks and the api-server's
// provider probe schedule it on a provider queue (is any worker of the pool
// alive?) or a host queue (is this particular worker alive?). It has no side
// effects and is safe to retry.
func (a *Activities) Ping(ctx context.Context, _ PingRequest) (PingResponse, error) {
	return PingResponse{
		WorkerID:   a.WorkerID,
		Provider:   a.Provider,
		Version:    a.Version,
		TaskQueues: a.TaskQueues,
		TaskQueue:  activity.GetInfo(ctx).TaskQueue,
		Time:       time.Now().UTC(),
	}, nil
}
