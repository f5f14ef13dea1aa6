// Package session is the Session Workflow family: the names that route work
// to execution workers (task queues, workflow type, activity names) and the
// activities registered on those queues.
//
// Each worker serves one sandbox provider and polls the provider's task
// queue, [TaskQueue](provider) = "mango.<provider>". Workers of host-bound
// providers (local, docker) also poll their own host queue,
// [HostTaskQueue](provider, workerID) = "mango.<provider>.<worker-id>", so a
// session's later sandbox activities reach the one host that holds its
// sandbox.
//
// The SessionWorkflow itself arrives with the runtime issue. Until then the
// only registered activity is [Activities.Ping], the health probe of a
// worker; it is registered on both queues, which also keeps the worker
// polling them.
package session
