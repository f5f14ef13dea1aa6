package httpapi

import (
	"errors"
	"net/http"
	"time"
	"unicode"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/db"
)

// The Memory Stores API (issue 33): stores (this file), their memories
// (memories.go) and the memories' versions (memoryversions.go), in the
// wire format of the SDK's BetaMemoryStore* services. Every write to a
// store's memories is serialized by the store's row lock (package db);
// an archived store is read-only (409).

// Limits of a memory store's fields, in characters.
const (
	maxMemoryStoreName        = 255
	maxMemoryStoreDescription = 1024
)

// memoryStoreResponse is the wire form of a store
// (BetaManagedAgentsMemoryStore).
type memoryStoreResponse struct {
	Type        string            `json:"type"`
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Metadata    map[string]string `json:"metadata"`
	ArchivedAt  *time.Time        `json:"archived_at"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

func toMemoryStoreResponse(s *db.MemoryStore) *memoryStoreResponse {
	return &memoryStoreResponse{Type: "memory_store", ID: s.ID, Name: s.Name, Description: s.Description,
		Metadata: orEmpty(s.Metadata), ArchivedAt: s.ArchivedAt, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

func memoryStoreNotFound(id string) error { return apierror.NotFoundf("memory store %q not found", id) }

// memoryStoreIDParam is the store id of the path (404 when malformed).
func memoryStoreIDParam(c echo.Context) (string, error) {
	return pathID(c, "id", ids.MemoryStore, memoryStoreNotFound)
}

// checkMemoryStoreName checks a store's name: 1 to 255 characters, no
// control characters.
func checkMemoryStoreName(name string) error {
	if err := agentspec.CheckLen("name", name, 1, maxMemoryStoreName); err != nil {
		return err
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return jsonx.Errorf("name", "must not contain control characters, got %U", r)
		}
	}
	return nil
}

// memoryConflict turns the store's conflicts of memory writes into 409s
// that say what to do; other errors pass.
func memoryConflict(storeID string, err error) error {
	var pre *db.MemoryPreconditionError
	var clash *db.MemoryPathClashError
	switch {
	case errors.Is(err, db.ErrMemoryStoreArchived):
		return apierror.Conflictf("memory store %q is archived and read-only; its memories can be read but not changed", storeID)
	case errors.As(err, &pre):
		return apierror.Conflictf("%s; read the memory again and retry with its current content_sha256", pre.Error())
	case errors.As(err, &clash):
		return apierror.Conflictf("%s", clash.Error())
	case errors.Is(err, db.ErrMemoryPathTaken):
		return apierror.Conflictf("another memory of memory store %q already has this path; choose another path or update that memory", storeID)
	case errors.Is(err, db.ErrMemoryVersionCurrent):
		return apierror.Conflictf("%s", err.Error())
	}
	return err
}

func (a *API) memoryStoreCreate(c echo.Context) error {
	var in struct {
		Name        *string           `json:"name"`
		Description *string           `json:"description"`
		Metadata    map[string]string `json:"metadata"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if in.Name == nil {
		return apierror.Invalid("name: required; a memory store needs a name of 1 to %d characters", maxMemoryStoreName)
	}
	if err := checkMemoryStoreName(*in.Name); err != nil {
		return err
	}
	st := &db.MemoryStore{ID: ids.New(ids.MemoryStore), Name: *in.Name, CreatedAt: a.now()}
	if in.Description != nil {
		if err := agentspec.CheckLen("description", *in.Description, 0, maxMemoryStoreDescription); err != nil {
			return err
		}
		st.Description = *in.Description
	}
	patch := make(map[string]*string, len(in.Metadata))
	for k, v := range in.Metadata {
		patch[k] = &v
	}
	md, err := agentspec.PatchMetadata(nil, patch, false)
	if err != nil {
		return err
	}
	st.Metadata = md
	if err := a.deps.Store.MemoryStoreCreate(c.Request().Context(), st); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toMemoryStoreResponse(st))
}

func (a *API) memoryStoreGet(c echo.Context) error {
	id, err := memoryStoreIDParam(c)
	if err != nil {
		return err
	}
	st, err := a.deps.Store.MemoryStoreGet(c.Request().Context(), id)
	if err != nil {
		return notFoundAs(err, memoryStoreNotFound(id))
	}
	return c.JSON(http.StatusOK, toMemoryStoreResponse(st))
}

func (a *API) memoryStoreUpdate(c echo.Context) error {
	id, err := memoryStoreIDParam(c)
	if err != nil {
		return err
	}
	var in struct {
		Name        jsonx.Opt[string]             `json:"name"`
		Description jsonx.Opt[string]             `json:"description"`
		Metadata    jsonx.Opt[map[string]*string] `json:"metadata"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	ctx := c.Request().Context()
	cur, err := a.deps.Store.MemoryStoreGet(ctx, id)
	if err != nil {
		return notFoundAs(err, memoryStoreNotFound(id))
	}
	var p db.MemoryStorePatch
	if in.Name.Set {
		if in.Name.Null {
			return apierror.Invalid("name: must be a string of 1 to %d characters; omit it to keep the name", maxMemoryStoreName)
		}
		if err := checkMemoryStoreName(in.Name.Value); err != nil {
			return err
		}
		p.Name = &in.Name.Value
	}
	if in.Description.Set {
		if err := agentspec.CheckLen("description", in.Description.Value, 0, maxMemoryStoreDescription); err != nil {
			return err
		}
		p.Description = &in.Description.Value // null clears it, as ""
	}
	if in.Metadata.Set && !in.Metadata.Null {
		if _, err := agentspec.PatchMetadata(cur.Metadata, in.Metadata.Value, false); err != nil {
			return err
		}
		p.Metadata = in.Metadata.Value
	}
	st, err := a.deps.Store.MemoryStoreUpdate(ctx, id, p, a.now())
	if errors.Is(err, db.ErrMemoryStoreMetadata) {
		return apierror.Invalid("metadata: %v", err)
	}
	if err != nil {
		return notFoundAs(memoryConflict(id, err), memoryStoreNotFound(id))
	}
	return c.JSON(http.StatusOK, toMemoryStoreResponse(st))
}

func (a *API) memoryStoreList(c echo.Context) error {
	page, after, err := parseKeysetPage(c, maxPageLimit)
	if err != nil {
		return err
	}
	f := db.MemoryStoreFilter{}
	if f.IncludeArchived, err = parseBoolParam(c, "include_archived"); err != nil {
		return err
	}
	if f.CreatedGTE, err = parseTimeParam(c, "created_at[gte]"); err != nil {
		return err
	}
	if f.CreatedLTE, err = parseTimeParam(c, "created_at[lte]"); err != nil {
		return err
	}
	stores, more, err := a.deps.Store.MemoryStoreList(c.Request().Context(), f, after, page.limit)
	if err != nil {
		return err
	}
	return writeList(c, stores, more, toMemoryStoreResponse, func(s *db.MemoryStore) string { return timeCursor(s.CreatedAt, s.ID) })
}

func (a *API) memoryStoreArchive(c echo.Context) error {
	id, err := memoryStoreIDParam(c)
	if err != nil {
		return err
	}
	st, err := a.deps.Store.MemoryStoreArchive(c.Request().Context(), id, a.now())
	if err != nil {
		return notFoundAs(err, memoryStoreNotFound(id))
	}
	return c.JSON(http.StatusOK, toMemoryStoreResponse(st))
}

func (a *API) memoryStoreDelete(c echo.Context) error {
	id, err := memoryStoreIDParam(c)
	if err != nil {
		return err
	}
	if err := a.deps.Store.MemoryStoreDelete(c.Request().Context(), id); err != nil {
		return notFoundAs(err, memoryStoreNotFound(id))
	}
	return c.JSON(http.StatusOK, map[string]string{"id": id, "type": "memory_store_deleted"})
}
