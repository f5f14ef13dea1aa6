package db

import "fmt"

// Status is a session's state.
type Status string

// Session states.
const (
	StatusIdle         Status = "idle"
	StatusRunning      Status = "running"
	StatusRescheduling Status = "rescheduling"
	StatusTerminated   Status = "terminated"
)

// transitions is the session state machine: every status change goes
// through CheckTransition, here and nowhere else.
var transitions = map[Status][]Status{
	StatusIdle:         {StatusRunning, StatusTerminated},
	StatusRunning:      {StatusIdle, StatusRescheduling, StatusTerminated},
	StatusRescheduling: {StatusRunning, StatusIdle, StatusTerminated},
	StatusTerminated:   {},
}

// ErrInvalidTransition reports a status change the state machine forbids.
var ErrInvalidTransition = fmt.Errorf("invalid session status transition: %w", ErrConflict)

// CheckTransition returns nil when a session may move from one status to
// another.
func CheckTransition(from, to Status) error {
	for _, s := range transitions[from] {
		if s == to {
			return nil
		}
	}
	return fmt.Errorf("%w: %s to %s", ErrInvalidTransition, from, to)
}

// StatusEventType is the event announcing a move into status:
// session.status_idle, _running, _rescheduled or _terminated.
func StatusEventType(s Status) string {
	if s == StatusRescheduling {
		return "session.status_rescheduled"
	}
	return "session.status_" + string(s)
}
