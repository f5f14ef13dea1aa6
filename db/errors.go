package db

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFound is returned when the requested row does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a write collides with existing state: a
// unique value already taken, or a precondition that no longer holds.
var ErrConflict = errors.New("conflict")

// mapErr translates pgx errors into the package's sentinel errors, keeping
// the original as context. It is the only place that inspects driver errors.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, ErrNotFound)
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
