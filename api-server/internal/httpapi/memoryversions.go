package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// actorResponse is the wire form of an actor (BetaManagedAgentsActorUnion):
// api_actor with api_key_id, or session_actor with session_id.
type actorResponse struct {
	Type      string `json:"type"`
	APIKeyID  string `json:"api_key_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
}

func toActorResponse(a db.Actor) *actorResponse {
	if a.Type == db.ActorSession {
		return &actorResponse{Type: a.Type, SessionID: a.ID}
	}
	return &actorResponse{Type: a.Type, APIKeyID: a.ID}
}

// memoryVersionResponse is the wire form of a memory version
// (BetaManagedAgentsMemoryVersion).
type memoryVersionResponse struct {
	Type             string         `json:"type"`
	ID               string         `json:"id"`
	MemoryStoreID    string         `json:"memory_store_id"`
	MemoryID         string         `json:"memory_id"`
	Operation        string         `json:"operation"`
	Path             *string        `json:"path"`
	Content          *string        `json:"content"`
	ContentSHA256    *string        `json:"content_sha256"`
	ContentSizeBytes *int64         `json:"content_size_bytes"`
	CreatedBy        *actorResponse `json:"created_by"`
	CreatedAt        time.Time      `json:"created_at"`
	RedactedAt       *time.Time     `json:"redacted_at"`
	RedactedBy       *actorResponse `json:"redacted_by"`
}

func toMemoryVersionResponse(v *db.MemoryVersion, view string) *memoryVersionResponse {
	out := &memoryVersionResponse{Type: "memory_version", ID: v.ID, MemoryStoreID: v.StoreID, MemoryID: v.MemoryID,
		Operation: v.Operation, Path: v.Path, ContentSHA256: v.SHA256, ContentSizeBytes: v.SizeBytes,
		CreatedBy: toActorResponse(v.CreatedBy), CreatedAt: v.CreatedAt, RedactedAt: v.RedactedAt}
	if view == viewFull {
		out.Content = v.Content
	}
	if v.RedactedBy != nil {
		out.RedactedBy = toActorResponse(*v.RedactedBy)
	}
	return out
}

func memoryVersionNotFound(storeID, id string) error {
	return apierror.NotFoundf("memory version %q not found in memory store %q", id, storeID)
}

// memoryVersionOfPath returns the store and version ids of the path.
func (a *API) memoryVersionOfPath(c echo.Context) (storeID, versionID string, err error) {
	if storeID, err = a.memoryStoreOfPath(c, "id"); err != nil {
		return "", "", err
	}
	versionID = c.Param("version")
	if !ids.Valid(ids.MemoryVersion, versionID) {
		return "", "", memoryVersionNotFound(storeID, versionID)
	}
	return storeID, versionID, nil
}

// memoryVersionFilter reads a version list's filters. A filter on a
// service account (which Mango has none of) selects nothing.
func memoryVersionFilter(c echo.Context, storeID string) (db.MemoryVersionFilter, bool, error) {
	f := db.MemoryVersionFilter{StoreID: storeID, MemoryID: c.QueryParam("memory_id")}
	if f.MemoryID != "" && !ids.Valid(ids.Memory, f.MemoryID) {
		return f, false, apierror.Invalid("memory_id: must be a memory id (mem_...), got %q", f.MemoryID)
	}
	switch op := c.QueryParam("operation"); op {
	case "", db.MemoryCreated, db.MemoryModified, db.MemoryDeleted:
		f.Operation = op
	default:
		return f, false, apierror.Invalid("operation: must be created, modified or deleted, got %q", op)
	}
	var actors []db.Actor
	if v := c.QueryParam("api_key_id"); v != "" {
		actors = append(actors, db.Actor{Type: db.ActorAPI, ID: v})
	}
	if v := c.QueryParam("session_id"); v != "" {
		actors = append(actors, db.Actor{Type: db.ActorSession, ID: v})
	}
	none := c.QueryParam("service_account_id") != ""
	if len(actors) > 1 || (none && len(actors) > 0) {
		return f, false, apierror.Invalid("pass at most one of api_key_id, session_id and service_account_id: a version has one author")
	}
	if len(actors) == 1 {
		f.Actor = actors[0]
	}
	var err error
	if f.CreatedGTE, err = parseTimeParam(c, "created_at[gte]"); err != nil {
		return f, false, err
	}
	if f.CreatedLTE, err = parseTimeParam(c, "created_at[lte]"); err != nil {
		return f, false, err
	}
	return f, none, nil
}

func (a *API) memoryVersionList(c echo.Context) error {
	storeID, err := a.memoryStoreOfPath(c, "id")
	if err != nil {
		return err
	}
	view, err := parseView(c, viewBasic)
	if err != nil {
		return err
	}
	page, err := parsePage(c, maxPageLimit)
	if err != nil {
		return err
	}
	if view == viewFull && page.limit > maxFullViewLimit {
		page.limit = maxFullViewLimit
	}
	after, err := pageAfter(page.cursor)
	if err != nil {
		return err
	}
	f, none, err := memoryVersionFilter(c, storeID)
	if err != nil {
		return err
	}
	var versions []*db.MemoryVersion
	more := false
	if !none {
		if versions, more, err = a.deps.Store.MemoryVersionList(c.Request().Context(), f, after, page.limit); err != nil {
			return err
		}
	}
	return writeList(c, versions, more, func(v *db.MemoryVersion) *memoryVersionResponse { return toMemoryVersionResponse(v, view) },
		func(v *db.MemoryVersion) string { return timeCursor(v.CreatedAt, v.ID) })
}

func (a *API) memoryVersionGet(c echo.Context) error {
	storeID, id, err := a.memoryVersionOfPath(c)
	if err != nil {
		return err
	}
	view, err := parseView(c, viewFull)
	if err != nil {
		return err
	}
	v, err := a.deps.Store.MemoryVersionGet(c.Request().Context(), storeID, id)
	if err != nil {
		return notFoundAs(err, memoryVersionNotFound(storeID, id))
	}
	return c.JSON(http.StatusOK, toMemoryVersionResponse(v, view))
}

func (a *API) memoryVersionRedact(c echo.Context) error {
	storeID, id, err := a.memoryVersionOfPath(c)
	if err != nil {
		return err
	}
	v, err := a.deps.Store.MemoryVersionRedact(c.Request().Context(), storeID, id, memoryActor(c), a.now())
	if err != nil {
		return notFoundAs(memoryConflict(storeID, err), memoryVersionNotFound(storeID, id))
	}
	return c.JSON(http.StatusOK, toMemoryVersionResponse(v, viewFull))
}
