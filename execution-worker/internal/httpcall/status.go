package httpcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
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

// ReadStatusError reads the body of the non-2xx answer resp (at most limit
// bytes), closes it, and returns the server's Retry-After (0: none) and e
// with the answer's status and body.
func ReadStatusError(resp *http.Response, limit int64, e StatusError) (time.Duration, error) {
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, limit))
	e.Status, e.Body = resp.StatusCode, string(b)
	return RetryAfter(resp.Header), &e
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

// OpError is a non-2xx answer to the operation Op, for the clients whose
// errors name what was being done rather than the request:
// "get sandbox: HTTP 404: not found".
type OpError struct {
	Op     string
	Status int
	// Code is the service's error code, when it sends one; it starts the
	// message.
	Code    string
	Message string
	// Attempts is how many tries ran out the retries (0: the call was
	// not retried).
	Attempts int
}

// maxOpMessage bounds the message an OpError quotes.
const maxOpMessage = 300

func (e *OpError) Error() string {
	msg := e.Message
	if e.Code != "" {
		msg = e.Code + ": " + msg
	}
	msg = strings.TrimSpace(msg)
	if len(msg) > maxOpMessage {
		msg = msg[:maxOpMessage] + "..."
	}
	s := fmt.Sprintf("%s: HTTP %d", e.Op, e.Status)
	if e.Attempts > 0 {
		s += fmt.Sprintf(", giving up after %d attempts", e.Attempts)
	}
	if msg == "" {
		return s
	}
	return s + ": " + msg
}

// StatusOf returns the HTTP status of the *StatusError or *OpError in
// err's chain, or 0.
func StatusOf(err error) int {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	var oe *OpError
	if errors.As(err, &oe) {
		return oe.Status
	}
	return 0
}

// CodeOf returns the service's error code of the *OpError in err's chain,
// or "".
func CodeOf(err error) string {
	var oe *OpError
	if errors.As(err, &oe) {
		return oe.Code
	}
	return ""
}
