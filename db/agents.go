package db

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// SkillRef is a skill an agent version names, resolved to one of its
// versions.
type SkillRef struct {
	SkillID   string
	VersionID string
}

// ErrSkillRefMissing reports an agent version naming a skill or skill
// version that no longer exists (deleted since it was resolved).
var ErrSkillRefMissing = fmt.Errorf("skill not found: %w", ErrNotFound)

// writeSkillRefs records the skills of agent version (id, version) in
// agent_skill_refs. It holds the skills FOR SHARE until the transaction
// ends, so a concurrent delete (FOR UPDATE) either waits for the refs and
// sees them or deletes first and this fails with ErrSkillRefMissing.
func writeSkillRefs(ctx context.Context, q *dbsqlc.Queries, id string, version int64, skills []SkillRef) error {
	if len(skills) == 0 {
		return nil
	}
	skillIDs := make([]string, 0, len(skills))
	versionIDs := make([]string, 0, len(skills))
	for _, r := range skills {
		skillIDs = append(skillIDs, r.SkillID)
		versionIDs = append(versionIDs, r.VersionID)
	}
	locked, err := q.SkillLockShareMany(ctx, skillIDs)
	if err != nil {
		return err
	}
	found, err := q.SkillVersionsExist(ctx, versionIDs)
	if err != nil {
		return err
	}
	for _, r := range skills {
		if !slices.Contains(locked, r.SkillID) {
			return fmt.Errorf("skill %s: %w", r.SkillID, ErrSkillRefMissing)
		}
		if !slices.Contains(found, dbsqlc.SkillVersionsExistRow{ID: r.VersionID, SkillID: r.SkillID}) {
			return fmt.Errorf("version %s of skill %s: %w", r.VersionID, r.SkillID, ErrSkillRefMissing)
		}
		if err := q.AgentSkillRefInsert(ctx, dbsqlc.AgentSkillRefInsertParams{AgentID: id, AgentVersion: version,
			SkillID: r.SkillID, SkillVersionID: r.VersionID}); err != nil {
			return err
		}
	}
	return nil
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

// AgentCreate stores a new agent at version 1, naming skills (see
// writeSkillRefs).
func (s *Store) AgentCreate(ctx context.Context, id string, spec json.RawMessage, skills []SkillRef, now time.Time) (*Agent, error) {
	err := s.inTx(ctx, "create agent", func(q *dbsqlc.Queries) error {
		if err := q.AgentInsert(ctx, dbsqlc.AgentInsertParams{ID: id, Spec: spec, CreatedAt: now}); err != nil {
			return err
		}
		if err := writeSkillRefs(ctx, q, id, 1, skills); err != nil {
			return err
		}
		return emitResourceWebhook(ctx, q, id, "agent.created", "", now)
	})
	if err != nil {
		return nil, err
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
// next returns the new spec and the skills it names, or a nil spec to
// leave the agent unchanged; an error from next aborts the update and is
// returned as is. A new spec becomes version current+1.
func (s *Store) AgentUpdate(ctx context.Context, id string, now time.Time,
	next func(cur *Agent) (json.RawMessage, []SkillRef, error)) (*Agent, error) {
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
		spec, skills, err := next(cur)
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
		if err := writeSkillRefs(ctx, q, id, v, skills); err != nil {
			return err
		}
		if err := q.AgentSetCurrentVersion(ctx, dbsqlc.AgentSetCurrentVersionParams{ID: id, CurrentVersion: v, UpdatedAt: now}); err != nil {
			return err
		}
		out = &Agent{ID: id, Version: v, Spec: spec, CreatedAt: cur.CreatedAt, UpdatedAt: now, ArchivedAt: cur.ArchivedAt}
		return emitResourceWebhook(ctx, q, id, "agent.updated", fmt.Sprint(v), now)
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
	err := s.inTx(ctx, "archive agent", func(q *dbsqlc.Queries) error {
		if err := q.AgentArchive(ctx, dbsqlc.AgentArchiveParams{ID: id, ArchivedAt: &now}); err != nil {
			return err
		}
		if err := pauseDeploymentsFor(ctx, q, &id, nil, "agent_archived_error", now); err != nil {
			return err
		}
		return emitResourceWebhook(ctx, q, id, "agent.archived", "", now)
	})
	if err != nil {
		return nil, err
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
