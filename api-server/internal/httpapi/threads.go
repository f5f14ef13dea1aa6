package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/eventspec"
	"github.com/mangohq/mango/api-server/internal/usage"
	"github.com/mangohq/mango/db"
)

// Session threads (multi-agent sessions, db/threads.go). A session's
// primary thread is the session itself, under the thread id
// db.PrimaryThreadID; a child thread is a session of its own, whose
// events are copied into the session's log. The threads API reads them;
// events sent to the session go to the thread they are for.

// threadResponse is a BetaManagedAgentsSessionThread.
type threadResponse struct {
	Type           string          `json:"type"`
	ID             string          `json:"id"`
	SessionID      string          `json:"session_id"`
	ParentThreadID *string         `json:"parent_thread_id"`
	Agent          json.RawMessage `json:"agent"`
	Status         db.Status       `json:"status"`
	Stats          threadStats     `json:"stats"`
	Usage          usage.Usage     `json:"usage"`
	WorkflowRunID  *string         `json:"workflow_run_id"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	ArchivedAt     *time.Time      `json:"archived_at"`
}

// threadStats is a BetaManagedAgentsSessionThreadStats.
type threadStats struct {
	ActiveSeconds   float64 `json:"active_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
	StartupSeconds  float64 `json:"startup_seconds"`
}

// toThreadResponse is the wire form of thread t of session sessionID.
// The primary thread (t the session) shows the session's usage less its
// child threads' (children): its own.
func (a *API) toThreadResponse(sessionID string, t *db.Session, children []*db.Session) *threadResponse {
	now := a.now()
	r := &threadResponse{Type: "session_thread", ID: t.ID, SessionID: sessionID, Agent: t.Agent, Status: t.Status,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, ArchivedAt: t.ArchivedAt}
	own := *t
	if t.IsThread() {
		primary := db.PrimaryThreadID(sessionID)
		r.ParentThreadID = &primary
	} else {
		r.ID = db.PrimaryThreadID(t.ID)
		r.ArchivedAt = nil
		for _, c := range children {
			own.Usage.Sub(c.Usage)
		}
	}
	r.Usage = usage.Of(&own, now)
	r.Stats = threadStats{ActiveSeconds: t.ActiveSeconds(now), DurationSeconds: t.DurationSeconds(now)}
	return r
}

func threadNotFound(sid, tid string) error {
	return apierror.NotFoundf("session %q has no thread %q", sid, tid)
}

// sessionThread resolves the path's session and thread: the session, and
// the child thread (nil for the primary thread).
func (a *API) sessionThread(c echo.Context) (*db.Session, *db.Session, error) {
	sid, err := sessionID(c)
	if err != nil {
		return nil, nil, err
	}
	ctx := c.Request().Context()
	sess, err := a.deps.Store.SessionGet(ctx, sid)
	if err != nil {
		return nil, nil, sessionError(sid, err)
	}
	tid := c.Param("tid")
	if tid == db.PrimaryThreadID(sid) {
		return sess, nil, nil
	}
	t, err := a.deps.Store.ThreadGet(ctx, sid, tid)
	if errors.Is(err, db.ErrNotFound) {
		return nil, nil, threadNotFound(sid, tid)
	}
	if err != nil {
		return nil, nil, err
	}
	return sess, t, nil
}

func (a *API) threadList(c echo.Context) error {
	sid, err := sessionID(c)
	if err != nil {
		return err
	}
	page, err := parsePage(c, maxPageLimit)
	if err != nil {
		return err
	}
	if c.QueryParam("limit") == "" {
		page.limit = 1000
	}
	q := c.QueryParams()
	statuses := append(q["statuses[]"], q["statuses"]...)
	for _, st := range statuses {
		if !slices.Contains([]string{"running", "idle", "rescheduling", "terminated"}, st) {
			return apierror.Invalid("statuses[]: must be running, idle, rescheduling or terminated, got %q", st)
		}
	}
	ctx := c.Request().Context()
	sess, err := a.deps.Store.SessionGet(ctx, sid)
	if err != nil {
		return sessionError(sid, err)
	}
	children, err := a.deps.Store.ThreadList(ctx, sid)
	if err != nil {
		return err
	}
	all := append([]*db.Session{sess}, children...)
	out := make([]*threadResponse, 0, len(all))
	for _, t := range all {
		if len(statuses) == 0 || slices.Contains(statuses, string(t.Status)) {
			out = append(out, a.toThreadResponse(sid, t, children))
		}
	}
	if page.cursor != "" {
		i := slices.IndexFunc(out, func(r *threadResponse) bool { return r.ID == page.cursor })
		if i < 0 {
			return apierror.Invalid("page: %q is not a thread of session %q", page.cursor, sid)
		}
		out = out[i+1:]
	}
	more := len(out) > page.limit
	if more {
		out = out[:page.limit]
	}
	return writeList(c, out, more, func(r *threadResponse) json.RawMessage { b, _ := json.Marshal(r); return b },
		func(r *threadResponse) string { return r.ID })
}

func (a *API) threadGet(c echo.Context) error {
	sess, t, err := a.sessionThread(c)
	if err != nil {
		return err
	}
	return a.threadJSON(c, sess, t)
}

// threadJSON answers with thread t of sess (nil: the primary thread).
func (a *API) threadJSON(c echo.Context, sess, t *db.Session) error {
	if t != nil {
		return c.JSON(http.StatusOK, a.toThreadResponse(sess.ID, t, nil))
	}
	children, err := a.deps.Store.ThreadList(c.Request().Context(), sess.ID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a.toThreadResponse(sess.ID, sess, children))
}

func (a *API) threadArchive(c echo.Context) error {
	sess, t, err := a.sessionThread(c)
	if err != nil {
		return err
	}
	if _, err := a.readJSONBody(c, true); err != nil {
		return err
	}
	if t == nil {
		return apierror.Invalid("the primary thread %q is the session itself and is not archived alone; archive session %q instead",
			db.PrimaryThreadID(sess.ID), sess.ID)
	}
	t, err = a.deps.Store.ThreadArchive(c.Request().Context(), sess.ID, t.ID, a.now())
	if errors.Is(err, db.ErrConflict) {
		return apierror.Conflictf("thread %q is running; interrupt it (user.interrupt with its session_thread_id) before archiving it", c.Param("tid"))
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a.toThreadResponse(sess.ID, t, nil))
}

// threadEvents lists a thread's events: the session's for the primary
// thread (its log shows every thread), the child thread's own log else.
func (a *API) threadEvents(c echo.Context) error {
	sess, t, err := a.sessionThread(c)
	if err != nil {
		return err
	}
	if t == nil {
		return a.listEvents(c, sess.ID)
	}
	return a.listEvents(c, t.ID)
}

// threadStream streams a thread's events, as threadEvents lists them.
func (a *API) threadStream(c echo.Context) error {
	sess, t, err := a.sessionThread(c)
	if err != nil {
		return err
	}
	if t == nil {
		return a.streamEvents(c, sess.ID)
	}
	return a.streamEvents(c, t.ID)
}

// threadBatch is events of one request that go to one thread's session
// (target), in request order; fanned marks an interrupt the request's
// interrupt of every thread adds (not listed in the response).
type threadBatch struct {
	target string
	events []eventspec.Event
	fanned bool
}

// routeEvents splits a request's events by the session each goes to:
// a session without threads takes them all. An event naming a thread
// (session_thread_id) goes to it; an answer to a tool use goes to the
// thread the tool use is of; an interrupt naming no thread also goes to
// every child thread that runs; anything else is the primary thread's.
func (a *API) routeEvents(ctx context.Context, sess *db.Session, events []eventspec.Event) ([]threadBatch, error) {
	var out []threadBatch
	add := func(target string, ev eventspec.Event, fanned bool) {
		if n := len(out); n > 0 && out[n-1].target == target && out[n-1].fanned == fanned {
			out[n-1].events = append(out[n-1].events, ev)
			return
		}
		out = append(out, threadBatch{target: target, events: []eventspec.Event{ev}, fanned: fanned})
	}
	for i, ev := range events {
		target, err := a.eventTarget(ctx, sess, ev, i)
		if err != nil {
			return nil, err
		}
		add(target, ev, false)
		if ev.Type != eventspec.UserInterrupt || ev.ThreadID != "" || !sess.HasThreads {
			continue
		}
		children, err := a.deps.Store.ThreadList(ctx, sess.ID)
		if err != nil {
			return nil, err
		}
		for _, t := range children {
			if t.ArchivedAt == nil && (t.Status == db.StatusRunning || t.Status == db.StatusRescheduling) {
				add(t.ID, ev, true)
			}
		}
	}
	return out, nil
}

// eventTarget is the session event i (ev) of a request to sess goes to.
func (a *API) eventTarget(ctx context.Context, sess *db.Session, ev eventspec.Event, i int) (string, error) {
	if ev.ThreadID != "" {
		if ev.ThreadID == db.PrimaryThreadID(sess.ID) {
			return sess.ID, nil
		}
		if _, err := a.deps.Store.ThreadGet(ctx, sess.ID, ev.ThreadID); err != nil {
			if errors.Is(err, db.ErrNotFound) {
				return "", apierror.Invalid("events[%d].session_thread_id: session %q has no thread %q", i, sess.ID, ev.ThreadID)
			}
			return "", err
		}
		return ev.ThreadID, nil
	}
	if ev.ToolUseID == "" || !sess.HasThreads {
		return sess.ID, nil
	}
	t, err := a.deps.Store.EventThread(ctx, sess.ID, ev.ToolUseID)
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		return "", err
	}
	if t != "" {
		return t, nil
	}
	return sess.ID, nil
}
