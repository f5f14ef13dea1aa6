package db

import (
	"context"
	"fmt"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// ErrLastSkillVersion reports the deletion of a skill's only version: a
// skill always holds at least one (delete the skill instead).
var ErrLastSkillVersion = fmt.Errorf("the skill's only version: %w", ErrConflict)

// Skill sources.
const (
	// SkillCustom is a skill uploaded through the Skills API.
	SkillCustom = "custom"
	// SkillAnthropic is a skill imported from the Anthropic skills
	// catalog (SkillCatalogApply); it is read-only through the API.
	SkillAnthropic = "anthropic"
)

// SkillInUseError reports the deletion of a skill, or of a version, that
// the current version of non-archived agents names (Agents, at most
// maxSkillUsers of them).
type SkillInUseError struct {
	SkillID string
	// VersionID is set for a version delete.
	VersionID string
	Agents    []string
}

func (e *SkillInUseError) Error() string {
	if e.VersionID != "" {
		return fmt.Sprintf("version %s of skill %s is used by agents %v", e.VersionID, e.SkillID, e.Agents)
	}
	return fmt.Sprintf("skill %s is used by agents %v", e.SkillID, e.Agents)
}

// Unwrap makes a SkillInUseError an ErrConflict.
func (e *SkillInUseError) Unwrap() error { return ErrConflict }

// maxSkillUsers bounds the agents a SkillInUseError names.
const maxSkillUsers = 10

// checkSkillUnused returns a SkillInUseError when the current version of a
// non-archived agent names the skill (versionID "") or pins versionID.
// The caller holds the skill FOR UPDATE.
func checkSkillUnused(ctx context.Context, q *dbsqlc.Queries, skillID, versionID string) error {
	arg := dbsqlc.SkillUsersParams{SkillID: skillID, RowLimit: maxSkillUsers}
	if versionID != "" {
		arg.VersionID = &versionID
	}
	agents, err := q.SkillUsers(ctx, arg)
	if err != nil {
		return err
	}
	if len(agents) > 0 {
		return &SkillInUseError{SkillID: skillID, VersionID: versionID, Agents: agents}
	}
	return nil
}

// Skill is a stored skill: a named folder of files in immutable versions.
type Skill struct {
	ID string
	// Source is SkillCustom or SkillAnthropic.
	Source string
	// Name is the kebab-case slug from the first version's SKILL.md; every
	// version has the same.
	Name        string
	DisplayName string
	// LatestVersionID is the newest version's id.
	LatestVersionID string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// SkillVersion is one immutable upload of a skill. Its files are one zip
// archive in the api-server's file store under StorageKey, which no other
// row shares.
type SkillVersion struct {
	ID          string
	SkillID     string
	Name        string
	Description string
	StorageKey  string
	SizeBytes   int64
	FileCount   int
	// ContentSHA256 is the hash of the version's files
	// (skillbundle.Bundle.ContentSHA256); empty for versions stored
	// before it was recorded.
	ContentSHA256 string
	CreatedAt     time.Time
}

func skillVersionFromRow(r dbsqlc.SkillVersion) SkillVersion {
	return SkillVersion{ID: r.ID, SkillID: r.SkillID, Name: r.Name, Description: r.Description, StorageKey: r.StorageKey,
		SizeBytes: r.SizeBytes, FileCount: int(r.FileCount), ContentSHA256: r.ContentSha256, CreatedAt: r.CreatedAt}
}

func insertSkillVersion(ctx context.Context, q *dbsqlc.Queries, v *SkillVersion) error {
	return q.SkillVersionInsert(ctx, dbsqlc.SkillVersionInsertParams{ID: v.ID, SkillID: v.SkillID, Name: v.Name,
		Description: v.Description, StorageKey: v.StorageKey, SizeBytes: v.SizeBytes, FileCount: int32(v.FileCount), //nolint:gosec // bounded by the upload limits
		ContentSha256: v.ContentSHA256, CreatedAt: v.CreatedAt})
}

func insertSkill(ctx context.Context, q *dbsqlc.Queries, sk *Skill, v *SkillVersion) error {
	if sk.Source == "" {
		sk.Source = SkillCustom
	}
	if err := q.SkillInsert(ctx, dbsqlc.SkillInsertParams{ID: sk.ID, Name: sk.Name, DisplayName: sk.DisplayName,
		Source: sk.Source, CreatedAt: sk.CreatedAt}); err != nil {
		return err
	}
	v.SkillID = sk.ID
	return insertSkillVersion(ctx, q, v)
}

// SkillCreate stores a new skill with its first version; s.LatestVersionID
// is set to v's id. An empty sk.Source is SkillCustom.
func (s *Store) SkillCreate(ctx context.Context, sk *Skill, v *SkillVersion) error {
	err := s.inTx(ctx, "create skill", func(q *dbsqlc.Queries) error { return insertSkill(ctx, q, sk, v) })
	if err != nil {
		return err
	}
	sk.UpdatedAt, sk.LatestVersionID = sk.CreatedAt, v.ID
	return nil
}

// SkillGet returns a skill, or ErrNotFound.
func (s *Store) SkillGet(ctx context.Context, id string) (*Skill, error) {
	r, err := s.q.SkillGetByID(ctx, id)
	if err != nil {
		return nil, mapErr("get skill", err)
	}
	return &Skill{ID: r.ID, Source: r.Source, Name: r.Name, DisplayName: r.DisplayName, LatestVersionID: r.LatestVersionID,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}, nil
}

// SkillList returns up to limit skills of source ("": any), newest first,
// after the cursor, and whether more follow.
func (s *Store) SkillList(ctx context.Context, source string, after *Cursor, limit int) ([]Skill, bool, error) {
	arg := dbsqlc.SkillListParams{RowLimit: int32(limit + 1)} //nolint:gosec // limits are small
	if source != "" {
		arg.Source = &source
	}
	if after != nil {
		arg.AfterCreatedAt, arg.AfterID = &after.CreatedAt, after.ID
	}
	rows, err := s.q.SkillList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list skills", err)
	}
	out := make([]Skill, 0, len(rows))
	for _, r := range rows {
		out = append(out, Skill{ID: r.ID, Source: r.Source, Name: r.Name, DisplayName: r.DisplayName, LatestVersionID: r.LatestVersionID,
			CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt})
	}
	page, more := trim(out, limit)
	return page, more, nil
}

// SkillDelete deletes a skill with all its versions and returns the
// storage keys of their bytes, which the caller deletes; ErrNotFound if
// there is no such skill, a *SkillInUseError while the current version of
// a non-archived agent names it.
func (s *Store) SkillDelete(ctx context.Context, id string) ([]string, error) {
	var keys []string
	err := s.inTx(ctx, "delete skill", func(q *dbsqlc.Queries) (err error) {
		keys, err = deleteSkill(ctx, q, id)
		return err
	})
	return keys, err
}

// deleteSkill locks a skill, checks it is unused and deletes it with its
// versions, returning their storage keys.
func deleteSkill(ctx context.Context, q *dbsqlc.Queries, id string) ([]string, error) {
	if _, err := q.SkillLockByID(ctx, id); err != nil {
		return nil, err
	}
	if err := checkSkillUnused(ctx, q, id, ""); err != nil {
		return nil, err
	}
	keys, err := q.SkillVersionDeleteAll(ctx, id)
	if err != nil {
		return nil, err
	}
	_, err = q.SkillDeleteByID(ctx, id)
	return keys, err
}

// SkillVersionCreate stores a new version of an existing skill (v.SkillID),
// which becomes its latest; ErrNotFound if the skill is gone.
func (s *Store) SkillVersionCreate(ctx context.Context, v *SkillVersion) error {
	return s.inTx(ctx, "create skill version", func(q *dbsqlc.Queries) error {
		if _, err := q.SkillLockByID(ctx, v.SkillID); err != nil {
			return err
		}
		if err := insertSkillVersion(ctx, q, v); err != nil {
			return err
		}
		return q.SkillTouch(ctx, dbsqlc.SkillTouchParams{ID: v.SkillID, UpdatedAt: v.CreatedAt})
	})
}

// SkillVersionGet returns a version of a skill, or ErrNotFound. The
// version "latest" is the skill's newest.
func (s *Store) SkillVersionGet(ctx context.Context, skillID, versionID string) (*SkillVersion, error) {
	var r dbsqlc.SkillVersion
	var err error
	if versionID == "latest" {
		r, err = s.q.SkillVersionLatest(ctx, skillID)
	} else {
		r, err = s.q.SkillVersionGet(ctx, dbsqlc.SkillVersionGetParams{SkillID: skillID, ID: versionID})
	}
	if err != nil {
		return nil, mapErr("get skill version", err)
	}
	v := skillVersionFromRow(r)
	return &v, nil
}

// SkillVersionList returns up to limit versions of a skill, newest first,
// after the cursor, and whether more follow.
func (s *Store) SkillVersionList(ctx context.Context, skillID string, after *Cursor, limit int) ([]SkillVersion, bool, error) {
	arg := dbsqlc.SkillVersionListParams{SkillID: skillID, RowLimit: int32(limit + 1)} //nolint:gosec // limits are small
	if after != nil {
		arg.AfterCreatedAt, arg.AfterID = &after.CreatedAt, after.ID
	}
	rows, err := s.q.SkillVersionList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list skill versions", err)
	}
	out := make([]SkillVersion, 0, len(rows))
	for _, r := range rows {
		out = append(out, skillVersionFromRow(r))
	}
	page, more := trim(out, limit)
	return page, more, nil
}

// SkillVersionDelete deletes a version and returns the storage key of its
// bytes, which the caller deletes: ErrNotFound if there is no such
// version, ErrLastSkillVersion if it is the skill's only one, a
// *SkillInUseError while the current version of a non-archived agent pins
// it.
func (s *Store) SkillVersionDelete(ctx context.Context, skillID, versionID string, now time.Time) (string, error) {
	var key string
	err := s.inTx(ctx, "delete skill version", func(q *dbsqlc.Queries) error {
		if _, err := q.SkillLockByID(ctx, skillID); err != nil {
			return err
		}
		if _, err := q.SkillVersionGet(ctx, dbsqlc.SkillVersionGetParams{SkillID: skillID, ID: versionID}); err != nil {
			return err
		}
		n, err := q.SkillVersionCount(ctx, skillID)
		if err != nil {
			return err
		}
		if n <= 1 {
			return ErrLastSkillVersion
		}
		if err := checkSkillUnused(ctx, q, skillID, versionID); err != nil {
			return err
		}
		if key, err = q.SkillVersionDelete(ctx, dbsqlc.SkillVersionDeleteParams{SkillID: skillID, ID: versionID}); err != nil {
			return err
		}
		return q.SkillTouch(ctx, dbsqlc.SkillTouchParams{ID: skillID, UpdatedAt: now})
	})
	return key, err
}
