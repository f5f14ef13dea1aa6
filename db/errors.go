package db

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFound is returned when the requested row does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a write collides with existing state: a
// unique value already taken, or a precondition that no longer holds.
var ErrConflict = errors.New("conflict")

// ErrUnavailable is returned when the database cannot be reached or is
// shutting down or starting up: the same call may succeed once it is back.
var ErrUnavailable = errors.New("database unavailable")

// Unavailable reports whether err means the database could not be reached
// (connection refused or lost, the server shutting down or starting up, too
// many connections) rather than that the statement failed: a caller may
// retry the same call later.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 08: connection exception; 57P01-57P03: admin/crash shutdown,
		// cannot connect now; 53300: too many connections.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" ||
			pgErr.Code == "57P03" || pgErr.Code == "53300"
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	// A statement that never reached the server can be sent again.
	return pgconn.SafeToRetry(err)
}

// mapErr translates pgx errors into the package's sentinel errors, keeping
// the original as context. It is the only place that inspects driver errors.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	}
	if Unavailable(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505", "40001", "40P01": // unique_violation, serialization_failure, deadlock_detected
			return fmt.Errorf("%s: %w: %s", op, ErrConflict, pgErr.ConstraintName)
		case "23503": // foreign_key_violation
			return fmt.Errorf("%s: %w: %s", op, ErrNotFound, pgErr.ConstraintName)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// decideError carries an AppendRequest.Decide rejection through the
// transaction untouched by error mapping.
type decideError struct{ err error }

func (e *decideError) Error() string { return e.err.Error() }
func (e *decideError) Unwrap() error { return e.err }
