package httpapi

// Dreams (issue 33, point 4): POST /v1/dreams, GET /v1/dreams,
// GET /v1/dreams/{id}, POST /v1/dreams/{id}/cancel and /archive. A dream
// runs as a Mango session (dreams_run.go); its status follows the
// session's (db/dreams.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

const (
	maxDreamInstructions = 4096
	maxDreamSessions     = 100
)

type dreamCreateInput struct {
	Inputs         []json.RawMessage `json:"inputs"`
	Model          json.RawMessage   `json:"model"`
	Instructions   *string           `json:"instructions"`
	OutputBehavior json.RawMessage   `json:"output_behavior"`
}

// dreamRequest is a checked create request.
type dreamRequest struct {
	StoreID      string
	SessionIDs   []string
	ModelID      string
	Instructions *string
	// UpdateExisting: the dream writes into the input store.
	UpdateExisting bool
}

type dreamInput struct {
	Type          string   `json:"type"`
	MemoryStoreID *string  `json:"memory_store_id,omitempty"`
	SessionIDs    []string `json:"session_ids,omitempty"`
}

func parseDreamRequest(in *dreamCreateInput) (*dreamRequest, error) {
	r := &dreamRequest{}
	var stores, sessions int
	for i, raw := range in.Inputs {
		var d dreamInput
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, apierror.Invalid("inputs[%d]: must be an object {type: memory_store|sessions, ...}: %v", i, err)
		}
		switch d.Type {
		case "memory_store":
			stores++
			if d.MemoryStoreID == nil || !ids.Valid(ids.MemoryStore, *d.MemoryStoreID) {
				return nil, apierror.Invalid("inputs[%d].memory_store_id: must be a memory store id (memstore_...)", i)
			}
			r.StoreID = *d.MemoryStoreID
		case "sessions":
			sessions++
			if err := checkDreamSessionIDs(d.SessionIDs, i); err != nil {
				return nil, err
			}
			r.SessionIDs = d.SessionIDs
		default:
			return nil, apierror.Invalid("inputs[%d].type: must be memory_store or sessions, got %q", i, d.Type)
		}
	}
	if stores != 1 || sessions != 1 {
		return nil, apierror.Invalid("inputs: must hold exactly one memory_store input and exactly one sessions input, got %d and %d", stores, sessions)
	}
	model, err := parseDreamModel(in.Model)
	if err != nil {
		return nil, err
	}
	r.ModelID = model
	if in.Instructions != nil {
		if n := len([]rune(*in.Instructions)); n < 1 || n > maxDreamInstructions {
			return nil, apierror.Invalid("instructions: must be 1 to %d characters, got %d", maxDreamInstructions, n)
		}
		r.Instructions = in.Instructions
	}
	if r.UpdateExisting, err = parseOutputBehavior(in.OutputBehavior, r.StoreID); err != nil {
		return nil, err
	}
	return r, nil
}

func checkDreamSessionIDs(list []string, i int) error {
	if len(list) == 0 || len(list) > maxDreamSessions {
		return apierror.Invalid("inputs[%d].session_ids: must list 1 to %d session ids, got %d", i, maxDreamSessions, len(list))
	}
	seen := make(map[string]bool, len(list))
	for j, id := range list {
		if !ids.Valid(ids.Session, id) {
			return apierror.Invalid("inputs[%d].session_ids[%d]: must be a session id (sesn_...), got %q", i, j, id)
		}
		if seen[id] {
			return apierror.Invalid("inputs[%d].session_ids[%d]: session %q is listed twice", i, j, id)
		}
		seen[id] = true
	}
	return nil
}

// parseDreamModel takes a model id or {id, speed: "standard"}.
func parseDreamModel(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", apierror.Invalid("model: is required (a model id or {id, speed})")
	}
	var id string
	if err := json.Unmarshal(raw, &id); err == nil {
		if id == "" {
			return "", apierror.Invalid("model: must be a non-empty model id")
		}
		return id, nil
	}
	var obj struct {
		ID    string `json:"id"`
		Speed string `json:"speed"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.ID == "" {
		return "", apierror.Invalid("model: must be a model id or an object {id, speed} with a non-empty id")
	}
	if obj.Speed != "" && obj.Speed != "standard" {
		return "", apierror.Invalid("model.speed: only standard is supported, got %q", obj.Speed)
	}
	return obj.ID, nil
}

// parseOutputBehavior reports whether the dream updates the input store
// (update_existing) rather than creating a new one (create_new, the
// default).
func parseOutputBehavior(raw json.RawMessage, storeID string) (bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var ob struct {
		Type          string  `json:"type"`
		MemoryStoreID *string `json:"memory_store_id"`
	}
	if err := json.Unmarshal(raw, &ob); err != nil {
		return false, apierror.Invalid("output_behavior: must be {type: create_new} or {type: update_existing, memory_store_id}")
	}
	switch ob.Type {
	case "create_new":
		return false, nil
	case "update_existing":
		if ob.MemoryStoreID == nil || *ob.MemoryStoreID != storeID {
			return false, apierror.Invalid("output_behavior.memory_store_id: must be the memory store of the memory_store input (%s)", storeID)
		}
		return true, nil
	}
	return false, apierror.Invalid("output_behavior.type: must be create_new or update_existing, got %q", ob.Type)
}

type dreamOutput struct {
	Type          string `json:"type"`
	MemoryStoreID string `json:"memory_store_id"`
}

type dreamUsage struct {
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	// ListCostCents is Mango's: the list cost of the dream's session.
	ListCostCents int64 `json:"list_cost_cents"`
}

type dreamResponse struct {
	ID             string          `json:"id"`
	Type           string          `json:"type"`
	Status         string          `json:"status"`
	ArchivedAt     *time.Time      `json:"archived_at"`
	CreatedAt      time.Time       `json:"created_at"`
	EndedAt        *time.Time      `json:"ended_at"`
	Error          json.RawMessage `json:"error"`
	Inputs         []dreamInput    `json:"inputs"`
	Instructions   *string         `json:"instructions"`
	Model          json.RawMessage `json:"model"`
	OutputBehavior json.RawMessage `json:"output_behavior"`
	Outputs        []dreamOutput   `json:"outputs"`
	SessionID      *string         `json:"session_id"`
	Usage          dreamUsage      `json:"usage"`
}

func toDreamResponse(d *db.Dream) *dreamResponse {
	store := d.InputStoreID
	r := &dreamResponse{ID: d.ID, Type: "dream", Status: d.Status, ArchivedAt: d.ArchivedAt, CreatedAt: d.CreatedAt,
		EndedAt: d.EndedAt, Error: d.Error, Instructions: d.Instructions, Model: d.Model, OutputBehavior: d.OutputBehavior,
		Outputs: []dreamOutput{}, SessionID: d.SessionID,
		Inputs: []dreamInput{{Type: "memory_store", MemoryStoreID: &store}, {Type: "sessions", SessionIDs: d.InputSessionIDs}},
		Usage: dreamUsage{CacheCreationInputTokens: d.Usage.CacheCreation5m + d.Usage.CacheCreation1h,
			CacheReadInputTokens: d.Usage.CacheReadInputTokens, InputTokens: d.Usage.InputTokens,
			OutputTokens: d.Usage.OutputTokens, ListCostCents: d.Usage.ListCostCents()}}
	if d.OutputStoreID != nil {
		r.Outputs = append(r.Outputs, dreamOutput{Type: "memory_store", MemoryStoreID: *d.OutputStoreID})
	}
	return r
}

func dreamNotFound(id string) error { return apierror.NotFoundf("dream %q not found", id) }

func dreamIDParam(c echo.Context) (string, error) { return pathID(c, "id", ids.Dream, dreamNotFound) }

func (a *API) dreamGet(c echo.Context) error {
	id, err := dreamIDParam(c)
	if err != nil {
		return err
	}
	d, err := a.deps.Store.DreamGet(c.Request().Context(), id)
	if err != nil {
		return notFoundAs(err, dreamNotFound(id))
	}
	return c.JSON(http.StatusOK, toDreamResponse(d))
}

var dreamStatuses = map[string]bool{db.DreamPending: true, db.DreamRunning: true, db.DreamCompleted: true, db.DreamFailed: true, db.DreamCanceled: true}

func (a *API) dreamList(c echo.Context) error {
	page, after, err := parseKeysetPage(c, maxPageLimit)
	if err != nil {
		return err
	}
	p := db.DreamListParams{After: after, Limit: page.limit}
	if p.IncludeArchived, err = parseBoolParam(c, "include_archived"); err != nil {
		return err
	}
	if p.CreatedGT, err = parseTimeParam(c, "created_at[gt]"); err != nil {
		return err
	}
	if p.CreatedLT, err = parseTimeParam(c, "created_at[lt]"); err != nil {
		return err
	}
	q := c.QueryParams()
	for _, s := range append(q["statuses[]"], q["statuses"]...) {
		for _, st := range strings.Split(s, ",") {
			if !dreamStatuses[st] {
				return apierror.Invalid("statuses: must be pending, running, completed, failed or canceled, got %q", st)
			}
			p.Statuses = append(p.Statuses, st)
		}
	}
	dreams, more, err := a.deps.Store.DreamList(c.Request().Context(), p)
	if err != nil {
		return err
	}
	return writeList(c, dreams, more, toDreamResponse, func(d *db.Dream) string { return timeCursor(d.CreatedAt, d.ID) })
}

func (a *API) dreamArchive(c echo.Context) error {
	id, err := dreamIDParam(c)
	if err != nil {
		return err
	}
	d, err := a.deps.Store.DreamArchive(c.Request().Context(), id, a.now())
	if errors.Is(err, db.ErrDreamEnded) {
		return apierror.Invalid("%v", err)
	}
	if err != nil {
		return notFoundAs(err, dreamNotFound(id))
	}
	return c.JSON(http.StatusOK, toDreamResponse(d))
}

// dreamCancel ends a pending or running dream as canceled and interrupts
// its session: the session idles after the interrupt (its memory sync
// still writes what the agent changed).
func (a *API) dreamCancel(c echo.Context) error {
	id, err := dreamIDParam(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	before, err := a.deps.Store.DreamGet(ctx, id)
	if err != nil {
		return notFoundAs(err, dreamNotFound(id))
	}
	d, err := a.deps.Store.DreamCancel(ctx, id, a.now())
	if errors.Is(err, db.ErrDreamEnded) {
		return apierror.Invalid("%v", err)
	}
	if err != nil {
		return notFoundAs(err, dreamNotFound(id))
	}
	if !before.Ended() && d.SessionID != nil {
		if err := a.interruptSession(c, *d.SessionID); err != nil {
			return fmt.Errorf("cancel dream %s: interrupt its session %s: %w", id, *d.SessionID, err)
		}
	}
	return c.JSON(http.StatusOK, toDreamResponse(d))
}
