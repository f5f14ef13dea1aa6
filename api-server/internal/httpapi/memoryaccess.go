package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/auth"
	"github.com/mangohq/mango/db"
)

// checkMemoryRoute lets a work item's token act on the memories of the
// stores attached to its session (a live memory_store resource): reads
// always, writes when an attachment is read_write. An environment key is
// refused, as the SDK documents: its worker sends the item's token.
func (a *API) checkMemoryRoute(c echo.Context, p *principal) error {
	method, route := c.Request().Method, c.Path()
	if p.kind != auth.KindWorkToken {
		return apierror.Forbidden("%s %s does not accept an environment key; a self-hosted worker sends its work item's secret (sessions token) for the memories of its session's memory stores",
			method, route)
	}
	store := c.Param("id")
	if p.sessionID == "" {
		return apierror.Forbidden("this work item secret is bound to no session, so it may not act on memory store %q", store)
	}
	rs, err := a.deps.Store.ResourcesOfSession(c.Request().Context(), p.sessionID)
	if err != nil {
		return err
	}
	attached, writable := false, false
	for _, r := range rs {
		if r.Type == db.ResourceMemoryStore && r.DeletedAt == nil && r.MemoryStoreID == store {
			attached = true
			writable = writable || r.Access == db.AccessReadWrite
		}
	}
	if !attached {
		return apierror.Forbidden("this work item secret may act only on the memory stores attached to session %q; memory store %q is not one of them", p.sessionID, store)
	}
	if method != http.MethodGet && !writable {
		return apierror.Forbidden("memory store %q is attached to session %q read_only; this work item secret may read its memories but not change them", store, p.sessionID)
	}
	return nil
}
