package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/db"
)

// Session directories as the agent sees them (the worker's sandbox
// package holds the same constants).
const (
	uploadsDir   = "/mnt/session/uploads"
	workspaceDir = "/workspace"
)

// resourceResponse is the wire form of a session resource: a file
// (BetaManagedAgentsFileResource), a repository
// (BetaManagedAgentsGitHubRepositoryResource) or a memory store
// (memoryResourceResponse). A repository's token is never returned.
type resourceResponse struct {
	Type      string       `json:"type"`
	ID        string       `json:"id"`
	FileID    string       `json:"file_id,omitempty"`
	URL       string       `json:"url,omitempty"`
	Checkout  *db.Checkout `json:"checkout,omitempty"`
	MountPath string       `json:"mount_path"`
	CreatedAt time.Time    `json:"created_at"`
	UpdatedAt time.Time    `json:"updated_at"`
	// memory is the whole wire form of a memory_store resource.
	memory *memoryResourceResponse
}

// MarshalJSON writes checkout: null for a repository without one, and no
// checkout member for a file.
func (r *resourceResponse) MarshalJSON() ([]byte, error) {
	if r.memory != nil {
		return json.Marshal(r.memory)
	}
	type plain resourceResponse
	b, err := json.Marshal((*plain)(r))
	if err != nil || r.Type != db.ResourceRepository || r.Checkout != nil {
		return b, err
	}
	return append(b[:len(b)-1], `,"checkout":null}`...), nil
}

// toResourceResponse is a resource's wire form; selfHosted is whether its
// session is self-hosted (a memory store's mount_path is then null).
func toResourceResponse(r *db.Resource, selfHosted bool) *resourceResponse {
	if r.Type == db.ResourceMemoryStore {
		return &resourceResponse{Type: r.Type, ID: r.ID, memory: toMemoryResourceResponse(r, selfHosted)}
	}
	return &resourceResponse{Type: r.Type, ID: r.ID, FileID: r.FileID, URL: r.URL, Checkout: r.Checkout, MountPath: r.MountPath,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

func toResourceResponses(rs []*db.Resource, selfHosted bool) []*resourceResponse {
	out := make([]*resourceResponse, 0, len(rs))
	for _, r := range rs {
		out = append(out, toResourceResponse(r, selfHosted))
	}
	return out
}

// resourceInput is one resource as a client sends it (Sessions.New
// resources[], Resources.Add).
type resourceInput struct {
	Type               string          `json:"type"`
	FileID             *string         `json:"file_id"`
	MountPath          *string         `json:"mount_path"`
	URL                *string         `json:"url"`
	Checkout           json.RawMessage `json:"checkout"`
	AuthorizationToken *string         `json:"authorization_token"`
	MemoryStoreID      *string         `json:"memory_store_id"`
	Access             *string         `json:"access"`
	Instructions       *string         `json:"instructions"`
}

var (
	shaPattern    = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)
	branchPattern = regexp.MustCompile(`^[A-Za-z0-9._/+-]{1,255}$`)
)

// MaxTokenBytes bounds a repository authorization token.
const MaxTokenBytes = 4096

// parseResources validates resources[] of a session create; memory_store
// resources get their mount paths, deduplicated among them.
func (a *API) parseResources(ctx context.Context, raw json.RawMessage, where string) ([]db.ResourceCreate, error) {
	var list []json.RawMessage
	if err := jsonx.Decode(raw, &list, where); err != nil {
		return nil, err
	}
	if len(list) > db.MaxResourcesPerSession {
		return nil, apierror.Invalid("%s: at most %d resources are allowed, got %d", where, db.MaxResourcesPerSession, len(list))
	}
	out := make([]db.ResourceCreate, 0, len(list))
	mounts := map[string]int{}
	for i, r := range list {
		p := fmt.Sprintf("%s[%d]", where, i)
		rc, err := a.parseResource(ctx, r, p)
		if err != nil {
			return nil, err
		}
		if j, dup := mounts[rc.MountPath]; dup {
			return nil, apierror.Invalid("%s.mount_path: %s is also the mount path of %s[%d]", p, rc.MountPath, where, j)
		}
		if rc.Type != db.ResourceMemoryStore {
			mounts[rc.MountPath] = i
		}
		out = append(out, rc)
	}
	taken := make(map[string]bool, len(mounts))
	for m := range mounts {
		taken[m] = true
	}
	assignMemoryMounts(out, taken)
	return out, nil
}

// parseResource validates one resource; p is its JSON path for errors.
func (a *API) parseResource(ctx context.Context, raw json.RawMessage, p string) (db.ResourceCreate, error) {
	var rc db.ResourceCreate
	var in resourceInput
	if err := jsonx.DecodeObject(raw, &in, p); err != nil {
		return rc, err
	}
	rc.ID = ids.New(ids.Resource)
	switch in.Type {
	case db.ResourceFile:
		if in.URL != nil || in.Checkout != nil || in.AuthorizationToken != nil {
			return rc, apierror.Invalid("%s: a file resource takes file_id and mount_path only", p)
		}
		if in.FileID == nil || *in.FileID == "" {
			return rc, apierror.Invalid("%s.file_id: is required", p)
		}
		if err := a.checkSourceFile(ctx, *in.FileID, p+".file_id"); err != nil {
			return rc, err
		}
		mount, err := mountPath(in.MountPath, *in.FileID, uploadsDir, []string{uploadsDir, workspaceDir}, p+".mount_path")
		if err != nil {
			return rc, err
		}
		rc.Type, rc.SourceFileID, rc.FileID, rc.MountPath = db.ResourceFile, *in.FileID, ids.New(ids.File), mount
	case db.ResourceRepository:
		if in.FileID != nil {
			return rc, apierror.Invalid("%s: a github_repository resource takes url, checkout, mount_path and authorization_token", p)
		}
		u, name, err := repositoryURL(in.URL, p+".url")
		if err != nil {
			return rc, err
		}
		checkout, err := parseCheckout(in.Checkout, p+".checkout")
		if err != nil {
			return rc, err
		}
		mount, err := mountPath(in.MountPath, name, workspaceDir, []string{workspaceDir}, p+".mount_path")
		if err != nil {
			return rc, err
		}
		rc.Type, rc.URL, rc.Checkout, rc.MountPath = db.ResourceRepository, u, checkout, mount
		if in.AuthorizationToken != nil && *in.AuthorizationToken != "" {
			if rc.TokenSealed, err = a.sealToken(*in.AuthorizationToken, rc.ID, p+".authorization_token"); err != nil {
				return rc, err
			}
		}
	case db.ResourceMemoryStore:
		mc, err := a.parseMemoryStoreResource(ctx, &in, p)
		if err != nil {
			return rc, err
		}
		mc.ID = rc.ID
		rc = mc
	case "":
		return rc, apierror.Invalid("%s.type: is required (file, github_repository or memory_store)", p)
	default:
		return rc, apierror.Invalid("%s.type: unknown resource type %q (supported: file, github_repository, memory_store)", p, in.Type)
	}
	return rc, nil
}

// checkSourceFile refuses a file id that names no live file.
func (a *API) checkSourceFile(ctx context.Context, id, p string) error {
	if !ids.Valid(ids.File, id) {
		return apierror.Invalid("%s: %q is not a file id", p, id)
	}
	live, err := a.liveFile(ctx, id)
	if err != nil {
		return err
	}
	if !live {
		return apierror.Invalid("%s: file %q not found", p, id)
	}
	return nil
}

// liveFile reports whether the file exists and has not expired.
func (a *API) liveFile(ctx context.Context, id string) (bool, error) {
	f, err := a.deps.Store.FileGet(ctx, id)
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !f.Expired(a.now()), nil
}

// mountPath resolves a resource's mount path: absent means base/name, a
// relative path lies under base, an absolute one must lie under one of
// allowed (not be one of them).
func mountPath(in *string, name, base string, allowed []string, p string) (string, error) {
	v := name
	if in != nil {
		v = *in
	}
	if v == "" {
		return "", apierror.Invalid("%s: must not be empty", p)
	}
	if len(v) > 1024 {
		return "", apierror.Invalid("%s: must be at most 1024 bytes", p)
	}
	for _, r := range v {
		if r == 0 || unicode.IsControl(r) {
			return "", apierror.Invalid("%s: must not contain control characters", p)
		}
	}
	for _, seg := range strings.Split(v, "/") {
		if seg == ".." {
			return "", apierror.Invalid("%s: must not contain '..' segments, got %q", p, v)
		}
	}
	if !path.IsAbs(v) {
		v = base + "/" + v
	}
	v = path.Clean(v)
	if v == db.SkillsMountDir || strings.HasPrefix(v, db.SkillsMountDir+"/") {
		return "", apierror.Invalid("%s: %q lies under %s, where the session's skills are placed", p, v, db.SkillsMountDir)
	}
	for _, dir := range allowed {
		if strings.HasPrefix(v, dir+"/") {
			return v, nil
		}
	}
	return "", apierror.Invalid("%s: %q must lie under %s", p, v, strings.Join(allowed, " or "))
}

// repositoryURL checks a clone URL and returns it with the repository's
// name (its last path segment without .git).
func repositoryURL(in *string, p string) (string, string, error) {
	if in == nil || *in == "" {
		return "", "", apierror.Invalid("%s: is required", p)
	}
	u, err := url.Parse(*in)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", "", apierror.Invalid("%s: must be an http or https URL of a repository, got %q", p, *in)
	}
	if u.User != nil {
		return "", "", apierror.Invalid("%s: must not carry credentials; pass authorization_token instead", p)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", "", apierror.Invalid("%s: must not have a query or fragment", p)
	}
	name := strings.TrimSuffix(path.Base(strings.TrimSuffix(u.Path, "/")), ".git")
	if name == "" || name == "." || name == "/" {
		return "", "", apierror.Invalid("%s: %q names no repository", p, *in)
	}
	return u.String(), name, nil
}

func parseCheckout(raw json.RawMessage, p string) (*db.Checkout, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c struct {
		Type string  `json:"type"`
		Name *string `json:"name"`
		SHA  *string `json:"sha"`
	}
	if err := jsonx.DecodeObject(raw, &c, p); err != nil {
		return nil, err
	}
	switch c.Type {
	case "branch":
		if c.Name == nil || !branchPattern.MatchString(*c.Name) || strings.Contains(*c.Name, "..") {
			return nil, apierror.Invalid("%s.name: must be a branch name", p)
		}
		return &db.Checkout{Type: "branch", Name: *c.Name}, nil
	case "commit":
		if c.SHA == nil || !shaPattern.MatchString(*c.SHA) {
			return nil, apierror.Invalid("%s.sha: must be a full commit SHA (40 lowercase hex digits)", p)
		}
		return &db.Checkout{Type: "commit", SHA: *c.SHA}, nil
	}
	return nil, apierror.Invalid("%s.type: must be branch or commit, got %q", p, c.Type)
}

func (a *API) sealToken(token, resourceID, p string) ([]byte, error) {
	if len(token) > MaxTokenBytes {
		return nil, apierror.Invalid("%s: must be at most %d bytes", p, MaxTokenBytes)
	}
	for _, r := range token {
		if unicode.IsControl(r) || r == ' ' {
			return nil, apierror.Invalid("%s: must not contain spaces or control characters", p)
		}
	}
	if a.deps.Secrets.Empty() {
		return nil, &apierror.Error{Status: http.StatusUnprocessableEntity, Type: apierror.InvalidRequest,
			Message: p + ": this server cannot store authorization tokens: it has no encryption key configured"}
	}
	sealed, err := a.deps.Secrets.Seal([]byte(token), db.ResourceTokenPurpose(resourceID))
	if err != nil {
		return nil, fmt.Errorf("seal authorization token: %w", err)
	}
	return sealed, nil
}

func resourceNotFound(id string) error { return apierror.NotFoundf("resource %q not found", id) }

// resourceError maps store errors of resource operations.
func resourceError(sessionID, resourceID string, err error) error {
	switch {
	case errors.Is(err, db.ErrArchived):
		return apierror.Conflictf("session %q is archived; its resources cannot change", sessionID)
	case errors.Is(err, db.ErrMountTaken):
		return apierror.Conflictf("%v", err)
	case errors.Is(err, db.ErrTooManyResources):
		return apierror.Conflictf("session %q already holds %d resources, the most allowed", sessionID, db.MaxResourcesPerSession)
	case errors.Is(err, db.ErrNotFound) && resourceID != "":
		return resourceNotFound(resourceID)
	}
	return sessionError(sessionID, err)
}

func resourceParams(c echo.Context) (string, string, error) {
	sid, err := sessionID(c)
	if err != nil {
		return "", "", err
	}
	rid, err := pathID(c, "rid", ids.Resource, resourceNotFound)
	return sid, rid, err
}

func (a *API) resourceAdd(c echo.Context) error {
	sid, err := sessionID(c)
	if err != nil {
		return err
	}
	body, err := a.readJSONBody(c, false)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	sess, err := a.deps.Store.SessionGet(ctx, sid)
	if err != nil {
		return sessionError(sid, err)
	}
	rc, err := a.parseResource(ctx, body, "")
	if err != nil {
		return err
	}
	var r *db.Resource
	if rc.Type == db.ResourceMemoryStore {
		r, err = a.addMemoryResource(ctx, sess, rc)
	} else {
		r, err = a.deps.Store.ResourceAdd(ctx, sid, rc, a.now())
	}
	if err != nil {
		return resourceError(sid, "", err)
	}
	return c.JSON(http.StatusOK, toResourceResponse(r, sess.SelfHosted))
}

func (a *API) resourceList(c echo.Context) error {
	sid, err := sessionID(c)
	if err != nil {
		return err
	}
	page, after, err := parseKeysetPage(c, maxPageLimit)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	sess, err := a.deps.Store.SessionGet(ctx, sid)
	if err != nil {
		return sessionError(sid, err)
	}
	rs, err := a.deps.Store.ResourceList(ctx, sid, after, page.limit+1)
	if err != nil {
		return err
	}
	more := len(rs) > page.limit
	conv := func(r *db.Resource) *resourceResponse { return toResourceResponse(r, sess.SelfHosted) }
	return writeList(c, rs[:min(len(rs), page.limit)], more, conv,
		func(r *db.Resource) string { return timeCursor(r.CreatedAt, r.ID) })
}

func (a *API) resourceGet(c echo.Context) error {
	sid, rid, err := resourceParams(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	r, err := a.deps.Store.ResourceGet(ctx, sid, rid)
	if err != nil {
		return resourceError(sid, rid, err)
	}
	selfHosted := false
	if r.Type == db.ResourceMemoryStore {
		sess, err := a.deps.Store.SessionGet(ctx, sid)
		if err != nil {
			return sessionError(sid, err)
		}
		selfHosted = sess.SelfHosted
	}
	return c.JSON(http.StatusOK, toResourceResponse(r, selfHosted))
}

// resourceUpdate replaces a repository resource's authorization token
// (the only mutable member, as the SDK's update params say).
func (a *API) resourceUpdate(c echo.Context) error {
	sid, rid, err := resourceParams(c)
	if err != nil {
		return err
	}
	var in struct {
		AuthorizationToken *string `json:"authorization_token"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if in.AuthorizationToken == nil {
		return apierror.Invalid("authorization_token: is required")
	}
	ctx := c.Request().Context()
	cur, err := a.deps.Store.ResourceGet(ctx, sid, rid)
	if err != nil {
		return resourceError(sid, rid, err)
	}
	if cur.Type != db.ResourceRepository {
		return apierror.Invalid("authorization_token: resource %q is a %s resource; only github_repository resources have a token", rid, cur.Type)
	}
	var sealed []byte
	if *in.AuthorizationToken != "" {
		if sealed, err = a.sealToken(*in.AuthorizationToken, rid, "authorization_token"); err != nil {
			return err
		}
	}
	r, err := a.deps.Store.ResourceSetToken(ctx, sid, rid, sealed, a.now())
	if err != nil {
		return resourceError(sid, rid, err)
	}
	return c.JSON(http.StatusOK, toResourceResponse(r, false))
}

func (a *API) resourceDelete(c echo.Context) error {
	sid, rid, err := resourceParams(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	r, err := a.deps.Store.ResourceDelete(ctx, sid, rid, a.now())
	if err != nil {
		return resourceError(sid, rid, err)
	}
	if r.FileID != "" {
		a.deleteFile(ctx, r.FileID)
	}
	return c.JSON(http.StatusOK, map[string]string{"id": rid, "type": "session_resource_deleted"})
}
