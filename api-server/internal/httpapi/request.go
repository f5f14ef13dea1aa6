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
	"github.com/mangohq/mango/api-server/internal/ids"
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
	return jsonx.DecodeObject(body, in, "")
}

func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainLimit))
}

// pathID returns the path parameter param when it is a well-formed id of
// prefix; anything else names no such resource: notFound, answered without
// touching the database.
func pathID(c echo.Context, param, prefix string, notFound func(string) error) (string, error) {
	id := c.Param(param)
	if !ids.Valid(prefix, id) {
		return "", notFound(id)
	}
	return id, nil
}

// The largest limit a list accepts: files and session events list up to
// maxFilePageLimit and maxEventPageLimit per page (the SDK's session tool
// runner reads a session's history 1000 events at a time), everything else
// up to maxPageLimit.
const (
	maxPageLimit      = 100
	maxFilePageLimit  = 1000
	maxEventPageLimit = 1000
)

// pageParams are the common list query parameters.
type pageParams struct {
	limit  int
	cursor string
}

func parsePage(c echo.Context, maxLimit int) (pageParams, error) {
	p := pageParams{limit: 20}
	if err := checkQuery(c); err != nil {
		return p, err
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return p, apierror.Invalid("limit: must be an integer between 1 and %d, got %q", maxLimit, v)
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

// writeList answers a list endpoint with items in their wire form (conv)
// and, when more follow, next_page: the cursor of the last item.
func writeList[T, R any](c echo.Context, items []T, more bool, conv func(T) R, cursor func(T) string) error {
	resp := listResponse[R]{Data: make([]R, 0, len(items))}
	for _, it := range items {
		resp.Data = append(resp.Data, conv(it))
	}
	if more && len(items) > 0 {
		next := cursor(items[len(items)-1])
		resp.NextPage = &next
	}
	return c.JSON(http.StatusOK, resp)
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
