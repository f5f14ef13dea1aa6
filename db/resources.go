package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// Resource types.
const (
	ResourceFile       = "file"
	ResourceRepository = "github_repository"
	// ResourceSkill is one skill of the session's agent snapshot, written
	// at session creation (SessionCreateParams.Skills) and mounted under
	// SkillsMountDir. Skill resources are hidden from clients: the
	// client-facing calls (ResourceGet, ResourceList, ResourcesOfSessions,
	// ResourceSetToken, ResourceDelete) and MaxResourcesPerSession ignore
	// them; workers see them (ResourcesForWorker, RunState).
	ResourceSkill = "skill"
	// ResourceMemoryStore is a memory store attached to the session
	// (MemoryStoreID, Access, Instructions, StoreName, StoreDescription),
	// synced with the sandbox through MemoryReadForSession and
	// MemorySyncApply.
	ResourceMemoryStore = "memory_store"
)

// Access of a memory_store resource.
const (
	AccessReadWrite = "read_write"
	AccessReadOnly  = "read_only"
)

// SkillsMountDir is where a session's skills are placed in its sandbox,
// one folder per skill name; client resources cannot be mounted under it.
const SkillsMountDir = "/mnt/session/skills"

// MaxResourcesPerSession bounds a session's live resources.
const MaxResourcesPerSession = 100

// ErrTooManyResources reports an add beyond MaxResourcesPerSession.
var ErrTooManyResources = fmt.Errorf("a session holds at most %d resources: %w", MaxResourcesPerSession, ErrConflict)

// ErrMountTaken reports a resource whose mount path another live resource
// of the session already uses.
var ErrMountTaken = fmt.Errorf("mount path already used by another resource: %w", ErrConflict)

// Checkout is what a repository resource checks out: a branch (Name) or a
// commit (SHA); nil is the remote's default branch.
type Checkout struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
	SHA  string `json:"sha,omitempty"`
}

// Resource is a session resource: a file (the session's own copy, FileID)
// or a repository (URL, Checkout, a sealed token) materialized into the
// session's sandbox at MountPath.
type Resource struct {
	ID        string
	SessionID string
	Type      string
	MountPath string
	// FileID is the session's copy of the file (file resources).
	FileID string
	// URL and Checkout describe a repository.
	URL      string
	Checkout *Checkout
	// TokenSealed is the repository's authorization token, sealed by the
	// caller (nil: none).
	TokenSealed []byte
	// SkillID and SkillVersionID name a skill resource's version;
	// SkillName and SkillDescription are that version's (set by worker
	// reads only; the description is empty once the version is deleted).
	SkillID          string
	SkillVersionID   string
	SkillName        string
	SkillDescription string
	// MemoryStoreID, Access (AccessReadWrite or AccessReadOnly),
	// Instructions, and the store's name and description as attached
	// describe a memory_store resource.
	MemoryStoreID    string
	Access           string
	Instructions     string
	StoreName        string
	StoreDescription string
	// Version counts what the sandbox must hold; MaterializedVersion is
	// what it holds (0: nothing yet).
	Version             int64
	MaterializedVersion int64
	CreatedAt           time.Time
	UpdatedAt           time.Time
	// DeletedAt is set on a resource deleted by the client and not yet
	// removed from the sandbox (only workers see such resources).
	DeletedAt *time.Time
}

// ResourceCreate is a resource to add. For a file, SourceFileID names the
// file to copy for the session and ID names the copy's file id in FileID.
type ResourceCreate struct {
	ID           string
	Type         string
	MountPath    string
	SourceFileID string
	FileID       string
	URL          string
	Checkout     *Checkout
	TokenSealed  []byte
	// MemoryStoreID, Access, Instructions, StoreName and
	// StoreDescription describe a memory_store resource.
	MemoryStoreID    string
	Access           string
	Instructions     string
	StoreName        string
	StoreDescription string
}

func resourceFromRow(r dbsqlc.SessionResource) (*Resource, error) {
	out := &Resource{ID: r.ID, SessionID: r.SessionID, Type: r.Type, MountPath: r.MountPath, TokenSealed: r.TokenSealed,
		Version: r.Version, MaterializedVersion: r.MaterializedVersion, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, DeletedAt: r.DeletedAt}
	if r.FileID != nil {
		out.FileID = *r.FileID
	}
	if r.Url != nil {
		out.URL = *r.Url
	}
	if r.SkillID != nil {
		out.SkillID = *r.SkillID
	}
	if r.SkillVersionID != nil {
		out.SkillVersionID = *r.SkillVersionID
	}
	out.MemoryStoreID, out.Access, out.Instructions = deref(r.MemoryStoreID), deref(r.Access), deref(r.Instructions)
	out.StoreName, out.StoreDescription = deref(r.StoreName), deref(r.StoreDescription)
	if len(r.Checkout) > 0 && string(r.Checkout) != "null" {
		out.Checkout = &Checkout{}
		if err := json.Unmarshal(r.Checkout, out.Checkout); err != nil {
			return nil, fmt.Errorf("decode checkout of resource %s: %w", r.ID, err)
		}
	}
	return out, nil
}

func resourcesFromRows(rows []dbsqlc.SessionResource) ([]*Resource, error) {
	out := make([]*Resource, 0, len(rows))
	for _, r := range rows {
		res, err := resourceFromRow(r)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// insertResources adds resources to a session inside a transaction: file
// resources get their session copy first. Mount paths must be free.
func (s *Store) insertResources(ctx context.Context, q *dbsqlc.Queries, sessionID string, now time.Time, rs []ResourceCreate) ([]*Resource, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	n, err := q.ResourceCountLive(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if int(n)+len(rs) > MaxResourcesPerSession {
		return nil, ErrTooManyResources
	}
	out := make([]*Resource, 0, len(rs))
	for i, rc := range rs {
		// Resources list by (created_at, id): those of one request keep
		// their order through distinct microseconds.
		at := now.Add(time.Duration(i) * time.Microsecond)
		var fileID *string
		if rc.Type == ResourceFile {
			if err := fileCopyTx(ctx, q, rc.SourceFileID, rc.FileID, sessionID, at); err != nil {
				return nil, err
			}
			fileID = &rc.FileID
		}
		var checkout []byte
		if rc.Checkout != nil {
			checkout, _ = json.Marshal(rc.Checkout) // a Checkout always marshals
		}
		row, err := q.ResourceInsert(ctx, dbsqlc.ResourceInsertParams{ID: rc.ID, SessionID: sessionID, Type: rc.Type, MountPath: rc.MountPath,
			FileID: fileID, Url: optString(rc.URL), Checkout: checkout, TokenSealed: rc.TokenSealed, CreatedAt: at,
			MemoryStoreID: optString(rc.MemoryStoreID), Access: optString(rc.Access), Instructions: memoryText(rc),
			StoreName: memoryField(rc, rc.StoreName), StoreDescription: memoryField(rc, rc.StoreDescription)})
		if err != nil {
			if errors.Is(mapErr("", err), ErrConflict) {
				return nil, fmt.Errorf("resource at %s: %w", rc.MountPath, ErrMountTaken)
			}
			return nil, err
		}
		res, err := resourceFromRow(row)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// ErrArchived reports a change to an archived session.
var ErrArchived = fmt.Errorf("session is archived: %w", ErrConflict)

// ResourceAdd adds a resource to a live session. It returns ErrNotFound
// for a missing session (or source file), ErrDeleting, ErrArchived,
// ErrMountTaken and ErrTooManyResources.
func (s *Store) ResourceAdd(ctx context.Context, sessionID string, rc ResourceCreate, now time.Time) (*Resource, error) {
	var out *Resource
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		row, err := q.SessionLock(ctx, sessionID)
		if err != nil {
			return err
		}
		if row.DeletingAt != nil {
			return ErrDeleting
		}
		if row.ArchivedAt != nil {
			return ErrArchived
		}
		rs, err := s.insertResources(ctx, q, sessionID, now, []ResourceCreate{rc})
		if err != nil {
			return err
		}
		out = rs[0]
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrDeleting) || errors.Is(err, ErrConflict) {
			return nil, err
		}
		return nil, mapErr("add resource", err)
	}
	return out, nil
}

// ResourceGet returns a live resource of a session, or ErrNotFound.
func (s *Store) ResourceGet(ctx context.Context, sessionID, id string) (*Resource, error) {
	row, err := s.q.ResourceGetLive(ctx, dbsqlc.ResourceGetLiveParams{SessionID: sessionID, ID: id})
	if err != nil {
		return nil, mapErr("get resource", err)
	}
	return resourceFromRow(row)
}

// ResourceList returns up to limit live resources of a session, oldest
// first, after the cursor (nil: from the start).
func (s *Store) ResourceList(ctx context.Context, sessionID string, after *Cursor, limit int) ([]*Resource, error) {
	p := dbsqlc.ResourceListLiveParams{SessionID: sessionID, RowLimit: int32(limit)}
	if after != nil {
		p.AfterCreated, p.AfterID = &after.CreatedAt, after.ID
	}
	rows, err := s.q.ResourceListLive(ctx, p)
	if err != nil {
		return nil, mapErr("list resources", err)
	}
	return resourcesFromRows(rows)
}

// ResourcesOfSessions returns the live resources of each session, oldest
// first.
func (s *Store) ResourcesOfSessions(ctx context.Context, sessionIDs []string) (map[string][]*Resource, error) {
	out := map[string][]*Resource{}
	if len(sessionIDs) == 0 {
		return out, nil
	}
	rows, err := s.q.ResourceListLiveForSessions(ctx, sessionIDs)
	if err != nil {
		return nil, mapErr("list resources", err)
	}
	rs, err := resourcesFromRows(rows)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		out[r.SessionID] = append(out[r.SessionID], r)
	}
	return out, nil
}

// ResourcesForWorker returns what a worker must reconcile in the sandbox:
// live resources and deleted ones still materialized.
func (s *Store) ResourcesForWorker(ctx context.Context, sessionID string) ([]*Resource, error) {
	if _, err := s.q.SessionGetByID(ctx, sessionID); err != nil {
		return nil, mapErr("get session", err)
	}
	return s.ResourcesOfSession(ctx, sessionID)
}

// ResourcesOfSession is ResourcesForWorker without the check that the
// session exists (one query fewer, for a caller that has just read it):
// a session that does not exist has no resources.
func (s *Store) ResourcesOfSession(ctx context.Context, sessionID string) ([]*Resource, error) {
	rows, err := s.q.ResourceListForWorker(ctx, sessionID)
	if err != nil {
		return nil, mapErr("list resources", err)
	}
	return workerResourcesFromRows(rows)
}

func workerResourcesFromRows(rows []dbsqlc.ResourceListForWorkerRow) ([]*Resource, error) {
	out := make([]*Resource, 0, len(rows))
	for _, r := range rows {
		res, err := resourceFromRow(r.SessionResource)
		if err != nil {
			return nil, err
		}
		res.SkillName, res.SkillDescription = r.SkillName, r.SkillDescription
		out = append(out, res)
	}
	return out, nil
}

// SessionSkill is a skill resource to write at session creation.
type SessionSkill struct {
	// ResourceID is the new resource's id.
	ResourceID string
	SkillID    string
	VersionID  string
	// Name is the skill's name: the resource is mounted at
	// SkillsMountDir/Name.
	Name string
}

// insertSkillResources writes a new session's skill resources, after its
// client resources (which they follow in listing order).
func insertSkillResources(ctx context.Context, q *dbsqlc.Queries, sessionID string, now time.Time, skills []SessionSkill) error {
	for i, sk := range skills {
		at := now.Add(time.Duration(MaxResourcesPerSession+i) * time.Microsecond)
		err := q.ResourceInsertSkill(ctx, dbsqlc.ResourceInsertSkillParams{ID: sk.ResourceID, SessionID: sessionID,
			MountPath: SkillsMountDir + "/" + sk.Name, SkillID: &sk.SkillID, SkillVersionID: &sk.VersionID, CreatedAt: at})
		if err != nil {
			if errors.Is(mapErr("", err), ErrConflict) {
				return fmt.Errorf("skill %s at %s/%s: %w", sk.SkillID, SkillsMountDir, sk.Name, ErrMountTaken)
			}
			return err
		}
	}
	return nil
}

// SkillResource returns a live skill resource of a session, or
// ErrNotFound (no such resource, or not a skill).
func (s *Store) SkillResource(ctx context.Context, sessionID, id string) (*Resource, error) {
	row, err := s.q.ResourceGetSkill(ctx, dbsqlc.ResourceGetSkillParams{SessionID: sessionID, ID: id})
	if err != nil {
		return nil, mapErr("get skill resource", err)
	}
	return resourceFromRow(row)
}

// SkillReadable reports whether skillID is one of the skills of session
// sessionID or, with sessionID empty, of a self-hosted session of
// environment environmentID: what a self-hosted worker's credential may
// read of the Skills API.
func (s *Store) SkillReadable(ctx context.Context, skillID, sessionID, environmentID string) (bool, error) {
	arg := dbsqlc.SkillReadableParams{SkillID: skillID}
	if sessionID != "" {
		arg.SessionID = &sessionID
	} else {
		arg.EnvironmentID = &environmentID
	}
	ok, err := s.q.SkillReadable(ctx, arg)
	if err != nil {
		return false, mapErr("check skill access", err)
	}
	return ok, nil
}

// ResourceSetToken replaces a live resource's sealed token.
func (s *Store) ResourceSetToken(ctx context.Context, sessionID, id string, sealed []byte, now time.Time) (*Resource, error) {
	row, err := s.q.ResourceSetToken(ctx, dbsqlc.ResourceSetTokenParams{SessionID: sessionID, ID: id, TokenSealed: sealed, UpdatedAt: now})
	if err != nil {
		return nil, mapErr("update resource", err)
	}
	return resourceFromRow(row)
}

// ResourceDelete deletes a live resource. One never materialized goes at
// once; one in the sandbox stays, hidden from clients, until a worker has
// removed it (ResourceMarkMaterialized). It returns the deleted resource
// (whose FileID, for a file, is the session copy the caller deletes).
func (s *Store) ResourceDelete(ctx context.Context, sessionID, id string, now time.Time) (*Resource, error) {
	var out *Resource
	err := s.inTx(ctx, "delete resource", func(q *dbsqlc.Queries) error {
		row, err := q.ResourceDeleteUnmaterialized(ctx, dbsqlc.ResourceDeleteUnmaterializedParams{SessionID: sessionID, ID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			row, err = q.ResourceSoftDelete(ctx, dbsqlc.ResourceSoftDeleteParams{SessionID: sessionID, ID: id, DeletedAt: &now})
		} else if err == nil && row.Type == ResourceMemoryStore {
			err = q.MemoryBaseClear(ctx, dbsqlc.MemoryBaseClearParams{SessionID: sessionID, ResourceID: id})
		}
		if err != nil {
			return err
		}
		out, err = resourceFromRow(row)
		return err
	})
	return out, err
}

// ResourceMarkMaterialized records that the sandbox holds version of a
// live resource, or forgets a deleted one the worker removed. It is
// idempotent; an unknown resource is not an error.
func (s *Store) ResourceMarkMaterialized(ctx context.Context, sessionID, id string, version int64) error {
	n, err := s.q.ResourceMarkMaterialized(ctx, dbsqlc.ResourceMarkMaterializedParams{SessionID: sessionID, ID: id, Version: version})
	if err != nil {
		return mapErr("mark resource materialized", err)
	}
	if n == 0 {
		_, err = s.q.ResourcePurgeDeleted(ctx, dbsqlc.ResourcePurgeDeletedParams{SessionID: sessionID, ID: id})
		if err == nil { // the base of a memory_store resource goes with it
			err = s.q.MemoryBaseClear(ctx, dbsqlc.MemoryBaseClearParams{SessionID: sessionID, ResourceID: id})
		}
		return mapErr("purge deleted resource", err)
	}
	return nil
}

// ResourceToken returns a resource's sealed token (nil: none), deleted or
// not; ErrNotFound when there is no such resource.
func (s *Store) ResourceToken(ctx context.Context, sessionID, id string) ([]byte, error) {
	row, err := s.q.ResourceGetAny(ctx, dbsqlc.ResourceGetAnyParams{SessionID: sessionID, ID: id})
	if err != nil {
		return nil, mapErr("get resource", err)
	}
	return row.TokenSealed, nil
}

// ResourceTokenPurpose is the purpose a resource's token is sealed for
// (package envelope): it binds the ciphertext to its row.
func ResourceTokenPurpose(resourceID string) string {
	return "session_resource/" + resourceID + "/authorization_token"
}

// SealedToken is one stored sealed token, for key rotation.
type SealedToken struct {
	ResourceID string
	Sealed     []byte
}

// ResourceTokens returns every stored sealed token.
func (s *Store) ResourceTokens(ctx context.Context) ([]SealedToken, error) {
	rows, err := s.q.ResourceTokensAll(ctx)
	if err != nil {
		return nil, mapErr("list sealed tokens", err)
	}
	out := make([]SealedToken, 0, len(rows))
	for _, r := range rows {
		out = append(out, SealedToken{ResourceID: r.ID, Sealed: r.TokenSealed})
	}
	return out, nil
}

// ResourceRewrapToken replaces a sealed token by its re-wrapped form,
// unless it changed meanwhile (then it reports false).
func (s *Store) ResourceRewrapToken(ctx context.Context, id string, old, rewrapped []byte) (bool, error) {
	n, err := s.q.ResourceRewrapToken(ctx, dbsqlc.ResourceRewrapTokenParams{ID: id, OldSealed: old, NewSealed: rewrapped})
	if err != nil {
		return false, mapErr("rewrap token", err)
	}
	return n == 1, nil
}

// fileCopyTx stores, inside a transaction, a session-scoped copy of file
// srcID under newID sharing its bytes (see FileCopyForSession).
func fileCopyTx(ctx context.Context, q *dbsqlc.Queries, srcID, newID, sessionID string, now time.Time) error {
	row, err := q.FileLockShare(ctx, srcID)
	if err != nil {
		return fmt.Errorf("file %s: %w", srcID, mapErr("copy file", err))
	}
	src := fileFromRow(row)
	cp := File{ID: newID, Filename: src.Filename, MimeType: src.MimeType, SizeBytes: src.SizeBytes, SHA256: src.SHA256,
		StorageKey: src.StorageKey, ScopeSessionID: sessionID, Origin: FileOriginSessionCopy, CreatedAt: now, ExpiresAt: src.ExpiresAt}
	if src.Expired(now) {
		return fmt.Errorf("file %s has expired: %w", srcID, ErrNotFound)
	}
	return q.FileInsert(ctx, fileInsertParams(&cp))
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// memoryText is a memory_store resource's instructions (nil for other
// types): an empty string is stored as such.
func memoryText(rc ResourceCreate) *string {
	if rc.Type != ResourceMemoryStore {
		return nil
	}
	return &rc.Instructions
}

// memoryField is v for a memory_store resource, nil for other types.
func memoryField(rc ResourceCreate, v string) *string {
	if rc.Type != ResourceMemoryStore {
		return nil
	}
	return &v
}
