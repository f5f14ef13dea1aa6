// Package session is the Session Workflow family: the workflow that runs a
// session's turns (and the one that deletes a session), the activities they
// schedule, and the names that route that work to execution workers.
//
// Each worker serves one sandbox provider and polls the provider's task
// queue, [TaskQueue](provider) = "mango.<provider>". Workers of host-bound
// providers (local, docker) also poll their locality's queue,
// [LocalityTaskQueue](provider, locality) = "mango.<provider>.<locality>",
// named for where the sandboxes live (the Docker daemon's ID; the host's
// identity plus a hash of the workspace root), never for the worker
// process. A session's binding records that queue, so its later sandbox
// activities reach any worker that can reach its sandbox: a restarted
// worker or a second replica serves them at once.
package session
