package db

import (
	"context"
	"encoding/json"
	"fmt"
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

// Agent is one version of an agent. Spec is the resolved definition, owned
// by the api-server's agentspec package.
type Agent struct {
	ID         string
	Version    int64
	Spec       json.RawMessage
	CreatedAt  time.Time
	UpdatedAt  time.Time
	ArchivedAt *time.Time
}

// AgentCreate stores a new agent at version 1.
func (s *Store) AgentCreate(ctx context.Context, id string, spec json.RawMessage, now time.Time) (*Agent, error) {
	if err := s.q.AgentInsert(ctx, dbsqlc.AgentInsertParams{ID: id, Spec: spec, CreatedAt: now}); err != nil {
		return nil, mapErr("create agent", err)
	}
	return &Agent{ID: id, Version: 1, Spec: spec, CreatedAt: now, UpdatedAt: now}, nil
}

// AgentGet returns the current version of an agent.
func (s *Store) AgentGet(ctx context.Context, id string) (*Agent, error) {
	row, err := s.q.AgentGetByID(ctx, id)
	if err != nil {
		return nil, mapErr("get agent", err)
	}
	return &Agent{ID: row.ID, Version: row.Version, Spec: row.Spec, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt, ArchivedAt: row.ArchivedAt}, nil
}

// AgentGetVersion returns one version of an agent.
func (s *Store) AgentGetVersion(ctx context.Context, id string, version int64) (*Agent, error) {
	row, err := s.q.AgentGetVersion(ctx, dbsqlc.AgentGetVersionParams{ID: id, Version: version})
	if err != nil {
		return nil, mapErr("get agent version", err)
	}
	return &Agent{ID: row.ID, Version: row.Version, Spec: row.Spec, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt, ArchivedAt: row.ArchivedAt}, nil
}

// AgentUpdate locks the agent and calls next with its current version.
// next returns the new spec, or nil to leave the agent unchanged; an error
// from next aborts the update and is returned as is. A new spec becomes
// version current+1.
func (s *Store) AgentUpdate(ctx context.Context, id string, now time.Time, next func(cur *Agent) (json.RawMessage, error)) (*Agent, error) {
	var out *Agent
	var fnErr error
	err := s.inTx(ctx, "update agent", func(q *dbsqlc.Queries) error {
		if _, err := q.AgentLock(ctx, id); err != nil {
			return err
		}
		row, err := q.AgentGetByID(ctx, id)
		if err != nil {
			return err
		}
		cur := &Agent{ID: row.ID, Version: row.Version, Spec: row.Spec, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt, ArchivedAt: row.ArchivedAt}
		spec, err := next(cur)
		if err != nil {
			fnErr = err
			return err
		}
		if spec == nil {
			out = cur
			return nil
		}
		v := cur.Version + 1
		if err := q.AgentVersionInsert(ctx, dbsqlc.AgentVersionInsertParams{AgentID: id, Version: v, Spec: spec, CreatedAt: now}); err != nil {
			return err
		}
		if err := q.AgentSetCurrentVersion(ctx, dbsqlc.AgentSetCurrentVersionParams{ID: id, CurrentVersion: v, UpdatedAt: now}); err != nil {
			return err
		}
		out = &Agent{ID: id, Version: v, Spec: spec, CreatedAt: cur.CreatedAt, UpdatedAt: now, ArchivedAt: cur.ArchivedAt}
		return nil
	})
	if fnErr != nil {
		return nil, fnErr
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AgentArchive marks an agent archived (idempotently) and returns it.
func (s *Store) AgentArchive(ctx context.Context, id string, now time.Time) (*Agent, error) {
	if err := s.q.AgentArchive(ctx, dbsqlc.AgentArchiveParams{ID: id, ArchivedAt: &now}); err != nil {
		return nil, mapErr("archive agent", err)
	}
	return s.AgentGet(ctx, id)
}

// AgentListParams filter and page an agent list.
type AgentListParams struct {
	IncludeArchived bool
	CreatedGTE      *time.Time
	CreatedLTE      *time.Time
	After           *Cursor
	Limit           int
}

// AgentList returns agents newest first, and whether more follow.
func (s *Store) AgentList(ctx context.Context, p AgentListParams) ([]Agent, bool, error) {
	arg := dbsqlc.AgentListParams{
		IncludeArchived: p.IncludeArchived,
		CreatedGte:      p.CreatedGTE,
		CreatedLte:      p.CreatedLTE,
		RowLimit:        int32(p.Limit + 1),
	}
	if p.After != nil {
		arg.AfterCreatedAt = &p.After.CreatedAt
		arg.AfterID = p.After.ID
	}
	rows, err := s.q.AgentList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list agents", err)
	}
	out := make([]Agent, 0, len(rows))
	for _, r := range rows {
		out = append(out, Agent{ID: r.ID, Version: r.Version, Spec: r.Spec, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ArchivedAt: r.ArchivedAt})
	}
	page, more := trim(out, p.Limit)
	return page, more, nil
}

// AgentVersions returns an agent's versions, newest first, starting below
// beforeVersion when set, and whether more follow. It returns ErrNotFound
// when the agent does not exist.
func (s *Store) AgentVersions(ctx context.Context, id string, beforeVersion *int64, limit int) ([]Agent, bool, error) {
	rows, err := s.q.AgentVersionList(ctx, dbsqlc.AgentVersionListParams{AgentID: id, BeforeVersion: beforeVersion, RowLimit: int32(limit + 1)})
	if err != nil {
		return nil, false, mapErr("list agent versions", err)
	}
	if len(rows) == 0 {
		exists, err := s.q.AgentExists(ctx, id)
		if err != nil {
			return nil, false, mapErr("list agent versions", err)
		}
		if !exists {
			return nil, false, fmt.Errorf("list agent versions: %w", ErrNotFound)
		}
	}
	out := make([]Agent, 0, len(rows))
	for _, r := range rows {
		out = append(out, Agent{ID: r.ID, Version: r.Version, Spec: r.Spec, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ArchivedAt: r.ArchivedAt})
	}
	page, more := trim(out, limit)
	return page, more, nil
}

func trim[T any](rows []T, limit int) ([]T, bool) {
	if len(rows) > limit {
		return rows[:limit], true
	}
	return rows, false
}
