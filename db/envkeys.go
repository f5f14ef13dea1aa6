package db

// This file holds environment keys: credentials bound to one self-hosted
// environment, for its workers. Only a key's SHA-256 is stored.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// EnvironmentKey is a stored environment key (its secret is never stored).
type EnvironmentKey struct {
	ID            string
	EnvironmentID string
	Name          string
	CreatedAt     time.Time
	// ExpiresAt, when set, is when the key stops working.
	ExpiresAt *time.Time
	// RevokedAt is set once the key was revoked.
	RevokedAt *time.Time
	// LastUsedAt is the last use seen, to the minute.
	LastUsedAt *time.Time
}

func environmentKeyFromRow(r dbsqlc.EnvironmentKey) *EnvironmentKey {
	return &EnvironmentKey{ID: r.ID, EnvironmentID: r.EnvironmentID, Name: r.Name, CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt, RevokedAt: r.RevokedAt, LastUsedAt: r.LastUsedAt}
}

// EnvironmentKeyCreate stores a new key of an environment, by the SHA-256
// of its secret; ErrNotFound when the environment does not exist.
func (s *Store) EnvironmentKeyCreate(ctx context.Context, id, environmentID, name string, hash []byte, expiresAt *time.Time, now time.Time) (*EnvironmentKey, error) {
	row, err := s.q.EnvironmentKeyInsert(ctx, dbsqlc.EnvironmentKeyInsertParams{ID: id, EnvironmentID: environmentID, Name: name,
		KeyHash: hash, CreatedAt: now, ExpiresAt: expiresAt})
	if err != nil {
		return nil, mapErr("create environment key", err)
	}
	return environmentKeyFromRow(row), nil
}

// EnvironmentKeyList returns an environment's keys, revoked and expired
// ones included, newest first.
func (s *Store) EnvironmentKeyList(ctx context.Context, environmentID string) ([]EnvironmentKey, error) {
	rows, err := s.q.EnvironmentKeyList(ctx, environmentID)
	if err != nil {
		return nil, mapErr("list environment keys", err)
	}
	out := make([]EnvironmentKey, 0, len(rows))
	for _, r := range rows {
		out = append(out, *environmentKeyFromRow(r))
	}
	return out, nil
}

// EnvironmentKeyRevoke revokes a key (idempotently: a revoked key keeps
// its first revocation time); ErrNotFound when there is no such key.
func (s *Store) EnvironmentKeyRevoke(ctx context.Context, id string, now time.Time) (*EnvironmentKey, error) {
	row, err := s.q.EnvironmentKeyRevoke(ctx, dbsqlc.EnvironmentKeyRevokeParams{ID: id, Now: now})
	if err != nil {
		return nil, mapErr("revoke environment key", err)
	}
	return environmentKeyFromRow(row), nil
}

// EnvironmentKeyByHash returns the key with the hash when it is live (not
// revoked, not expired at now), else ErrNotFound. It records the use,
// at most once a minute.
func (s *Store) EnvironmentKeyByHash(ctx context.Context, hash []byte, now time.Time) (*EnvironmentKey, error) {
	row, err := s.q.EnvironmentKeyGetByHash(ctx, dbsqlc.EnvironmentKeyGetByHashParams{KeyHash: hash, Now: now})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("look up environment key: %w", ErrNotFound)
	}
	if err != nil {
		return nil, mapErr("look up environment key", err)
	}
	k := environmentKeyFromRow(row)
	if k.LastUsedAt == nil || !now.Before(k.LastUsedAt.Add(time.Minute)) {
		if err := s.q.EnvironmentKeyTouch(ctx, dbsqlc.EnvironmentKeyTouchParams{ID: k.ID, Now: now}); err != nil {
			return nil, mapErr("record environment key use", err)
		}
		k.LastUsedAt = &now
	}
	return k, nil
}
