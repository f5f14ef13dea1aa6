package db

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// Store is the api-server's access to PostgreSQL. Its methods speak domain
// types; SQL lives in queries/ and is compiled by sqlc.
type Store struct {
	pool *pgxpool.Pool
	q    *dbsqlc.Queries
}

// NewStore returns a Store over pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, q: dbsqlc.New(pool)}
}

// Pool returns the underlying connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return mapErr("ping database", s.pool.Ping(ctx))
}

// Cursor is a keyset position in a list ordered by creation time, newest
// first.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// APIKeyEnsure stores the hash of an API key (un-revoking it if needed).
func (s *Store) APIKeyEnsure(ctx context.Context, id, name string, hash []byte) error {
	return mapErr("ensure api key", s.q.APIKeyUpsert(ctx, dbsqlc.APIKeyUpsertParams{ID: id, Name: name, KeyHash: hash}))
}

// APIKeyLookup returns the id of the live key with the given hash, or
// ErrNotFound.
func (s *Store) APIKeyLookup(ctx context.Context, hash []byte) (string, error) {
	row, err := s.q.APIKeyGetByHash(ctx, hash)
	if err != nil {
		return "", mapErr("look up api key", err)
	}
	return row.ID, nil
}

func trim[T any](rows []T, limit int) ([]T, bool) {
	if len(rows) > limit {
		return rows[:limit], true
	}
	return rows, false
}
