package db

import (
	"context"
	"errors"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// The Anthropic skills catalog (MANGO_SKILLS_CATALOG) is imported into
// skills with source SkillAnthropic: the importer reads the imported
// state (SkillCatalog), stores the bytes of what changed, then applies the
// catalog in one transaction (SkillCatalogApply) under an advisory lock,
// so one importer runs at a time.

// CatalogSkill is one skill of the catalog.
type CatalogSkill struct {
	// ID is the catalog folder's name, equal to Name.
	ID          string
	Name        string
	DisplayName string
	// Version is the catalog's content, its bytes already stored under
	// Version.StorageKey; nil when SkillCatalog showed that the skill's
	// latest version already has this content.
	Version *SkillVersion
}

// CatalogResult is what SkillCatalogApply did.
type CatalogResult struct {
	// Added are the skills that got a new version (new skills included).
	Added []string
	// Removed are the skills deleted because the catalog no longer has
	// them.
	Removed []string
	// Kept are the skills gone from the catalog but still in use, kept.
	Kept []*SkillInUseError
	// UnusedKeys are storage keys no row references, which the caller
	// deletes: of removed skills' versions, and of versions not added
	// because a concurrent import had already added that content.
	UnusedKeys []string
}

// SkillCatalog returns the imported skills: id -> content hash of the
// latest version.
func (s *Store) SkillCatalog(ctx context.Context) (map[string]string, error) {
	rows, err := s.q.SkillCatalogList(ctx)
	if err != nil {
		return nil, mapErr("list catalog skills", err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.ID] = r.LatestSha256
	}
	return out, nil
}

// SkillCatalogApply makes the imported skills match the catalog: a new
// version for each skill whose content differs from its latest (a new
// skill for one not imported yet), and the deletion of imported skills
// the catalog no longer holds, unless in use (then kept and reported).
func (s *Store) SkillCatalogApply(ctx context.Context, catalog []CatalogSkill, now time.Time) (*CatalogResult, error) {
	var res *CatalogResult
	err := s.inTx(ctx, "apply skills catalog", func(q *dbsqlc.Queries) error {
		res = &CatalogResult{}
		if err := q.SkillCatalogLock(ctx); err != nil {
			return err
		}
		rows, err := q.SkillCatalogList(ctx)
		if err != nil {
			return err
		}
		imported := make(map[string]string, len(rows))
		for _, r := range rows {
			imported[r.ID] = r.LatestSha256
		}
		listed := make(map[string]bool, len(catalog))
		for i := range catalog {
			listed[catalog[i].ID] = true
			if err := applyCatalogSkill(ctx, q, &catalog[i], imported, now, res); err != nil {
				return err
			}
		}
		for _, r := range rows {
			if listed[r.ID] {
				continue
			}
			keys, err := deleteSkill(ctx, q, r.ID)
			var inUse *SkillInUseError
			switch {
			case errors.As(err, &inUse):
				res.Kept = append(res.Kept, inUse)
			case err != nil:
				return err
			default:
				res.Removed = append(res.Removed, r.ID)
				res.UnusedKeys = append(res.UnusedKeys, keys...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func applyCatalogSkill(ctx context.Context, q *dbsqlc.Queries, c *CatalogSkill, imported map[string]string, now time.Time, res *CatalogResult) error {
	v := c.Version
	if v == nil {
		return nil
	}
	sha, exists := imported[c.ID]
	switch {
	case exists && sha == v.ContentSHA256:
		res.UnusedKeys = append(res.UnusedKeys, v.StorageKey)
		return nil
	case exists:
		v.SkillID = c.ID
		if err := insertSkillVersion(ctx, q, v); err != nil {
			return err
		}
		if err := q.SkillTouch(ctx, dbsqlc.SkillTouchParams{ID: c.ID, UpdatedAt: now}); err != nil {
			return err
		}
	default:
		sk := &Skill{ID: c.ID, Source: SkillAnthropic, Name: c.Name, DisplayName: c.DisplayName, CreatedAt: now}
		if err := insertSkill(ctx, q, sk, v); err != nil {
			return err
		}
	}
	res.Added = append(res.Added, c.ID)
	return nil
}
