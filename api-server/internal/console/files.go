package console

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// fileRoutes registers the file pages. The download route is registered
// with the session pages (fileDownload).
func (c *Console) fileRoutes() {
	m := c.mux
	m.Handle("GET "+Prefix+"/files", c.signedIn(c.fileList))
	m.Handle("POST "+Prefix+"/files", c.uploadLimit(c.signedIn(c.fileUpload)))
	m.Handle("GET "+Prefix+"/files/{id}", c.signedIn(c.filePage))
	m.Handle("POST "+Prefix+"/files/{id}/delete", c.signedIn(c.fileDelete))
}

// fileRow is a file as the pages show it.
type fileRow struct {
	File map[string]any
	// Size is the size in words (12.3 KiB).
	Size string
	// NotDownloadable says why the API refuses the file's content, or is
	// "" when the file can be downloaded.
	NotDownloadable string
}

func fileRowOf(f map[string]any) fileRow {
	row := fileRow{File: f, Size: fileSize(num(f["size_bytes"]))}
	if f["downloadable"] != true {
		row.NotDownloadable = "Not downloadable: uploaded by a client (only files a session produced are downloadable)."
		if scope, ok := f["scope"].(map[string]any); ok && str(scope["id"]) != "" {
			row.NotDownloadable = "Not downloadable: a session's copy of another file (a file resource)."
		}
	}
	return row
}

// fileSize is a byte count in words: 512 bytes, 12.3 KiB, 4.0 MiB.
func fileSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	v, unit := float64(n), ""
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v, unit = v/1024, u
		if v < 1024 {
			break
		}
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// fileListPage is the files list: one page, optionally of one session.
type fileListPage struct {
	Files   []fileRow
	ScopeID string
	// NextPage is the cursor of the next page, or "".
	NextPage string
	// MaxBytes is the largest file the console takes.
	MaxBytes string
}

// fileList shows the files, newest first, optionally those of one session
// (scope_id), with paging and the upload form.
func (c *Console) fileList(w http.ResponseWriter, r *http.Request, v *visit) error {
	p := fileListPage{ScopeID: strings.TrimSpace(r.FormValue("scope_id")), MaxBytes: fileSize(c.deps.MaxUploadBytes)}
	q := url.Values{"limit": {"25"}}
	if p.ScopeID != "" {
		q.Set("scope_id", p.ScopeID)
	}
	if pg := r.FormValue("page"); pg != "" {
		q.Set("page", pg)
	}
	var l list[map[string]any]
	if err := v.api.get(r.Context(), "/v1/files", q, &l); err != nil {
		return err
	}
	for _, f := range l.Data {
		p.Files = append(p.Files, fileRowOf(f))
	}
	p.NextPage = l.NextPage
	c.render(w, r, v, http.StatusOK, "files", p)
	return nil
}

// filePage shows one file's metadata, its download link (or why there is
// none) and its delete button.
func (c *Console) filePage(w http.ResponseWriter, r *http.Request, v *visit) error {
	var f map[string]any
	if err := v.api.get(r.Context(), "/v1/files/"+url.PathEscape(r.PathValue("id")), nil, &f); err != nil {
		return err
	}
	c.render(w, r, v, http.StatusOK, "file", fileRowOf(f))
	return nil
}

// uploadSlack is what an upload form's body may carry beyond the file's
// bytes: the CSRF field, boundaries and part headers.
const uploadSlack = 64 << 10

// uploadRoute marks, in a request's context, a route whose body
// uploadLimit capped (signedIn caps the others at maxFormBytes).
type uploadRoute struct{}

// uploadLimit caps the body of an upload form before anything reads it
// (signedIn's CSRF check parses the form, spooling the file). A body
// that says it is too large is refused at once with a page that says so;
// one that turns out too large is cut.
func (c *Console) uploadLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := c.deps.MaxUploadBytes + uploadSlack
		if r.ContentLength > limit {
			w.Header().Set("Cache-Control", "no-store")
			v, err := c.visitOf(r)
			if err != nil {
				v = nil
			}
			c.render(w, r, v, http.StatusRequestEntityTooLarge, "error", errorPage{Status: http.StatusRequestEntityTooLarge, Type: "request_too_large",
				Message: fmt.Sprintf("the upload is %s; this server takes files of at most %s", fileSize(r.ContentLength), fileSize(c.deps.MaxUploadBytes))})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), uploadRoute{}, true)))
	})
}

// fileUpload sends the form's file to the Files API and opens it.
func (c *Console) fileUpload(w http.ResponseWriter, r *http.Request, v *visit) error {
	f, fh, err := r.FormFile("file")
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return badInput(fmt.Sprintf("the upload is larger than this server takes (at most %s per file)", fileSize(c.deps.MaxUploadBytes)))
	case errors.Is(err, http.ErrMissingFile):
		return badInput("file: choose a file to upload")
	case errors.Is(err, http.ErrNotMultipart):
		return badInput("the upload form must be sent as multipart/form-data with a file field named file")
	case err != nil:
		return badInput(fmt.Sprintf("the upload form could not be read: %v", err))
	}
	defer func() { _ = f.Close() }()
	ct := fh.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt == "" {
		ct = "application/octet-stream" // the API then goes by the name's extension
	}
	id, err := v.api.upload(r.Context(), fh.Filename, ct, f)
	if err != nil {
		return err
	}
	http.Redirect(w, r, Prefix+"/files/"+url.PathEscape(id), http.StatusSeeOther)
	return nil
}

// fileDelete deletes a file and goes back to the list (of the session
// the list showed, scope_id).
func (c *Console) fileDelete(w http.ResponseWriter, r *http.Request, v *visit) error {
	if err := v.api.del(r.Context(), "/v1/files/"+url.PathEscape(r.PathValue("id"))); err != nil {
		return err
	}
	back := Prefix + "/files"
	if s := strings.TrimSpace(r.PostFormValue("scope_id")); s != "" {
		back += "?" + url.Values{"scope_id": {s}}.Encode()
	}
	done(w, r, back)
	return nil
}
