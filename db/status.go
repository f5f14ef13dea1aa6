package db

import (
	"encoding/json"
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

// endsTurn reports whether a move from one status to another ends a
// turn: from running or rescheduling to idle or terminated.
func endsTurn(from, to Status) bool {
	return (from == StatusRunning || from == StatusRescheduling) && (to == StatusIdle || to == StatusTerminated)
}

// endTurnStopReason is the stop reason of an idle status that names none.
const endTurnStopReason = `{"type":"end_turn"}`

// idleEventBody is the body of a session.status_idle event: its stop
// reason.
func idleEventBody(stop json.RawMessage) json.RawMessage {
	return json.RawMessage(`{"stop_reason":` + string(stop) + `}`)
}

// move moves the session to status to at now, a move CheckTransition
// allows: an idle status keeps stop (end_turn when empty) as its stop
// reason, any other status none, and the active time follows
// (moveClock). It returns the body of the status event announcing the
// move (StatusEventType).
func (s *Session) move(to Status, stop json.RawMessage, now time.Time) json.RawMessage {
	body := json.RawMessage(`{}`)
	if to == StatusIdle {
		if len(stop) == 0 {
			stop = []byte(endTurnStopReason)
		}
		body = idleEventBody(stop)
	} else {
		stop = nil
	}
	s.moveClock(s.Status, to, now)
	s.Status, s.StopReason, s.UpdatedAt = to, stop, now
	return body
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
