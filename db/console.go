package db

// This file holds the web console's sign-ins: a cookie token (stored as
// its SHA-256) standing for a sealed API key until sign-out or expiry.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// ConsoleSession is one console sign-in.
type ConsoleSession struct {
	ID string
	// KeySealed is the signed-in API key, sealed with the vault keys.
	KeySealed []byte
	// CSRFToken must accompany every form and action of the sign-in.
	CSRFToken string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// ConsoleSessionCreate stores a sign-in under the SHA-256 of its cookie
// token.
func (s *Store) ConsoleSessionCreate(ctx context.Context, cs ConsoleSession, tokenHash []byte) error {
	err := s.q.ConsoleSessionInsert(ctx, dbsqlc.ConsoleSessionInsertParams{ID: cs.ID, TokenHash: tokenHash, KeySealed: cs.KeySealed,
		CsrfToken: cs.CSRFToken, CreatedAt: cs.CreatedAt, ExpiresAt: cs.ExpiresAt})
	return mapErr("create console session", err)
}

// ConsoleSessionByHash returns the sign-in whose cookie token has the
// hash, unless it expired by now (ErrNotFound).
func (s *Store) ConsoleSessionByHash(ctx context.Context, tokenHash []byte, now time.Time) (*ConsoleSession, error) {
	r, err := s.q.ConsoleSessionGetByHash(ctx, dbsqlc.ConsoleSessionGetByHashParams{TokenHash: tokenHash, Now: now})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("look up console session: %w", ErrNotFound)
	}
	if err != nil {
		return nil, mapErr("look up console session", err)
	}
	return &ConsoleSession{ID: r.ID, KeySealed: r.KeySealed, CSRFToken: r.CsrfToken, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}, nil
}

// ConsoleSessionDelete ends the sign-in of the cookie token hash (sign
// out); deleting one that does not exist is not an error.
func (s *Store) ConsoleSessionDelete(ctx context.Context, tokenHash []byte) error {
	return mapErr("delete console session", s.q.ConsoleSessionDelete(ctx, tokenHash))
}

// ConsoleSessionsSweep deletes the sign-ins expired by now and returns
// how many.
func (s *Store) ConsoleSessionsSweep(ctx context.Context, now time.Time) (int64, error) {
	n, err := s.q.ConsoleSessionDeleteExpired(ctx, now)
	return n, mapErr("sweep console sessions", err)
}
