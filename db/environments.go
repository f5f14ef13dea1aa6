package db

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// Environment is a stored environment. Config is the resolved
// configuration, owned by the api-server's envspec package.
type Environment struct {
	ID          string
	Name        string
	Description string
	Config      json.RawMessage
	Metadata    map[string]string
	Scope       string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	ArchivedAt  *time.Time
}

func environmentFromRow(r dbsqlc.Environment) (*Environment, error) {
	e := &Environment{ID: r.ID, Name: r.Name, Description: r.Description, Config: r.Config, Scope: r.Scope,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ArchivedAt: r.ArchivedAt}
	if err := json.Unmarshal(r.Metadata, &e.Metadata); err != nil {
		return nil, fmt.Errorf("decode metadata of environment %s: %w", r.ID, err)
	}
	return e, nil
}

func metadataJSON(md map[string]string) json.RawMessage {
	if md == nil {
		md = map[string]string{}
	}
	b, _ := json.Marshal(md) // a map of strings always marshals
	return b
}

// EnvironmentCreate stores a new environment; ErrConflict when the name is
// taken.
func (s *Store) EnvironmentCreate(ctx context.Context, e *Environment) (*Environment, error) {
	var row dbsqlc.Environment
	err := s.inTx(ctx, "create environment", func(q *dbsqlc.Queries) error {
		var err error
		row, err = q.EnvironmentInsert(ctx, dbsqlc.EnvironmentInsertParams{
			ID: e.ID, Name: e.Name, Description: e.Description, Config: e.Config,
			Metadata: metadataJSON(e.Metadata), Scope: e.Scope, CreatedAt: e.CreatedAt,
		})
		if err != nil {
			return err
		}
		return emitResourceWebhook(ctx, q, e.ID, "environment.created", "", e.CreatedAt)
	})
	if err != nil {
		return nil, err
	}
	return environmentFromRow(row)
}

// EnvironmentGet returns an environment.
func (s *Store) EnvironmentGet(ctx context.Context, id string) (*Environment, error) {
	row, err := s.q.EnvironmentGetByID(ctx, id)
	if err != nil {
		return nil, mapErr("get environment", err)
	}
	return environmentFromRow(row)
}

// EnvironmentUpdate locks the environment and stores what next returns. An
// error from next aborts the update and is returned as is; ErrConflict
// reports a name already taken.
func (s *Store) EnvironmentUpdate(ctx context.Context, id string, next func(cur *Environment) (*Environment, error)) (*Environment, error) {
	var out *Environment
	var fnErr error
	err := s.inTx(ctx, "update environment", func(q *dbsqlc.Queries) error {
		row, err := q.EnvironmentGetByIDForUpdate(ctx, id)
		if err != nil {
			return err
		}
		cur, err := environmentFromRow(row)
		if err != nil {
			return err
		}
		n, err := next(cur)
		if err != nil {
			fnErr = err
			return err
		}
		updated, err := q.EnvironmentUpdate(ctx, dbsqlc.EnvironmentUpdateParams{
			ID: id, Name: n.Name, Description: n.Description, Config: n.Config,
			Metadata: metadataJSON(n.Metadata), Scope: n.Scope, UpdatedAt: n.UpdatedAt,
		})
		if err != nil {
			return err
		}
		if out, err = environmentFromRow(updated); err != nil {
			return err
		}
		return emitResourceWebhook(ctx, q, id, "environment.updated", out.UpdatedAt.UTC().Format(time.RFC3339Nano), out.UpdatedAt)
	})
	if fnErr != nil {
		return nil, fnErr
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EnvironmentArchive archives an environment (idempotently).
func (s *Store) EnvironmentArchive(ctx context.Context, id string, now time.Time) (*Environment, error) {
	var row dbsqlc.Environment
	err := s.inTx(ctx, "archive environment", func(q *dbsqlc.Queries) error {
		var err error
		if row, err = q.EnvironmentArchive(ctx, dbsqlc.EnvironmentArchiveParams{ID: id, Now: now}); err != nil {
			return err
		}
		if err := pauseDeploymentsFor(ctx, q, nil, &id, "environment_archived_error", now); err != nil {
			return err
		}
		return emitResourceWebhook(ctx, q, id, "environment.archived", "", now)
	})
	if err != nil {
		return nil, err
	}
	return environmentFromRow(row)
}

// EnvironmentDelete removes an environment; ErrNotFound when absent.
func (s *Store) EnvironmentDelete(ctx context.Context, id string) error {
	return s.inTx(ctx, "delete environment", func(q *dbsqlc.Queries) error {
		n, err := q.EnvironmentDelete(ctx, id)
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		now := time.Now()
		if err := pauseDeploymentsFor(ctx, q, nil, &id, "environment_not_found_error", now); err != nil {
			return err
		}
		return emitResourceWebhook(ctx, q, id, "environment.deleted", "", now)
	})
}

// EnvironmentListParams page an environment list.
type EnvironmentListParams struct {
	IncludeArchived bool
	After           *Cursor
	Limit           int
}

// EnvironmentList returns environments newest first, and whether more
// follow.
func (s *Store) EnvironmentList(ctx context.Context, p EnvironmentListParams) ([]Environment, bool, error) {
	arg := dbsqlc.EnvironmentListParams{IncludeArchived: p.IncludeArchived, RowLimit: int32(p.Limit + 1)}
	if p.After != nil {
		arg.AfterCreatedAt = &p.After.CreatedAt
		arg.AfterID = p.After.ID
	}
	rows, err := s.q.EnvironmentList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list environments", err)
	}
	out := make([]Environment, 0, len(rows))
	for _, r := range rows {
		e, err := environmentFromRow(r)
		if err != nil {
			return nil, false, err
		}
		out = append(out, *e)
	}
	page, more := trim(out, p.Limit)
	return page, more, nil
}
