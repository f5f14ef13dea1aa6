package httpapi

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/db"
)

// Page cursors are the opaque `page` values list endpoints hand out in
// next_page and prev_page: the unpadded URL-safe base64 of a position. Each
// kind has its encoder and decoder here, and a decoder returns exactly what
// its encoder was given:
//
//	t:<created_at µs>:<id>      agents, environments: after (created_at, id)
//	n:<µs>:<id>, p:<µs>:<id>    sessions: the page after / before that item
//	s:<seq>                     a session's events: after (or before) seq ≥ 0
//	v:<version>                 an agent's versions: before version ≥ 1
//
// Decoders accept creation times of years 1 to 9999 only (what RFC 3339,
// and so the API, can express), so that a forged cursor is a 400, not a
// database range error.

// Creation times a keyset cursor may carry.
var (
	minCursorMicro = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	maxCursorMicro = time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC).UnixMicro()
)

func malformedCursor(pageMembers string) error {
	return apierror.Invalid("page: malformed cursor; pass the %s value of a previous response", pageMembers)
}

func encodeCursor(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// decodeCursor returns the position the page value v encodes.
func decodeCursor(v string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return "", malformedCursor("next_page")
	}
	return string(raw), nil
}

func keysetCursor(kind string, t time.Time, id string) string {
	return encodeCursor(fmt.Sprintf("%s:%d:%s", kind, t.UnixMicro(), id))
}

// parseKeyset splits a decoded "<kind>:<µs>:<id>" position.
func parseKeyset(s string) (kind string, t time.Time, id string, ok bool) {
	kind, rest, ok1 := strings.Cut(s, ":")
	micro, id, ok2 := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(micro, 10, 64)
	if !ok1 || !ok2 || err != nil || id == "" || n < minCursorMicro || n > maxCursorMicro {
		return "", time.Time{}, "", false
	}
	return kind, time.UnixMicro(n).UTC(), id, true
}

// timeCursor is a keyset position in a list ordered by (created_at, id).
func timeCursor(t time.Time, id string) string { return keysetCursor("t", t, id) }

// parseKeysetPage is parsePage followed by pageAfter: the page's limit
// and the keyset position its cursor names (nil on the first page).
func parseKeysetPage(c echo.Context, maxLimit int) (pageParams, *db.Cursor, error) {
	page, err := parsePage(c, maxLimit)
	if err != nil {
		return page, nil, err
	}
	after, err := pageAfter(page.cursor)
	return page, after, err
}

// pageAfter decodes a (created_at, id) page cursor; nil for the first page.
func pageAfter(cursor string) (*db.Cursor, error) {
	if cursor == "" {
		return nil, nil
	}
	t, id, err := parseTimeCursor(cursor)
	if err != nil {
		return nil, err
	}
	return &db.Cursor{CreatedAt: t, ID: id}, nil
}

func parseTimeCursor(s string) (time.Time, string, error) {
	kind, t, id, ok := parseKeyset(s)
	if !ok || kind != "t" {
		return time.Time{}, "", malformedCursor("next_page")
	}
	return t, id, nil
}

// sessionCursor is a page position: "n" continues after the item in list
// order, "p" returns the page before it.
func sessionCursor(dir string, createdAt time.Time, id string) string {
	return keysetCursor(dir, createdAt, id)
}

func parseSessionCursor(s string) (dir string, t time.Time, id string, err error) {
	dir, t, id, ok := parseKeyset(s)
	if !ok || (dir != "n" && dir != "p") {
		return "", time.Time{}, "", malformedCursor("next_page or prev_page")
	}
	return dir, t, id, nil
}

func eventCursor(seq int64) string { return encodeCursor("s:" + strconv.FormatInt(seq, 10)) }

func parseEventCursor(s string) (int64, error) { return parseCounter(s, "s:", 0) }

func versionCursor(version int64) string { return encodeCursor("v:" + strconv.FormatInt(version, 10)) }

func parseVersionCursor(s string) (int64, error) { return parseCounter(s, "v:", 1) }

func parseCounter(s, prefix string, minValue int64) (int64, error) {
	v, ok := strings.CutPrefix(s, prefix)
	n, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil || n < minValue {
		return 0, malformedCursor("next_page")
	}
	return n, nil
}
