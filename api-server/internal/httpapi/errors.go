package httpapi

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/db"
)

// handleError writes every error as the Anthropic error envelope. Public
// errors keep their message; anything else is logged with its cause and
// answered with a generic api_error.
func (a *API) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	pub := a.publicError(err, c)
	if pub.NoRetry {
		c.Response().Header().Set("x-should-retry", "false")
	}
	env := apierror.Envelope{Type: "error", Error: apierror.Body{Type: pub.Type, Message: pub.Message, Details: pub.Details}, RequestID: requestIDOf(c)}
	var werr error
	if c.Request().Method == http.MethodHead {
		werr = c.NoContent(pub.Status)
	} else {
		werr = c.JSON(pub.Status, env)
	}
	if werr != nil {
		a.deps.Logger.WarnContext(c.Request().Context(), "write error response", "err", werr, "request_id", env.RequestID)
	}
}

func (a *API) publicError(err error, c echo.Context) *apierror.Error {
	var pub *apierror.Error
	var jerr *jsonx.Error
	var herr *echo.HTTPError
	switch {
	case errors.As(err, &pub):
		return pub
	case errors.As(err, &jerr):
		return apierror.Invalid("%s", jerr.Message)
	case errors.As(err, &herr):
		switch herr.Code {
		case http.StatusNotFound:
			return apierror.NotFoundf("no route for %s %s", c.Request().Method, c.Request().URL.Path)
		case http.StatusMethodNotAllowed:
			return apierror.ForStatus(herr.Code, "method "+c.Request().Method+" is not allowed on "+c.Request().URL.Path)
		}
		if herr.Code < 500 {
			return apierror.ForStatus(herr.Code, http.StatusText(herr.Code))
		}
	case errors.Is(err, db.ErrNotFound):
		return apierror.NotFoundf("not found")
	case db.Unavailable(err):
		// PostgreSQL restarting or unreachable: nothing was done, and the
		// same request may succeed in a moment.
		a.deps.Logger.WarnContext(c.Request().Context(), "database unavailable", "err", err, "method", c.Request().Method, "route", routeOf(c), "request_id", requestIDOf(c))
		return apierror.Unavailable("the service's database is unavailable for a moment; retry the request")
	}
	a.deps.Logger.ErrorContext(c.Request().Context(), "internal error", "err", err, "method", c.Request().Method, "route", routeOf(c), "request_id", requestIDOf(c))
	return apierror.Internal()
}

// notFoundAs is notFound when err is the store's ErrNotFound, else err:
// the answer for a resource the request named that does not exist.
func notFoundAs(err, notFound error) error {
	if errors.Is(err, db.ErrNotFound) {
		return notFound
	}
	return err
}
