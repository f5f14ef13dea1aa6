// Package sessionwf names the Session Workflow for both of its sides: the
// api-server, which starts and signals it, and the execution workers, which
// register and run it. Its input and signal payloads are the messages of
// mango/session/v1 (package sessionv1); this package adds the names Temporal
// addresses them by, so neither service spells a string of its own.
package sessionwf

import (
	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
)

// WorkflowType is the registered name of the Session Workflow. Its single
// argument is a *sessionv1.SessionWorkflowInput.
const WorkflowType = "SessionWorkflow"

// SignalWakeup is the name of the signal whose payload is a
// *sessionv1.WakeupSignal.
const SignalWakeup = "wakeup"

// TaskQueuePrefix is the first segment of every Mango task queue name.
const TaskQueuePrefix = "mango"

// WorkflowID returns the workflow id of a session's workflow: the session
// id itself. Session ids carry the "sesn_" prefix, so they cannot collide
// with the ids of other workflow families, and an operator finds a
// session's workflow in Temporal by the id the API shows.
func WorkflowID(sessionID string) string {
	return sessionID
}

// DeletionWorkflowType is the workflow that tears a deleted session's
// sandbox down and finalizes the deletion. It is a workflow of its own (not
// a branch of SessionWorkflow) so it can run, and be retried, whatever state
// the session's workflow is in; it first cancels that workflow.
const DeletionWorkflowType = "SessionDeletionWorkflow"

// DeletionWorkflowID is the id of a session's deletion workflow.
func DeletionWorkflowID(sessionID string) string {
	return "delete/" + sessionID
}

// TaskQueue returns the shared task queue of a provider's worker pool,
// "mango.<provider>". Session workflows, model calls and first sandbox
// provisioning for sessions on that provider run there.
func TaskQueue(provider string) string {
	return Queues{}.Provider(provider)
}

// LocalityTaskQueue returns the task queue of a host-bound provider's
// locality, "mango.<provider>.<locality>": every worker that reaches the
// same sandboxes (one Docker daemon, one host filesystem) polls it. A
// session's binding records it, and every later sandbox activity of that
// session is routed there.
func LocalityTaskQueue(provider, locality string) string {
	return Queues{}.Locality(provider, locality)
}

// Queues names the task queues of one Mango deployment. Deployments (or
// test runs) sharing a Temporal namespace keep apart by using different
// prefixes (MANGO_TASK_QUEUE_PREFIX); the zero value uses TaskQueuePrefix.
type Queues struct {
	// Prefix is the first segment of every queue name.
	Prefix string
}

// Provider returns the shared queue of a provider's pool, "<prefix>.<provider>".
func (q Queues) Provider(provider string) string {
	prefix := q.Prefix
	if prefix == "" {
		prefix = TaskQueuePrefix
	}
	return prefix + "." + provider
}

// Locality returns the queue of a host-bound provider's locality,
// "<prefix>.<provider>.<locality>". The locality names where sandboxes
// live (a Docker daemon's ID, a host identity plus a hash of the workspace
// root), never a worker process, so a restarted worker or a second replica
// serves the same sessions at once.
func (q Queues) Locality(provider, locality string) string {
	return q.Provider(provider) + "." + locality
}

// ValidPrefix reports whether s is usable as a task queue prefix:
// lowercase letters, digits and dashes, starting with a letter, at most 64.
func ValidPrefix(s string) bool {
	if s == "" || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// Outbox kinds: the kind column of the api-server's outbox rows that
// become wake-up signals.
const (
	OutboxKindWakeup    = "wakeup"
	OutboxKindInterrupt = "interrupt"
	OutboxKindDelete    = "delete"
)

// KindFromOutbox maps an outbox row's kind to the signal's WakeupKind; ok
// is false for a kind this version does not know.
func KindFromOutbox(kind string) (k sessionv1.WakeupKind, ok bool) {
	switch kind {
	case OutboxKindWakeup:
		return sessionv1.WakeupKind_WAKEUP_KIND_WAKEUP, true
	case OutboxKindInterrupt:
		return sessionv1.WakeupKind_WAKEUP_KIND_INTERRUPT, true
	case OutboxKindDelete:
		return sessionv1.WakeupKind_WAKEUP_KIND_DELETE, true
	}
	return sessionv1.WakeupKind_WAKEUP_KIND_UNSPECIFIED, false
}
