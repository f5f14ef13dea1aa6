package httpapi

// This file serves the Environment Work API of self-hosted environments:
// the 8 routes under /v1/environments/{environment_id}/work that the
// official SDK's EnvironmentWorker (and client.Beta.Environments.Work)
// calls. Who may call which route is decided in principal.go.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/auth"
	"github.com/mangohq/mango/api-server/internal/envspec"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/db"
)

// Work queue parameters.
const (
	// defaultReclaimOlderThan is the reclaim window of a poll that names
	// none: an item handed out and not acknowledged within it is handed
	// out again.
	defaultReclaimOlderThan = 5 * time.Second
	// maxReclaimOlderThan bounds reclaim_older_than_ms.
	maxReclaimOlderThan = 24 * time.Hour
	// pollerWindow is how recent a poll must be for its worker to count in
	// the queue's workers_polling.
	pollerWindow = 30 * time.Second
	// maxBlock bounds a poll's block_ms (1..999).
	maxBlock = 999 * time.Millisecond
	// maxWorkerIDLen bounds the Anthropic-Worker-ID header.
	maxWorkerIDLen = 256
)

// workResponse is the wire form of a work item (BetaSelfHostedWork).
// Times are RFC 3339 strings, null when unset; Secret is set only in a
// poll's response.
type workResponse struct {
	Type              string            `json:"type"`
	ID                string            `json:"id"`
	EnvironmentID     string            `json:"environment_id"`
	Data              workData          `json:"data"`
	State             string            `json:"state"`
	Metadata          map[string]string `json:"metadata"`
	Secret            *string           `json:"secret"`
	CreatedAt         *string           `json:"created_at"`
	AcknowledgedAt    *string           `json:"acknowledged_at"`
	StartedAt         *string           `json:"started_at"`
	LatestHeartbeatAt *string           `json:"latest_heartbeat_at"`
	StopRequestedAt   *string           `json:"stop_requested_at"`
	StoppedAt         *string           `json:"stopped_at"`
}

// workData is what a work item asks for: a session to serve or a health
// check.
type workData struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// rfc3339 formats t for the work API, nil for nil.
func rfc3339(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

func toWorkResponse(w *db.WorkItem, secret *string) *workResponse {
	data := workData{Type: w.Type, ID: w.SessionID}
	if w.Type == db.WorkTypeHealthcheck {
		data.ID = w.ID
	}
	created := w.CreatedAt
	return &workResponse{Type: "work", ID: w.ID, EnvironmentID: w.EnvironmentID, Data: data, State: w.State,
		Metadata: orEmpty(w.Metadata), Secret: secret, CreatedAt: rfc3339(&created), AcknowledgedAt: rfc3339(w.AcknowledgedAt),
		StartedAt: rfc3339(w.StartedAt), LatestHeartbeatAt: rfc3339(w.LastHeartbeatAt), StopRequestedAt: rfc3339(w.StopRequestedAt),
		StoppedAt: rfc3339(w.StoppedAt)}
}

// workEnvironment returns the route's environment id once the environment
// is known to exist and to be self-hosted.
func (a *API) workEnvironment(c echo.Context) (string, error) {
	id, err := environmentID(c)
	if err != nil {
		return "", err
	}
	env, err := a.deps.Store.EnvironmentGet(c.Request().Context(), id)
	if err != nil {
		return "", notFoundAs(err, environmentNotFound(id))
	}
	var cfg envspec.Config
	if err := json.Unmarshal(env.Config, &cfg); err != nil {
		return "", err
	}
	if cfg.Type != envspec.SelfHosted {
		return "", apierror.Invalid("environment %q is not self-hosted (its config.type is %q): only a self_hosted environment has a work queue", id, cfg.Type)
	}
	return id, nil
}

// workID returns the route's work item id, well-formed.
func workID(c echo.Context) (string, error) {
	return pathID(c, "wid", ids.Work, func(id string) error { return apierror.NotFoundf("work item %q not found", id) })
}

// workError maps the store's errors about one item to public errors.
func workError(envID, workID string, err error, conflict string) error {
	switch {
	case errors.Is(err, db.ErrNotFound):
		return apierror.NotFoundf("work item %q not found in environment %q", workID, envID)
	case errors.Is(err, db.ErrConflict):
		return apierror.Conflictf("work item %q %s", workID, conflict)
	}
	return err
}

// msParam reads an integer query parameter of milliseconds in [lo, hi];
// def when absent.
func msParam(c echo.Context, name string, lo, hi, def int64) (time.Duration, error) {
	v := c.QueryParam(name)
	if v == "" {
		return time.Duration(def) * time.Millisecond, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, apierror.Invalid("%s: must be an integer number of milliseconds from %d to %d, got %q", name, lo, hi, v)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// workTarget reads the environment and the work item of an item's route.
func (a *API) workTarget(c echo.Context) (envID, wid string, err error) {
	if envID, err = a.workEnvironment(c); err != nil {
		return "", "", err
	}
	if wid, err = workID(c); err != nil {
		return "", "", err
	}
	return envID, wid, nil
}

func (a *API) workPoll(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	envID, err := a.workEnvironment(c)
	if err != nil {
		return err
	}
	block, err := msParam(c, "block_ms", 1, maxBlock.Milliseconds(), 0)
	if err != nil {
		return err
	}
	reclaim, err := msParam(c, "reclaim_older_than_ms", 0, maxReclaimOlderThan.Milliseconds(), defaultReclaimOlderThan.Milliseconds())
	if err != nil {
		return err
	}
	worker := c.Request().Header.Get("Anthropic-Worker-ID")
	if len(worker) > maxWorkerIDLen {
		return apierror.Invalid("Anthropic-Worker-ID: must be at most %d characters", maxWorkerIDLen)
	}
	item, secret, err := a.pollWait(c.Request().Context(), envID, worker, reclaim, block)
	if err != nil {
		return err
	}
	if item == nil {
		// The SDK's Poll returns (nil, nil) for a JSON null.
		return c.JSON(http.StatusOK, nil)
	}
	return c.JSON(http.StatusOK, toWorkResponse(item, &secret))
}

// pollWait hands out the environment's next item, waiting up to block for
// one: it takes the environment's wake-up channel, queries, and waits to
// be woken (a new item announced on db.WorkChannel) or for block to pass,
// then queries again. It returns nil when nothing came.
func (a *API) pollWait(ctx context.Context, envID, worker string, reclaim, block time.Duration) (*db.WorkItem, string, error) {
	deadline := time.Now().Add(block)
	for {
		var wake <-chan struct{}
		if a.deps.Work != nil {
			wake = a.deps.Work.Wait(envID)
		}
		ws := auth.NewWorkSecret()
		item, err := a.deps.Store.WorkPoll(ctx, envID, worker, reclaim, ws.Hash, a.now())
		if err != nil || item != nil {
			return item, ws.Secret, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, "", nil
		}
		t := time.NewTimer(left)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			// The client left: nothing was handed out.
			t.Stop()
			return nil, "", nil
		}
		t.Stop()
	}
}

func (a *API) workAck(c echo.Context) error {
	envID, wid, err := a.workTarget(c)
	if err != nil {
		return err
	}
	w, err := a.deps.Store.WorkAck(c.Request().Context(), envID, wid, a.deps.WorkLeaseTTL, a.now())
	if err != nil {
		return workError(envID, wid, err, "is not queued, so it cannot be acknowledged (another worker may have claimed it, or it was stopped)")
	}
	return c.JSON(http.StatusOK, toWorkResponse(w, nil))
}

// heartbeatResponse is BetaSelfHostedWorkHeartbeatResponse.
type heartbeatResponse struct {
	Type          string `json:"type"`
	LastHeartbeat string `json:"last_heartbeat"`
	LeaseExtended bool   `json:"lease_extended"`
	State         string `json:"state"`
	TTLSeconds    int    `json:"ttl_seconds"`
}

// leaseState is the current_state of a refused heartbeat
// (BetaWorkLeaseState): last_heartbeat is null when there was none.
type leaseState struct {
	LastHeartbeat *string `json:"last_heartbeat"`
	LeaseExtended bool    `json:"lease_extended"`
	State         string  `json:"state"`
	TTLSeconds    int     `json:"ttl_seconds"`
}

// heartbeatPreconditionFailed is the 412 of a heartbeat whose
// expected_last_heartbeat is not the item's, with the details the SDK
// decodes as BetaHeartbeatPreconditionFailedErrorDetails.
func heartbeatPreconditionFailed(wid, expected string, cur db.HeartbeatResult) error {
	st := leaseState{LeaseExtended: false, State: cur.State, TTLSeconds: cur.TTLSeconds}
	if cur.LastHeartbeat != "" {
		st.LastHeartbeat = &cur.LastHeartbeat
	}
	msg := "work item " + strconv.Quote(wid) + " is " + cur.State
	if cur.LastHeartbeat == "" {
		msg += " and was never heartbeated"
	} else {
		msg += " with last heartbeat " + cur.LastHeartbeat
	}
	return &apierror.Error{Status: http.StatusPreconditionFailed, Type: apierror.InvalidRequest,
		Message: "expected_last_heartbeat " + strconv.Quote(expected) + " does not match: " + msg + " (another worker may hold the lease)",
		Details: map[string]any{"error_code": "heartbeat_precondition_failed", "current_state": st}}
}

func (a *API) workHeartbeat(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	envID, wid, err := a.workTarget(c)
	if err != nil {
		return err
	}
	expected := c.QueryParam("expected_last_heartbeat")
	if expected == "" {
		return apierror.Invalid("expected_last_heartbeat: is required (%s for the first heartbeat, else the last_heartbeat of the previous one)", db.NoHeartbeat)
	}
	ttl := a.deps.WorkLeaseTTL
	if v := c.QueryParam("desired_ttl_seconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return apierror.Invalid("desired_ttl_seconds: must be a positive integer, got %q", v)
		}
		ttl = min(time.Duration(min(n, 1<<31))*time.Second, a.deps.WorkMaxLeaseTTL)
	}
	hb, err := a.deps.Store.WorkHeartbeat(c.Request().Context(), envID, wid, expected, ttl, a.now())
	var mismatch *db.LeaseMismatchError
	if errors.As(err, &mismatch) {
		return heartbeatPreconditionFailed(wid, expected, mismatch.Current)
	}
	if err != nil {
		return workError(envID, wid, err, "cannot be heartbeated now")
	}
	return c.JSON(http.StatusOK, heartbeatResponse{Type: "work_heartbeat", LastHeartbeat: hb.LastHeartbeat,
		LeaseExtended: hb.LeaseExtended, State: hb.State, TTLSeconds: hb.TTLSeconds})
}

func (a *API) workStop(c echo.Context) error {
	envID, wid, err := a.workTarget(c)
	if err != nil {
		return err
	}
	body, err := a.readJSONBody(c, true)
	if err != nil {
		return err
	}
	var in struct {
		Force *bool `json:"force"`
	}
	if body != nil {
		if err := jsonx.DecodeObject(body, &in, ""); err != nil {
			return err
		}
	}
	w, err := a.deps.Store.WorkStop(c.Request().Context(), envID, wid, in.Force != nil && *in.Force, a.now())
	if err != nil {
		return workError(envID, wid, err, "is already stopped")
	}
	return c.JSON(http.StatusOK, toWorkResponse(w, nil))
}

func (a *API) workGet(c echo.Context) error {
	envID, wid, err := a.workTarget(c)
	if err != nil {
		return err
	}
	w, err := a.deps.Store.WorkGet(c.Request().Context(), envID, wid)
	if err != nil {
		return workError(envID, wid, err, "")
	}
	return c.JSON(http.StatusOK, toWorkResponse(w, nil))
}

func (a *API) workUpdate(c echo.Context) error {
	envID, wid, err := a.workTarget(c)
	if err != nil {
		return err
	}
	var in struct {
		Metadata map[string]*string `json:"metadata"`
	}
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	if in.Metadata == nil {
		return apierror.Invalid("metadata: is required (an object: a string value sets a key, null deletes it)")
	}
	if _, err := agentspec.PatchMetadata(nil, in.Metadata, false); err != nil {
		return err
	}
	w, err := a.deps.Store.WorkUpdateMetadata(c.Request().Context(), envID, wid, in.Metadata)
	if err != nil {
		return workError(envID, wid, err, "")
	}
	return c.JSON(http.StatusOK, toWorkResponse(w, nil))
}

func (a *API) workList(c echo.Context) error {
	envID, err := a.workEnvironment(c)
	if err != nil {
		return err
	}
	page, after, err := parseKeysetPage(c, maxPageLimit)
	if err != nil {
		return err
	}
	items, more, err := a.deps.Store.WorkList(c.Request().Context(), envID, page.limit, after)
	if err != nil {
		return err
	}
	return writeList(c, items, more, func(w db.WorkItem) *workResponse { return toWorkResponse(&w, nil) },
		func(w db.WorkItem) string { return timeCursor(w.CreatedAt, w.ID) })
}

// statsResponse is BetaSelfHostedWorkQueueStats.
type statsResponse struct {
	Type           string  `json:"type"`
	Depth          int64   `json:"depth"`
	Pending        int64   `json:"pending"`
	OldestQueuedAt *string `json:"oldest_queued_at"`
	WorkersPolling int64   `json:"workers_polling"`
}

func (a *API) workStats(c echo.Context) error {
	envID, err := a.workEnvironment(c)
	if err != nil {
		return err
	}
	st, err := a.deps.Store.WorkStats(c.Request().Context(), envID, defaultReclaimOlderThan, pollerWindow, a.now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, statsResponse{Type: "work_queue_stats", Depth: st.Depth, Pending: st.Pending,
		OldestQueuedAt: rfc3339(st.OldestQueuedAt), WorkersPolling: st.WorkersPolling})
}

// adminWorkHealthcheck answers POST /admin/environments/{id}/healthcheck:
// it queues a healthcheck work item, which a live worker of the
// environment claims and stops without running anything. The item (read
// with work get) tells whether a worker is serving the environment:
// acknowledged_at and stopped_at are set once one did.
func (a *API) adminWorkHealthcheck(c echo.Context) error {
	if _, err := a.readJSONBody(c, true); err != nil {
		return err
	}
	envID, err := a.workEnvironment(c)
	if err != nil {
		return err
	}
	w, err := a.deps.Store.WorkEnqueueHealthcheck(c.Request().Context(), ids.New(ids.Work), envID, a.now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toWorkResponse(w, nil))
}
