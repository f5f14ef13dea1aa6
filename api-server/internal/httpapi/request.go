package httpapi

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/jsonx"
)

// drainLimit bounds how much of an oversized body is read and discarded so
// the connection can be reused; beyond it the connection is closed.
const drainLimit = 64 << 20

// readJSONBody returns the request body after checking its size and
// content type. An empty body is returned as nil when allowEmpty is set.
func (a *API) readJSONBody(c echo.Context, allowEmpty bool) ([]byte, error) {
	r := c.Request()
	limit := a.deps.MaxBodyBytes
	if r.ContentLength > limit {
		drain(r.Body)
		return nil, apierror.TooLarge(limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, apierror.TooLarge(limit)
	}
	if err != nil {
		return nil, apierror.Invalid("could not read the request body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if allowEmpty {
			return nil, nil
		}
		return nil, apierror.Invalid("request body is empty; expected a JSON object")
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return nil, apierror.Invalid("Content-Type must be application/json, got %q", ct)
	}
	return body, nil
}

// bindObject reads the request body as one JSON object into in: size and
// content type checked, unknown fields and wrong types refused with the
// field named.
func (a *API) bindObject(c echo.Context, in any) error {
	body, err := a.readJSONBody(c, false)
	if err != nil {
		return err
	}
	if err := jsonx.Object(body, ""); err != nil {
		return err
	}
	return jsonx.Decode(body, in, "")
}

func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainLimit))
}

// pageParams are the common list query parameters.
type pageParams struct {
	limit  int
	cursor string
}

func parsePage(c echo.Context) (pageParams, error) {
	p := pageParams{limit: 20}
	if err := checkQuery(c); err != nil {
		return p, err
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return p, apierror.Invalid("limit: must be an integer between 1 and 100, got %q", v)
		}
		p.limit = n
	}
	if v := c.QueryParam("page"); v != "" {
		cursor, err := decodeCursor(v)
		if err != nil {
			return p, err
		}
		p.cursor = cursor
	}
	return p, nil
}

// checkQuery rejects a query string that does not parse, which echo would
// otherwise silently treat as empty.
func checkQuery(c echo.Context) error {
	if _, err := url.ParseQuery(c.Request().URL.RawQuery); err != nil {
		return apierror.Invalid("malformed query string: %v", err)
	}
	return nil
}

func parseBoolParam(c echo.Context, name string) (bool, error) {
	v := c.QueryParam(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, apierror.Invalid("%s: must be true or false, got %q", name, v)
	}
	return b, nil
}

func parseTimeParam(c echo.Context, name string) (*time.Time, error) {
	v := c.QueryParam(name)
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, apierror.Invalid("%s: must be an RFC 3339 timestamp, got %q", name, v)
	}
	t = t.UTC()
	return &t, nil
}

// listResponse is the body of every list endpoint.
type listResponse[T any] struct {
	Data     []T     `json:"data"`
	NextPage *string `json:"next_page"`
}

// parseCreatedRange reads the created_at[gt|gte|lt|lte] filters.
func parseCreatedRange(c echo.Context) (gt, gte, lt, lte *time.Time, err error) {
	for name, dst := range map[string]**time.Time{"created_at[gt]": &gt, "created_at[gte]": &gte, "created_at[lt]": &lt, "created_at[lte]": &lte} {
		if *dst, err = parseTimeParam(c, name); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	return gt, gte, lt, lte, nil
}
