package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// apiClient calls the public API in this process with the signed-in API
// key, as any client would: the console has no other way in.
type apiClient struct {
	http *http.Client
	key  string
}

// apiError is an error answer of the API: its status and the message the
// API gives clients (never an internal cause).
type apiError struct {
	Status  int
	Type    string
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (%d): %s", e.Type, e.Status, e.Message) }

// isStatus reports whether err is an API answer with that status.
func isStatus(err error, status int) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == status
}

// request builds a request to the API path (with query) carrying the key.
func (c *apiClient) request(ctx context.Context, method, path string, q url.Values, body io.Reader, contentType string) (*http.Request, error) {
	u := "http://console.internal" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", c.key)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("User-Agent", "mango-console")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req, nil
}

// do sends req and returns the response of a 2xx answer (the caller
// closes its body); any other answer is an *apiError.
func (c *apiClient) do(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body)
	return nil, &apiError{Status: resp.StatusCode, Type: body.Error.Type, Message: body.Error.Message}
}

// call sends a JSON request (in nil: none) and decodes a JSON answer into
// out (nil: discarded).
func (c *apiClient) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	req, err := c.request(ctx, method, path, q, body, ct)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	return dec.Decode(out)
}

func (c *apiClient) get(ctx context.Context, path string, q url.Values, out any) error {
	return c.call(ctx, http.MethodGet, path, q, nil, out)
}

func (c *apiClient) post(ctx context.Context, path string, in, out any) error {
	return c.call(ctx, http.MethodPost, path, nil, in, out)
}

func (c *apiClient) del(ctx context.Context, path string) error {
	return c.call(ctx, http.MethodDelete, path, nil, nil, nil)
}

// upload sends one file to the Files API and returns its id.
func (c *apiClient) upload(ctx context.Context, name, contentType string, r io.Reader) (string, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		h := make(map[string][]string)
		h["Content-Disposition"] = []string{fmt.Sprintf(`form-data; name="file"; filename=%q`, sanitizeFilename(name))}
		h["Content-Type"] = []string{contentType}
		part, err := mw.CreatePart(h)
		if err == nil {
			_, err = io.Copy(part, r)
		}
		if err == nil {
			err = mw.Close()
		}
		_ = pw.CloseWithError(err)
	}()
	req, err := c.request(ctx, http.MethodPost, "/v1/files", nil, pr, mw.FormDataContentType())
	if err != nil {
		return "", err
	}
	req.Header.Set("anthropic-beta", "files-api-2025-04-14")
	resp, err := c.do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	var f struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		return "", err
	}
	return f.ID, nil
}

// sanitizeFilename keeps a name fit for a quoted header parameter.
func sanitizeFilename(name string) string {
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == '"' || r == '\\' || r == 0x7f {
			return '_'
		}
		return r
	}, name)
	if name == "" {
		return "upload"
	}
	return name
}

// listQuery is the API query of the list page a visitor asked for: limit,
// the page cursor followed (?page=) and, with ?archived=1, archived items
// too (archived reports that).
func listQuery(r *http.Request, limit int) (q url.Values, archived bool) {
	q = url.Values{"limit": {strconv.Itoa(limit)}}
	archived = r.FormValue("archived") == "1"
	if archived {
		q.Set("include_archived", "true")
	}
	if pg := r.FormValue("page"); pg != "" {
		q.Set("page", pg)
	}
	return q, archived
}

// listPage is one page of a list of resources, newest first.
type listPage struct {
	Items    []map[string]any
	Archived bool   // archived ones are listed too
	Next     string // the next page's cursor, or ""
}

// listOf is the list page of the API's list at path (agents,
// environments, vaults), rendered with the page named page: 25 a page,
// archived ones on request.
func (c *Console) listOf(path, page string) handler {
	return func(w http.ResponseWriter, r *http.Request, v *visit) error {
		q, archived := listQuery(r, 25)
		var l list[map[string]any]
		if err := v.api.get(r.Context(), path, q, &l); err != nil {
			return err
		}
		c.render(w, r, v, http.StatusOK, page, listPage{Items: l.Data, Archived: archived, Next: l.NextPage})
		return nil
	}
}

// list is a page of a list answer.
type list[T any] struct {
	Data     []T    `json:"data"`
	NextPage string `json:"next_page"`
	HasMore  bool   `json:"has_more"`
	LastID   string `json:"last_id"`
	FirstID  string `json:"first_id"`
}
