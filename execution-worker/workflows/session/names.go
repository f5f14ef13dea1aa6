package session

// TaskQueuePrefix is the first segment of every Mango task queue name.
const TaskQueuePrefix = "mango"

// WorkflowType is the registered name of the Session Workflow. The workflow
// ID of a session's workflow is the session ID.
const WorkflowType = "SessionWorkflow"

// PingActivity is the registered name of [Activities.Ping].
const PingActivity = "Ping"

// TaskQueue returns the shared task queue of a provider's worker pool,
// "mango.<provider>". Workflow tasks, model calls and first sandbox
// provisioning for sessions on that provider run there.
func TaskQueue(provider string) string {
	return TaskQueuePrefix + "." + provider
}

// HostTaskQueue returns the task queue that only one worker of a host-bound
// provider polls, "mango.<provider>.<worker-id>". A session's binding records
// it, and every later sandbox activity of that session is routed there.
func HostTaskQueue(provider, workerID string) string {
	return TaskQueue(provider) + "." + workerID
}
