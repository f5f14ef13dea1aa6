// Package apierror defines the errors the HTTP API shows to clients.
//
// An *Error carries an HTTP status, an Anthropic error type and a public
// message that is safe to show. Anything that is not an *Error reaching the
// HTTP layer is an internal failure: it is logged with its cause and the
// client sees only a generic api_error (the tailscale vizerror habit).
package apierror

import (
	"fmt"
	"net/http"
)

// Type is an Anthropic API error type.
type Type string

// Error types of the Anthropic error envelope.
const (
	InvalidRequest  Type = "invalid_request_error"
	Authentication  Type = "authentication_error"
	Permission      Type = "permission_error"
	NotFound        Type = "not_found_error"
	Conflict        Type = "conflict_error"
	RequestTooLarge Type = "request_too_large"
	RateLimit       Type = "rate_limit_error"
	API             Type = "api_error"
	Overloaded      Type = "overloaded_error"
)

// Error is an error whose message may be shown to the client.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Type is the envelope's error.type.
	Type Type
	// Message is the public, human-readable message.
	Message string
	// NoRetry marks conflicts that will not clear by retrying; the response
	// then carries x-should-retry: false.
	NoRetry bool
	// Details, when not nil, is the envelope's error.details: machine
	// readable detail whose error_code names the cause.
	Details any
}

func (e *Error) Error() string { return e.Message }

// Invalid returns a 400 invalid_request_error.
func Invalid(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: InvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// NotFoundf returns a 404 not_found_error.
func NotFoundf(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Type: NotFound, Message: fmt.Sprintf(format, args...)}
}

// Conflictf returns a 409 conflict_error that retrying will not clear.
func Conflictf(format string, args ...any) *Error {
	return &Error{Status: http.StatusConflict, Type: Conflict, Message: fmt.Sprintf(format, args...), NoRetry: true}
}

// Unauthenticated returns a 401 authentication_error.
func Unauthenticated(message string) *Error {
	return &Error{Status: http.StatusUnauthorized, Type: Authentication, Message: message}
}

// TooLarge returns a 413 request_too_large error.
func TooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: RequestTooLarge,
		Message: fmt.Sprintf("request body exceeds the maximum size of %d bytes", limit)}
}

// Unavailable returns a 503 overloaded_error: a dependency is down for a
// moment and the same request may succeed later (the SDKs retry it).
func Unavailable(message string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: Overloaded, Message: message}
}

// Forbidden returns a 403 permission_error.
func Forbidden(format string, args ...any) *Error {
	return &Error{Status: http.StatusForbidden, Type: Permission, Message: fmt.Sprintf(format, args...)}
}

// Internal is the only error shown for failures whose cause is internal.
func Internal() *Error {
	return &Error{Status: http.StatusInternalServerError, Type: API, Message: "internal server error"}
}

// ForStatus maps a bare HTTP status (from the router: unknown route, wrong
// method) to a public error.
func ForStatus(status int, message string) *Error {
	t := API
	switch {
	case status == http.StatusUnauthorized:
		t = Authentication
	case status == http.StatusForbidden:
		t = Permission
	case status == http.StatusNotFound:
		t = NotFound
	case status == http.StatusConflict:
		t = Conflict
	case status == http.StatusRequestEntityTooLarge:
		t = RequestTooLarge
	case status == http.StatusTooManyRequests:
		t = RateLimit
	case status >= 400 && status < 500:
		t = InvalidRequest
	}
	return &Error{Status: status, Type: t, Message: message}
}

// Envelope is the JSON body of every error response.
type Envelope struct {
	Type      string `json:"type"`
	Error     Body   `json:"error"`
	RequestID string `json:"request_id"`
}

// Body is the inner error object.
type Body struct {
	Type    Type   `json:"type"`
	Message string `json:"message"`
	// Details is present only for errors that carry machine-readable
	// detail (an error_code and its data).
	Details any `json:"details,omitempty"`
}
