package session

import "github.com/mangohq/mango/proto/sessionwf"

// The names below are the api-server's too: they come from the shared
// contract package sessionwf, so the worker registers exactly what the
// api-server starts and signals.

// TaskQueuePrefix is the first segment of every Mango task queue name.
const TaskQueuePrefix = sessionwf.TaskQueuePrefix

// WorkflowType is the registered name of the Session Workflow. Its input
// is a *sessionv1.SessionWorkflowInput; its workflow id is
// sessionwf.WorkflowID(session id).
const WorkflowType = sessionwf.WorkflowType

// SignalWakeup is the name of the signal (payload *sessionv1.WakeupSignal)
// the api-server sends for every admitted wake-up.
const SignalWakeup = sessionwf.SignalWakeup

// PingActivity is the registered name of [Activities.Ping].
const PingActivity = "Ping"

// WorkflowID returns the workflow id of a session's workflow.
func WorkflowID(sessionID string) string {
	return sessionwf.WorkflowID(sessionID)
}

// TaskQueue returns the shared task queue of a provider's worker pool,
// "mango.<provider>". Workflow tasks, model calls and first sandbox
// provisioning for sessions on that provider run there.
func TaskQueue(provider string) string {
	return sessionwf.TaskQueue(provider)
}

// LocalityTaskQueue returns the task queue of a host-bound provider's
// locality, "mango.<provider>.<locality>", polled by every worker that
// reaches the same sandboxes. A session's binding records it, and every
// later sandbox activity of that session is routed there.
func LocalityTaskQueue(provider, locality string) string {
	return sessionwf.LocalityTaskQueue(provider, locality)
}
