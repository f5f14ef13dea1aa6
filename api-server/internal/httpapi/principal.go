package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/auth"
	"github.com/mangohq/mango/db"
)

// principal is what a request's credential may act for: an API key (all
// of the API but a self-hosted worker's work routes), an environment key
// (one environment's work queue and its sessions' tool results), or a
// work item's sessions token (that item's lease and its session).
type principal struct {
	kind auth.Kind
	// keyID is the id of the API key or environment key.
	keyID string
	// environmentID binds an environment key or a work token.
	environmentID string
	// workID and sessionID bind a work token (sessionID is empty for a
	// healthcheck item).
	workID, sessionID string
}

const principalKey = "principal"

// principalOf returns the request's principal; a request that reached a
// handler without one (public paths) acts as nothing.
func principalOf(c echo.Context) *principal {
	p, _ := c.Get(principalKey).(*principal)
	if p == nil {
		return &principal{kind: -1}
	}
	return p
}

// routeClass groups the routes by who may call them.
type routeClass int

// Everything not listed in routeClasses is for API keys only.
const (
	// workQueue: poll, ack, list, stats of an environment's queue
	// (environment key of that environment).
	workQueue routeClass = iota + 1
	// workLease: heartbeat and stop of one item (environment key of its
	// environment, or the item's own token).
	workLease
	// sessionWorker: reading a session and sending it tool results
	// (API key; environment key of its environment; its item's token).
	sessionWorker
	// skillReader: reading a skill version and its archive, as the SDK's
	// worker downloads a session's skills (API key; environment key of an
	// environment with a self-hosted session that has the skill; the token
	// of an item whose session has it).
	skillReader
	// memoryWorker: the memories of a memory store, as the SDK's
	// self-hosted worker syncs a session's memory stores (API key; the
	// token of an item whose session has the store attached: reads, and
	// writes when attached read_write).
	memoryWorker
)

// routeClasses classifies the routes that are not API-key only, by
// method and route template. Work get and update stay API-key only.
var routeClasses = map[string]routeClass{
	"GET /v1/environments/:id/work/poll":            workQueue,
	"POST /v1/environments/:id/work/:wid/ack":       workQueue,
	"GET /v1/environments/:id/work":                 workQueue,
	"GET /v1/environments/:id/work/stats":           workQueue,
	"POST /v1/environments/:id/work/:wid/heartbeat": workLease,
	"POST /v1/environments/:id/work/:wid/stop":      workLease,
	"GET /v1/sessions/:id":                          sessionWorker,
	"GET /v1/sessions/:id/events":                   sessionWorker,
	"GET /v1/sessions/:id/events/stream":            sessionWorker,
	"POST /v1/sessions/:id/events":                  sessionWorker,
	"GET /v1/skills/:id/versions/:version":          skillReader,
	"GET /v1/skills/:id/versions/:version/content":  skillReader,
	"GET /v1/memory_stores/:id/memories":            memoryWorker,
	"POST /v1/memory_stores/:id/memories":           memoryWorker,
	"GET /v1/memory_stores/:id/memories/:memory":    memoryWorker,
	"POST /v1/memory_stores/:id/memories/:memory":   memoryWorker,
	"DELETE /v1/memory_stores/:id/memories/:memory": memoryWorker,
}

// authenticate resolves the request's credential to a principal and
// checks that the principal may call the route.
func (a *API) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if public[c.Request().URL.Path] {
			return next(c)
		}
		cred, ok := auth.FromRequest(c.Request())
		if !ok {
			return apierror.Unauthenticated("missing API key: send it (or a self-hosted worker's environment key or work item token) in the x-api-key header or as Authorization: Bearer <key>")
		}
		p, err := a.resolve(c.Request().Context(), cred)
		if err != nil {
			return err
		}
		if err := a.authorize(c, p); err != nil {
			return err
		}
		c.Set(principalKey, p)
		if p.kind == auth.KindAPIKey {
			c.Set("api_key_id", p.keyID)
		}
		return next(c)
	}
}

// resolve looks a credential up by its kind. An unknown, revoked or
// expired credential is a 401; the message never repeats the credential.
func (a *API) resolve(ctx context.Context, cred string) (*principal, error) {
	kind := auth.KindOf(cred)
	switch kind {
	case auth.KindEnvironmentKey:
		h := auth.Hash(cred)
		if p, ok := a.envKeys.Get(h); ok {
			return p, nil
		}
		k, err := a.deps.Store.EnvironmentKeyByHash(ctx, h, a.now())
		if errors.Is(err, db.ErrNotFound) {
			return nil, apierror.Unauthenticated("invalid environment key: it is unknown, revoked or expired")
		}
		if err != nil {
			return nil, err
		}
		p := &principal{kind: kind, keyID: k.ID, environmentID: k.EnvironmentID}
		a.envKeys.Put(h, p)
		return p, nil
	case auth.KindWorkToken:
		// Not cached: a stopped item's token stops working at once.
		w, err := a.deps.Store.WorkBySecretHash(ctx, auth.Hash(cred))
		if errors.Is(err, db.ErrNotFound) {
			return nil, apierror.Unauthenticated("invalid work item secret: it is unknown, superseded by a later poll, or its work item has stopped")
		}
		if err != nil {
			return nil, err
		}
		return &principal{kind: kind, environmentID: w.EnvironmentID, workID: w.ID, sessionID: w.SessionID}, nil
	}
	keyID, err := a.deps.Keys.Verify(ctx, cred)
	if errors.Is(err, auth.ErrInvalidKey) {
		return nil, apierror.Unauthenticated("invalid API key")
	}
	if err != nil {
		return nil, err
	}
	return &principal{kind: kind, keyID: keyID}, nil
}

// authorize checks that p may call the matched route (403 otherwise).
func (a *API) authorize(c echo.Context, p *principal) error {
	method, route := c.Request().Method, c.Path()
	class, listed := routeClasses[method+" "+route]
	if p.kind == auth.KindAPIKey {
		if listed && (class == workQueue || class == workLease) {
			return apierror.Forbidden("%s %s accepts only the environment's key (or, for heartbeat and stop, the work item's secret), not an API key", method, route)
		}
		return nil
	}
	if !listed {
		return apierror.Forbidden("a%s %s may call only the work routes of its environment and the session routes of a self-hosted worker; %s %s is not one of them",
			article(p.kind), p.kind, method, route)
	}
	switch class {
	case sessionWorker:
		return a.checkSessionRoute(c, p)
	case skillReader:
		return a.checkSkillRoute(c, p)
	case memoryWorker:
		return a.checkMemoryRoute(c, p)
	}
	return checkWorkRoute(c, p, class)
}

func article(k auth.Kind) string {
	if k == auth.KindEnvironmentKey {
		return "n"
	}
	return ""
}

// checkWorkRoute binds work routes to the credential's environment and,
// for a work token, to its own item's heartbeat and stop.
func checkWorkRoute(c echo.Context, p *principal, class routeClass) error {
	env := c.Param("id")
	if env != p.environmentID {
		return apierror.Forbidden("this %s is bound to environment %q and may not act on environment %q", p.kind, p.environmentID, env)
	}
	if p.kind != auth.KindWorkToken {
		return nil
	}
	if class != workLease {
		return apierror.Forbidden("a work item secret may call only its own item's heartbeat and stop, not %s %s", c.Request().Method, c.Path())
	}
	if wid := c.Param("wid"); wid != p.workID {
		return apierror.Forbidden("this work item secret is bound to work item %q and may not act on %q", p.workID, wid)
	}
	return nil
}

// checkSkillRoute lets a worker's credential read only the skills of its
// sessions: its item's session (a work token) or a self-hosted session of
// its environment (an environment key).
func (a *API) checkSkillRoute(c echo.Context, p *principal) error {
	skill := c.Param("id")
	ok, err := a.deps.Store.SkillReadable(c.Request().Context(), skill, p.sessionID, p.environmentID)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	if p.kind == auth.KindWorkToken {
		return apierror.Forbidden("this work item secret may read only the skills of session %q's agent; skill %q is not one of them", p.sessionID, skill)
	}
	return apierror.Forbidden("this environment key may read only the skills of its environment's self-hosted sessions; skill %q is not one of them", skill)
}

// checkMemoryRoute lets a work token use the memories of the stores
// attached to its session: reads, and writes when attached read_write.
// Environment keys may not (the SDK syncs memory with the work token).
func (a *API) checkMemoryRoute(c echo.Context, p *principal) error {
	store := c.Param("id")
	if p.kind != auth.KindWorkToken || p.sessionID == "" {
		return apierror.Forbidden("the memories of memory store %q accept an API key or the secret of a work item whose session has the store attached, not a%s %s",
			store, article(p.kind), p.kind)
	}
	access, err := a.deps.Store.MemoryStoreAccess(c.Request().Context(), store, p.sessionID)
	if err != nil {
		return err
	}
	switch {
	case access == "":
		return apierror.Forbidden("this work item secret may use only the memory stores attached to session %q; memory store %q is not one of them", p.sessionID, store)
	case access == db.AccessReadOnly && c.Request().Method != http.MethodGet:
		return apierror.Forbidden("memory store %q is attached read_only to session %q; this work item secret may read its memories, not change them", store, p.sessionID)
	}
	return nil
}

// checkSessionRoute binds session routes to the credential's session (a
// work token) or to the sessions of its environment (an environment key).
func (a *API) checkSessionRoute(c echo.Context, p *principal) error {
	sid := c.Param("id")
	if p.kind == auth.KindWorkToken {
		if p.sessionID == "" || sid != p.sessionID {
			return apierror.Forbidden("this work item secret is bound to session %q and may not act on session %q", p.sessionID, sid)
		}
		return nil
	}
	s, err := a.deps.Store.SessionGet(c.Request().Context(), sid)
	if err != nil {
		return sessionError(sid, err)
	}
	if s.EnvironmentID == nil || *s.EnvironmentID != p.environmentID {
		return apierror.Forbidden("this environment key is bound to environment %q; session %q is not one of its sessions", p.environmentID, sid)
	}
	return nil
}

// checkWorkerEvents refuses the events a self-hosted worker's credential
// may not send: it sends tool results only.
func checkWorkerEvents(c echo.Context, types []string) error {
	p := principalOf(c)
	if p.kind != auth.KindEnvironmentKey && p.kind != auth.KindWorkToken {
		return nil
	}
	for i, t := range types {
		if t != "user.tool_result" && t != "user.custom_tool_result" {
			return apierror.Forbidden("events[%d]: a%s %s may send only user.tool_result and user.custom_tool_result events, not %s", i, article(p.kind), p.kind, t)
		}
	}
	return nil
}
