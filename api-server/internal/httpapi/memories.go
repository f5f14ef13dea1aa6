package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/auth"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// Memory views: basic leaves content out (null), full includes it.
const (
	viewBasic = "basic"
	viewFull  = "full"
)

// maxFullViewLimit caps a page of full-view memories or versions.
const maxFullViewLimit = 20

// memoryResponse is the wire form of a memory (BetaManagedAgentsMemory).
type memoryResponse struct {
	Type             string    `json:"type"`
	ID               string    `json:"id"`
	MemoryStoreID    string    `json:"memory_store_id"`
	MemoryVersionID  string    `json:"memory_version_id"`
	Path             string    `json:"path"`
	Content          *string   `json:"content"`
	ContentSHA256    string    `json:"content_sha256"`
	ContentSizeBytes int64     `json:"content_size_bytes"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// memoryPrefixResponse is a folder in a memory list
// (BetaManagedAgentsMemoryPrefix).
type memoryPrefixResponse struct {
	Type string `json:"type"`
	Path string `json:"path"`
}

func toMemoryResponse(m *db.Memory, view string) *memoryResponse {
	out := &memoryResponse{Type: "memory", ID: m.ID, MemoryStoreID: m.StoreID, MemoryVersionID: m.VersionID, Path: m.Path,
		ContentSHA256: m.SHA256, ContentSizeBytes: m.SizeBytes, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt}
	if view == viewFull {
		content := m.Content
		out.Content = &content
	}
	return out
}

func memoryNotFound(storeID, id string) error {
	return apierror.NotFoundf("memory %q not found in memory store %q", id, storeID)
}

// memoryActor is who a memory write through the API is attributed to:
// the API key, or the session of a self-hosted worker's work token.
func memoryActor(c echo.Context) db.Actor {
	if p := principalOf(c); p.kind == auth.KindWorkToken {
		return db.Actor{Type: db.ActorSession, ID: p.sessionID}
	}
	id, _ := c.Get("api_key_id").(string)
	return db.Actor{Type: db.ActorAPI, ID: id}
}

// parseView reads the view query parameter (def when absent).
func parseView(c echo.Context, def string) (string, error) {
	switch v := c.QueryParam("view"); v {
	case "":
		return def, nil
	case viewBasic, viewFull:
		return v, nil
	default:
		return "", apierror.Invalid("view: must be basic or full, got %q", v)
	}
}

// checkMemoryContent checks content against the 100 kB limit.
func checkMemoryContent(content string) error {
	if err := db.ValidateMemoryContent([]byte(content)); err != nil {
		return apierror.Invalid("content: %v", err)
	}
	return nil
}

func checkMemoryPath(field, p string) error {
	if err := db.ValidateMemoryPath(p); err != nil {
		return apierror.Invalid("%s: %v", field, err)
	}
	return nil
}

// checkSHA256 checks a content hash parameter: 64 lowercase hex digits.
func checkSHA256(field, v string) error {
	if len(v) != 64 || strings.Trim(v, "0123456789abcdef") != "" {
		return apierror.Invalid("%s: must be 64 lowercase hexadecimal characters (a SHA-256), got %q", field, v)
	}
	return nil
}

// memoryStoreOfPath returns the store id of the path parameter param;
// the store must exist (404).
func (a *API) memoryStoreOfPath(c echo.Context, param string) (string, error) {
	id, err := pathID(c, param, ids.MemoryStore, memoryStoreNotFound)
	if err != nil {
		return "", err
	}
	if _, err := a.deps.Store.MemoryStoreGet(c.Request().Context(), id); err != nil {
		return "", notFoundAs(err, memoryStoreNotFound(id))
	}
	return id, nil
}

// memoryOfPath returns the store and memory ids of the path.
func (a *API) memoryOfPath(c echo.Context) (storeID, memoryID string, err error) {
	if storeID, err = a.memoryStoreOfPath(c, "id"); err != nil {
		return "", "", err
	}
	memoryID = c.Param("memory")
	if !ids.Valid(ids.Memory, memoryID) {
		return "", "", memoryNotFound(storeID, memoryID)
	}
	return storeID, memoryID, nil
}

func (a *API) memoryCreate(c echo.Context) error {
	storeID, err := a.memoryStoreOfPath(c, "id")
	if err != nil {
		return err
	}
	view, err := parseView(c, viewBasic)
	if err != nil {
		return err
	}
	var in struct {
		Path    *string `json:"path"`
		Content *string `json:"content"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if in.Path == nil {
		return apierror.Invalid("path: required; a path such as \"/notes.md\"")
	}
	if in.Content == nil {
		return apierror.Invalid("content: required; pass \"\" to create an empty memory")
	}
	if err := checkMemoryPath("path", *in.Path); err != nil {
		return err
	}
	if err := checkMemoryContent(*in.Content); err != nil {
		return err
	}
	m, err := a.deps.Store.MemoryCreate(c.Request().Context(), storeID, *in.Path, *in.Content, memoryActor(c), a.now())
	if err != nil {
		return notFoundAs(memoryConflict(storeID, err), memoryStoreNotFound(storeID))
	}
	return c.JSON(http.StatusOK, toMemoryResponse(m, view))
}

func (a *API) memoryGet(c echo.Context) error {
	storeID, id, err := a.memoryOfPath(c)
	if err != nil {
		return err
	}
	view, err := parseView(c, viewFull)
	if err != nil {
		return err
	}
	m, err := a.deps.Store.MemoryGet(c.Request().Context(), storeID, id)
	if err != nil {
		return notFoundAs(err, memoryNotFound(storeID, id))
	}
	return c.JSON(http.StatusOK, toMemoryResponse(m, view))
}

// memoryUpdateBody is the body of a memory update.
type memoryUpdateBody struct {
	Path         *string `json:"path"`
	Content      *string `json:"content"`
	Precondition *struct {
		Type          string  `json:"type"`
		ContentSHA256 *string `json:"content_sha256"`
	} `json:"precondition"`
}

// toUpdate checks the body and returns the update it asks.
func (in *memoryUpdateBody) toUpdate() (db.MemoryUpdate, error) {
	u := db.MemoryUpdate{Path: in.Path, Content: in.Content}
	if in.Path != nil {
		if err := checkMemoryPath("path", *in.Path); err != nil {
			return u, err
		}
	}
	if in.Content != nil {
		if err := checkMemoryContent(*in.Content); err != nil {
			return u, err
		}
	}
	if pc := in.Precondition; pc != nil {
		if pc.Type != "content_sha256" {
			return u, apierror.Invalid("precondition.type: must be content_sha256, got %q", pc.Type)
		}
		if pc.ContentSHA256 == nil {
			return u, apierror.Invalid("precondition.content_sha256: required with a precondition of type content_sha256")
		}
		if err := checkSHA256("precondition.content_sha256", *pc.ContentSHA256); err != nil {
			return u, err
		}
		u.IfSHA256 = *pc.ContentSHA256
	}
	return u, nil
}

func (a *API) memoryUpdate(c echo.Context) error {
	storeID, id, err := a.memoryOfPath(c)
	if err != nil {
		return err
	}
	view, err := parseView(c, viewBasic)
	if err != nil {
		return err
	}
	var in memoryUpdateBody
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	u, err := in.toUpdate()
	if err != nil {
		return err
	}
	m, err := a.deps.Store.MemoryUpdateApply(c.Request().Context(), storeID, id, u, memoryActor(c), a.now())
	if err != nil {
		return notFoundAs(memoryConflict(storeID, err), memoryNotFound(storeID, id))
	}
	return c.JSON(http.StatusOK, toMemoryResponse(m, view))
}

func (a *API) memoryDelete(c echo.Context) error {
	storeID, id, err := a.memoryOfPath(c)
	if err != nil {
		return err
	}
	if err := checkQuery(c); err != nil {
		return err
	}
	expected := c.QueryParam("expected_content_sha256")
	if expected != "" {
		if err := checkSHA256("expected_content_sha256", expected); err != nil {
			return err
		}
	}
	if err := a.deps.Store.MemoryDelete(c.Request().Context(), storeID, id, expected, memoryActor(c), a.now()); err != nil {
		return notFoundAs(memoryConflict(storeID, err), memoryNotFound(storeID, id))
	}
	return c.JSON(http.StatusOK, map[string]string{"id": id, "type": "memory_deleted"})
}

// memoryListQuery reads a memory list's query parameters.
func memoryListQuery(c echo.Context, storeID string) (db.MemoryListParams, string, error) {
	p := db.MemoryListParams{StoreID: storeID}
	view, err := parseView(c, viewBasic)
	if err != nil {
		return p, "", err
	}
	p.WithContent = view == viewFull
	page, err := parsePage(c, maxPageLimit)
	if err != nil {
		return p, "", err
	}
	p.Limit = page.limit
	if view == viewFull && p.Limit > maxFullViewLimit {
		p.Limit = maxFullViewLimit
	}
	if p.PathPrefix = c.QueryParam("path_prefix"); p.PathPrefix != "" && p.PathPrefix != "/" {
		if !strings.HasSuffix(p.PathPrefix, "/") {
			return p, "", apierror.Invalid("path_prefix: must end with \"/\" (it matches whole segments, e.g. \"/notes/\"), got %q", p.PathPrefix)
		}
		if err := checkMemoryPath("path_prefix", strings.TrimSuffix(p.PathPrefix, "/")); err != nil {
			return p, "", err
		}
	}
	if v := c.QueryParam("depth"); v != "" {
		if p.Depth, err = strconv.Atoi(v); err != nil || p.Depth < 0 || p.Depth > db.MaxMemoryPathSegments {
			return p, "", apierror.Invalid("depth: must be an integer between 0 and %d, got %q", db.MaxMemoryPathSegments, v)
		}
	}
	if page.cursor != "" {
		kind, after, ok := strings.Cut(page.cursor, ":")
		if !ok || (kind != "m" && kind != "p") || !strings.HasPrefix(after, "/") {
			return p, "", malformedCursor("next_page")
		}
		p.After, p.AfterPrefix = after, kind == "p"
	}
	return p, view, nil
}

func (a *API) memoryList(c echo.Context) error {
	storeID, err := a.memoryStoreOfPath(c, "id")
	if err != nil {
		return err
	}
	p, view, err := memoryListQuery(c, storeID)
	if err != nil {
		return err
	}
	items, more, err := a.deps.Store.MemoryList(c.Request().Context(), p)
	if err != nil {
		return err
	}
	return writeList(c, items, more, func(it db.MemoryListItem) any {
		if it.Memory == nil {
			return &memoryPrefixResponse{Type: "memory_prefix", Path: it.Prefix}
		}
		return toMemoryResponse(it.Memory, view)
	}, func(it db.MemoryListItem) string {
		if it.Memory == nil {
			return encodeCursor("p:" + it.Prefix)
		}
		return encodeCursor("m:" + it.Memory.Path)
	})
}
