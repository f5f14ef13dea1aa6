package httpcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// StatusError is a non-2xx answer of Service to Method Target, with the
// body it sent (bounded by the caller).
type StatusError struct {
	// Service names who answered; it starts the message ("daytona").
	Service        string
	Method, Target string
	Status         int
	Body           string
	// MessageKeys are the fields of a JSON object Body that may hold the
	// message, the first present wins (names matched ignoring case, as
	// encoding/json matches fields); else the message is the whole body.
	MessageKeys []string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: %s %s: %d %s: %s", e.Service, e.Method, e.Target, e.Status, http.StatusText(e.Status), e.message())
}

func (e *StatusError) message() string {
	var m map[string]any
	if json.Unmarshal([]byte(e.Body), &m) == nil {
		for _, k := range e.MessageKeys {
			if v, ok := m[k]; ok && v != nil {
				return fmt.Sprint(v)
			}
			for name, v := range m {
				if v != nil && strings.EqualFold(name, k) {
					return fmt.Sprint(v)
				}
			}
		}
	}
	return strings.TrimSpace(e.Body)
}

// StatusOf returns the HTTP status of the *StatusError in err's chain, or 0.
func StatusOf(err error) int {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}
