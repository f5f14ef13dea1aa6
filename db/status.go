package db

import (
	"fmt"
	"time"
)

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

// Timing. A session's active time is the time it spent in running status:
// ActiveMicros holds the completed running periods and RunningSince the
// start of the current one (nil unless running). Its duration is the time
// since creation, frozen at the last update once the session is
// terminated or archived (both are final for its timing).

// ActiveSeconds is the session's time in running status up to now.
func (s *Session) ActiveSeconds(now time.Time) float64 {
	micros := s.ActiveMicros
	if s.RunningSince != nil && now.After(*s.RunningSince) {
		micros += now.Sub(*s.RunningSince).Microseconds()
	}
	return float64(micros) / 1e6
}

// DurationSeconds is the time since the session's creation, up to now or
// to its last update once it is terminated or archived.
func (s *Session) DurationSeconds(now time.Time) float64 {
	end := now
	if s.Status == StatusTerminated || s.ArchivedAt != nil {
		end = s.UpdatedAt
	}
	return max(end.Sub(s.CreatedAt).Seconds(), 0)
}

// moveClock updates the active time for a move from status from to to at
// now.
func (s *Session) moveClock(from, to Status, now time.Time) {
	switch {
	case from == StatusRunning && to != StatusRunning:
		if s.RunningSince != nil && now.After(*s.RunningSince) {
			s.ActiveMicros += now.Sub(*s.RunningSince).Microseconds()
		}
		s.RunningSince = nil
	case from != StatusRunning && to == StatusRunning:
		t := now
		s.RunningSince = &t
	}
}
