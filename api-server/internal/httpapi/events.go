package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/eventspec"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// stopReason is the stored stop_reason of an idle session.
type stopReason struct {
	Type     string   `json:"type"`
	EventIDs []string `json:"event_ids,omitempty"`
}

// admission turns validated client events into one atomic append whose
// Decide step applies the session rules under the session's row lock:
//
//   - a terminated session accepts nothing (409);
//   - user.message starts a turn on an idle session (running + wake-up) and
//     is queued behind the current turn otherwise (wake-up only), outside
//     the log until the session takes it up (db/events.go);
//   - user.define_outcome does the same, on a session without an active
//     outcome (db/outcomes.go runs its loop);
//   - user.interrupt wakes a running session's workflow to stop the turn
//     and is recorded without effect on an idle one;
//   - user.custom_tool_result and user.tool_confirmation must answer a
//     pending required action; once all are answered the session runs again;
//   - user.tool_result (self-hosted sessions only) answers an agent.tool_use
//     not answered yet (the store checks it: ToolResults), without a status
//     change or a wake-up: the turn awaiting it wakes on the commit;
//   - user.message and user.tool_confirmation ensure a self-hosted
//     session's work item (EnsureWork).
func (a *API) admission(events []eventspec.Event, now time.Time) *db.AppendRequest {
	req := &db.AppendRequest{Now: now}
	for _, ev := range events {
		ne := db.NewEvent{ID: ids.New(ids.Event), Type: ev.Type, Body: ev.Body, Pending: true}
		switch ev.Type {
		case eventspec.UserToolResult:
			// The turn awaiting it is woken by the events notification;
			// it is no trigger of its own.
			ne.Pending = false
			req.ToolResults = append(req.ToolResults, ev.ToolUseID)
		case eventspec.UserMessage, eventspec.UserToolConfirmation, eventspec.UserDefineOutcome:
			// A self-hosted session gets a work item for its worker (the
			// store ignores this for other sessions).
			if req.EnsureWork == "" {
				req.EnsureWork = ids.New(ids.Work)
			}
		case eventspec.SystemMessage:
			// No trigger: every turn reads the session's system messages
			// into its system context (GetRun).
			ne.Pending = false
		}
		req.Events = append(req.Events, ne)
	}
	req.Decide = func(cur *db.Session) (*db.Change, error) {
		if cur.Status == db.StatusTerminated {
			return nil, apierror.Conflictf("session %q is terminated and accepts no more events", cur.ID)
		}
		if cur.ArchivedAt != nil {
			return nil, apierror.Conflictf("session %q is archived and read-only: it accepts no more events", cur.ID)
		}
		var pending []string
		awaiting := false
		if cur.Status == db.StatusIdle && len(cur.StopReason) > 0 {
			var sr stopReason
			if err := json.Unmarshal(cur.StopReason, &sr); err == nil && sr.Type == "requires_action" {
				awaiting, pending = true, sr.EventIDs
			}
		}
		change := &db.Change{}
		answered := false
		busy := cur.Status != db.StatusIdle || cur.Queued > 0
		for i, ev := range events {
			switch ev.Type {
			case eventspec.UserMessage, eventspec.UserDefineOutcome:
				if ev.Type == eventspec.UserDefineOutcome && cur.OutcomeID != nil {
					return nil, apierror.Conflictf("session %q already has an active outcome %q: a session works toward one outcome at a time; "+
						"define the next once it ends (its outcome_evaluations entry has completed_at) or after a user.interrupt", cur.ID, *cur.OutcomeID)
				}
				if cur.BudgetExhausted() {
					return nil, apierror.Conflictf("session %q reached its budget (budget_reached): raise budget.max_list_cost with an update of the session to continue", cur.ID)
				}
				change.Wake = true
				if cur.Status == db.StatusIdle {
					change.To = db.StatusRunning
				}
				// Behind a turn (running, or started by an earlier message)
				// or behind messages still waiting, it waits outside the
				// log until the session takes it up (db/events.go).
				req.Events[i].Queued = busy
				busy = true
			case eventspec.UserInterrupt:
				if cur.Status == db.StatusRunning || cur.Status == db.StatusRescheduling {
					change.Wake, change.WakeKind = true, "interrupt"
				}
				// An interrupt needs no processing on an idle session.
				req.Events[i].Pending = cur.Status != db.StatusIdle
			case eventspec.UserToolResult:
				if !cur.SelfHosted {
					return nil, apierror.Invalid("events[%d]: user.tool_result answers a built-in tool call run by a self-hosted worker, but session %q is not self-hosted (its environment's config.type is not self_hosted); answer custom tools with user.custom_tool_result", i, cur.ID)
				}
			case eventspec.UserCustomToolResult, eventspec.UserToolConfirmation:
				if !awaiting || !slices.Contains(pending, ev.ToolUseID) {
					return nil, apierror.Conflictf("session %q is not waiting for a response to %q", cur.ID, ev.ToolUseID)
				}
				pending = slices.DeleteFunc(pending, func(id string) bool { return id == ev.ToolUseID })
				answered = true
			}
		}
		if answered {
			if len(pending) == 0 {
				change.To, change.Wake = db.StatusRunning, true
			} else if change.To == "" {
				// Some required actions remain: stay idle, remember which.
				sr, _ := json.Marshal(stopReason{Type: "requires_action", EventIDs: pending})
				change.To, change.StopReason = db.StatusIdle, sr
			}
		}
		if change.To != "" && (change.To != cur.Status || len(change.StopReason) > 0) {
			change.EventID = ids.New(ids.Event)
		}
		if change.WakeKind == "interrupt" && change.To == db.StatusRunning {
			change.WakeKind = "wakeup"
		}
		return change, nil
	}
	return req
}

// afterAppend runs after a commit: the direct wake-up of the workflow (the
// outbox relay covers failures) and metrics.
func (a *API) afterAppend(ctx context.Context, sessionID string, appended []db.Event, req *db.AppendRequest) {
	if len(appended) > 0 {
		a.eventsAppended.Add(float64(len(appended)))
	}
	if req == nil || a.deps.Wake == nil {
		return
	}
	a.deps.Wake(context.WithoutCancel(ctx), sessionID)
}

func (a *API) eventSend(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	body, err := a.readJSONBody(c, false)
	if err != nil {
		return err
	}
	events, err := eventspec.ParseSend(body)
	if err != nil {
		return err
	}
	types := make([]string, len(events))
	for i, ev := range events {
		types[i] = ev.Type
	}
	if err := checkWorkerEvents(c, types); err != nil {
		return err
	}
	ctx := c.Request().Context()
	if err := a.checkFileSources(ctx, events, "events"); err != nil {
		return err
	}
	batches := []threadBatch{{target: id, events: events}}
	if needsRouting(events) {
		sess, err := a.deps.Store.SessionGet(ctx, id)
		if err != nil {
			return sessionError(id, err)
		}
		if batches, err = a.routeEvents(ctx, sess, events); err != nil {
			return err
		}
	}
	// The response lists the client's events, not the status events the
	// admission appended after them, nor the interrupts it copied to the
	// threads.
	out := make([]json.RawMessage, 0, len(events))
	for _, b := range batches {
		appended, err := a.admit(ctx, b.target, b.events)
		if err != nil {
			return err
		}
		if b.fanned {
			continue
		}
		for i := range appended[:len(b.events)] {
			out = append(out, appended[i].JSON())
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"data": out})
}

// needsRouting reports whether events may go to a session thread other
// than the primary one: an interrupt (it stops every thread) or an
// answer (it goes to its tool use's thread). Messages are the primary
// thread's.
func needsRouting(events []eventspec.Event) bool {
	return slices.ContainsFunc(events, func(ev eventspec.Event) bool {
		return ev.ThreadID != "" || ev.ToolUseID != "" || ev.Type == eventspec.UserInterrupt
	})
}

// admit appends the client's events to session (or child thread) id as
// one admission and wakes its workflow.
func (a *API) admit(ctx context.Context, id string, events []eventspec.Event) ([]db.Event, error) {
	types := make([]string, len(events))
	for i, ev := range events {
		types[i] = ev.Type
	}
	req := a.admission(events, a.now())
	_, appended, err := a.deps.Store.Append(ctx, id, req)
	var tu *db.ToolUseError
	if errors.As(err, &tu) {
		if tu.Answered {
			return nil, apierror.Conflictf("tool use %q of session %q is already answered: a tool call takes one result", tu.ID, id)
		}
		return nil, apierror.NotFoundf("tool use %q is not an agent.tool_use event of session %q", tu.ID, id)
	}
	if err != nil {
		return nil, sessionError(id, err)
	}
	if !slices.ContainsFunc(types, func(t string) bool { return t != eventspec.UserToolResult }) {
		// Tool results only: the turn awaiting them wakes on the events
		// notification; the workflow owes nothing.
		req = nil
	}
	a.afterAppend(ctx, id, appended, req)
	return appended, nil
}

func (a *API) eventList(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	return a.listEvents(c, id)
}

// listEvents answers with a page of the events of session (or child
// thread) id.
func (a *API) listEvents(c echo.Context, id string) error {
	page, err := parsePage(c, maxEventPageLimit)
	if err != nil {
		return err
	}
	p := db.EventListParams{Limit: page.limit}
	if c.QueryParam("limit") == "" {
		p.Limit = 100
	}
	q := c.QueryParams()
	for _, t := range append(q["types[]"], q["types"]...) {
		if t == "" || len(t) > 64 || strings.ContainsAny(t, " \t,") {
			return apierror.Invalid("types[]: invalid event type %q", t)
		}
		p.Types = append(p.Types, t)
	}
	if p.CreatedGT, p.CreatedGTE, p.CreatedLT, p.CreatedLTE, err = parseCreatedRange(c); err != nil {
		return err
	}
	switch order := c.QueryParam("order"); order {
	case "", "asc":
	case "desc":
		p.Descending = true
	default:
		return apierror.Invalid("order: must be asc or desc, got %q", order)
	}
	if page.cursor != "" {
		n, err := parseEventCursor(page.cursor)
		if err != nil {
			return err
		}
		if p.Descending {
			p.BeforeSeq = &n
		} else {
			p.AfterSeq = &n
		}
	}
	ctx := c.Request().Context()
	if _, err := a.deps.Store.SessionGet(ctx, id); err != nil {
		return sessionError(id, err)
	}
	events, more, err := a.deps.Store.EventList(ctx, id, p)
	if err != nil {
		return err
	}
	return writeList(c, events, more, func(e db.Event) json.RawMessage { return e.JSON() }, func(e db.Event) string { return eventCursor(e.Seq) })
}
