package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// The Files API: uploads stream from the multipart body straight into the
// file store (never a whole file in memory, nor MaxBodyBytes: the limit is
// FilesMaxBytes); the metadata row is written only once the bytes are
// stored, so an upload that fails or dies leaves no visible file.

// multipartSlack is what a multipart body may carry beyond the file's
// bytes (boundaries, part headers) before its Content-Length alone proves
// the file too large.
const multipartSlack = 64 << 10

// fileResponse is the wire form of a File (BetaFileMetadata).
type fileResponse struct {
	Type         string     `json:"type"`
	ID           string     `json:"id"`
	Filename     string     `json:"filename"`
	MimeType     string     `json:"mime_type"`
	SizeBytes    int64      `json:"size_bytes"`
	CreatedAt    time.Time  `json:"created_at"`
	Downloadable bool       `json:"downloadable"`
	Scope        *fileScope `json:"scope"`
	ExpiresAt    *time.Time `json:"expires_at"`
}

// fileScope is the session a file belongs to.
type fileScope struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

func toFileResponse(f *db.File) *fileResponse {
	r := &fileResponse{Type: "file", ID: f.ID, Filename: f.Filename, MimeType: f.MimeType, SizeBytes: f.SizeBytes,
		CreatedAt: f.CreatedAt, Downloadable: f.Downloadable, ExpiresAt: f.ExpiresAt}
	if f.ScopeSessionID != "" {
		r.Scope = &fileScope{Type: "session", ID: f.ScopeSessionID}
	}
	return r
}

func fileNotFound(id string) error { return apierror.NotFoundf("file %q not found", id) }

func fileID(c echo.Context) (string, error) { return pathID(c, "id", ids.File, fileNotFound) }

func (a *API) fileUpload(c echo.Context) error {
	r := c.Request()
	limit := a.deps.FilesMaxBytes
	if r.ContentLength > limit+multipartSlack {
		drain(r.Body)
		return fileTooLarge(limit)
	}
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return apierror.Invalid("Content-Type must be multipart/form-data with a boundary, got %q", ct)
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	var f *db.File
	var expiresIn time.Duration
	ok := false
	defer func() {
		if f != nil && !ok {
			a.deleteBlob(c.Request().Context(), f.StorageKey)
		}
	}()
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return apierror.Invalid("malformed multipart/form-data body: %v", err)
		}
		switch name := part.FormName(); name {
		case "file":
			if f != nil {
				return apierror.Invalid("file: only one file may be uploaded per request")
			}
			if f, err = a.storeUpload(c, part, limit); err != nil {
				return err
			}
		case "expires_in_seconds":
			if expiresIn, err = parseExpiresIn(part); err != nil {
				return err
			}
		default:
			return apierror.Invalid("unknown form field %q; expected a part named file", name)
		}
	}
	if f == nil {
		return apierror.Invalid("file: required (a multipart/form-data part named file)")
	}
	if expiresIn > 0 {
		at := f.CreatedAt.Add(expiresIn)
		f.ExpiresAt = &at
	}
	if err := a.deps.Store.FileInsert(r.Context(), f); err != nil {
		return err
	}
	ok = true
	return c.JSON(http.StatusOK, toFileResponse(f))
}

// storeUpload streams one file part into the store and returns the file
// it makes (not yet inserted). On error nothing is stored.
func (a *API) storeUpload(c echo.Context, part *multipart.Part, limit int64) (*db.File, error) {
	// part.FileName() keeps only the last path element; the name is
	// validated as sent.
	_, disp, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return nil, apierror.Invalid("file: malformed Content-Disposition header of the part")
	}
	sent := disp["filename"]
	mediaType := filestore.MediaType(part.Header.Get("Content-Type"), sent)
	name := filestore.UploadName(sent, mediaType)
	if err := filestore.CheckFilename(name); err != nil {
		return nil, apierror.Invalid("file: %v", err)
	}
	f := &db.File{ID: ids.New(ids.File), Filename: name, MimeType: mediaType,
		StorageKey: filestore.NewKey(), Origin: db.FileOriginUpload, CreatedAt: a.now()}
	h := sha256.New()
	body := &filestore.ErrReader{R: part}
	n, err := a.deps.Files.Put(c.Request().Context(), f.StorageKey, io.TeeReader(body, h), limit)
	switch {
	case errors.Is(err, filestore.ErrTooLarge):
		drain(c.Request().Body)
		return nil, fileTooLarge(limit)
	case body.Err != nil:
		return nil, apierror.Invalid("could not read the uploaded file: the request body ended early or is malformed")
	case err != nil:
		return nil, fmt.Errorf("store upload: %w", err)
	}
	f.SizeBytes, f.SHA256 = n, hex.EncodeToString(h.Sum(nil))
	return f, nil
}

// File lifetimes a client may ask for (expires_in_seconds), as on the
// hosted API: one hour to ninety days.
const (
	MinExpiresIn = 3600
	MaxExpiresIn = 7776000
)

// parseExpiresIn reads the expires_in_seconds form field.
func parseExpiresIn(part *multipart.Part) (time.Duration, error) {
	b, err := io.ReadAll(io.LimitReader(part, 32))
	if err != nil {
		return 0, apierror.Invalid("expires_in_seconds: could not read the field")
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < MinExpiresIn || n > MaxExpiresIn {
		return 0, apierror.Invalid("expires_in_seconds: must be an integer between %d (one hour) and %d (ninety days), got %q", MinExpiresIn, MaxExpiresIn, b)
	}
	return time.Duration(n) * time.Second, nil
}

func fileTooLarge(limit int64) error {
	return &apierror.Error{Status: http.StatusRequestEntityTooLarge, Type: apierror.RequestTooLarge,
		Message: fmt.Sprintf("file exceeds the maximum size of %d bytes", limit)}
}

// deleteBlob removes bytes no file references any more; a failure leaves
// them in the store and is logged.
func (a *API) deleteBlob(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := a.deps.Files.Delete(ctx, key); err != nil {
		a.deps.Logger.ErrorContext(ctx, "file bytes left in the store", "storage_key", key, "err", err)
	}
}

func (a *API) fileList(c echo.Context) error {
	page, err := parsePage(c, maxFilePageLimit)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	p := db.FileListParams{Limit: page.limit, Now: a.now()}
	if p.After, err = pageAfter(page.cursor); err != nil {
		return err
	}
	if v := q.Get("scope_id"); v != "" {
		if !ids.Valid(ids.Session, v) {
			return apierror.Invalid("scope_id: must be a session id (%s...), got %q", ids.Session, v)
		}
		p.ScopeSessionID = v
	}
	p.IDs = append(q["ids[]"], q["ids"]...)
	if len(p.IDs) > 1000 {
		return apierror.Invalid("ids: at most 1000 ids may be given, got %d", len(p.IDs))
	}
	files, more, err := a.deps.Store.FileList(c.Request().Context(), p)
	if err != nil {
		return err
	}
	return writeList(c, files, more, func(f db.File) *fileResponse { return toFileResponse(&f) },
		func(f db.File) string { return timeCursor(f.CreatedAt, f.ID) })
}

func (a *API) fileLoad(c echo.Context) (*db.File, error) {
	id, err := fileID(c)
	if err != nil {
		return nil, err
	}
	f, err := a.deps.Store.FileGet(c.Request().Context(), id)
	if errors.Is(err, db.ErrNotFound) || (err == nil && f.Expired(a.now())) {
		return nil, fileNotFound(id)
	}
	return f, err
}

func (a *API) fileGet(c echo.Context) error {
	f, err := a.fileLoad(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toFileResponse(f))
}

func (a *API) fileContent(c echo.Context) error {
	f, err := a.fileLoad(c)
	if err != nil {
		return err
	}
	allowed := f.Downloadable || (a.deps.FilesDownloadUploads && f.Origin == db.FileOriginUpload)
	if !allowed {
		if f.Origin == db.FileOriginSessionCopy {
			return apierror.Invalid("file %q is a session's copy of another file and is not downloadable; only files produced by a session can be downloaded", f.ID)
		}
		return apierror.Invalid("file %q was uploaded by a client and is not downloadable; only files produced by a session can be downloaded", f.ID)
	}
	ctx := c.Request().Context()
	rc, err := a.deps.Files.Open(ctx, f.StorageKey, 0)
	if err != nil {
		return fmt.Errorf("open bytes of file %s: %w", f.ID, err)
	}
	defer func() { _ = rc.Close() }()
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, f.MimeType)
	h.Set(echo.HeaderContentLength, strconv.FormatInt(f.SizeBytes, 10))
	h.Set(echo.HeaderContentDisposition, contentDisposition(f.Filename))
	h.Set("X-Content-Type-Options", "nosniff")
	c.Response().WriteHeader(http.StatusOK)
	n, err := io.CopyBuffer(c.Response(), io.LimitReader(rc, f.SizeBytes), make([]byte, 256<<10))
	if err != nil || n != f.SizeBytes {
		// The status is sent: the client sees a short body.
		a.deps.Logger.WarnContext(ctx, "file download cut short", "file_id", f.ID, "sent", n, "size", f.SizeBytes, "err", err,
			"request_id", requestIDOf(c))
	}
	return nil
}

// contentDisposition is an RFC 6266 attachment header: an ASCII fallback
// name and the exact UTF-8 name in filename*.
func contentDisposition(name string) string {
	fallback := strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' || r == '%' {
			return '_'
		}
		return r
	}, name)
	var ext strings.Builder
	for _, b := range []byte(name) {
		if isAttrChar(b) {
			ext.WriteByte(b)
		} else {
			fmt.Fprintf(&ext, "%%%02X", b)
		}
	}
	return fmt.Sprintf(`attachment; filename="%s"; filename*=UTF-8''%s`, fallback, ext.String())
}

// isAttrChar reports whether b may appear unescaped in an RFC 8187 value.
func isAttrChar(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte("!#$&+-.^_`|~", b) >= 0
}

// deleteFile deletes a file (for example a session resource's copy) and,
// when no other file shares them, its bytes. A file already gone is not an
// error; failures are logged.
func (a *API) deleteFile(ctx context.Context, id string) {
	key, unreferenced, err := a.deps.Store.FileDelete(context.WithoutCancel(ctx), id)
	switch {
	case errors.Is(err, db.ErrNotFound):
	case err != nil:
		a.deps.Logger.ErrorContext(ctx, "delete file", "file_id", id, "err", err)
	case unreferenced:
		a.deleteBlob(ctx, key)
	}
}

func (a *API) fileDelete(c echo.Context) error {
	id, err := fileID(c)
	if err != nil {
		return err
	}
	key, unreferenced, err := a.deps.Store.FileDelete(c.Request().Context(), id)
	if err != nil {
		return notFoundAs(err, fileNotFound(id))
	}
	if unreferenced {
		a.deleteBlob(c.Request().Context(), key)
	}
	return c.JSON(http.StatusOK, map[string]string{"id": id, "type": "file_deleted"})
}
