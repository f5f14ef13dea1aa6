package sandboxopensandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// PutFile streams size bytes of r to p through execd's POST /files/upload:
// the metadata part (path and mode, so no chmod is needed) and then the
// file part, read from r as the body is sent, with a Content-Length. The
// parent directory is created by the resolver. The upload is not retried:
// r cannot be read twice.
func (s *remote) PutFile(ctx context.Context, p string, r io.Reader, size int64, perm fs.FileMode) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("put %s: negative size %d", p, size)
	}
	real, err := s.resolve(ctx, p, true)
	if err != nil {
		return fmt.Errorf("put %s: %w", p, err)
	}
	if real == s.root || sandbox.IsSessionRoot(real) {
		return fmt.Errorf("put %s: is a directory", p)
	}
	perm = cmp.Or(perm, 0o644)
	mode, _ := strconv.Atoi(strconv.FormatUint(uint64(perm.Perm()), 8))
	meta, err := json.Marshal(map[string]any{"path": real, "mode": mode})
	if err != nil {
		return fmt.Errorf("put %s: %w", p, err)
	}
	body, ctype, length, err := transfer.MultipartStream(uploadParts(meta, path.Base(real)), r, size)
	if err != nil {
		return fmt.Errorf("put %s: %w", p, err)
	}
	resp, err := s.p.do(ctx, "upload file", request{
		method: http.MethodPost, url: s.execd + "/files/upload", header: s.hdr,
		body:   httpcall.StreamBody(body, ctype),
		length: length,
	})
	if err != nil {
		return fmt.Errorf("put %s: %w", p, s.mapErr(ctx, err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	return nil
}

// GetFile streams p from execd's GET /files/download.
func (s *remote) GetFile(ctx context.Context, p string) (io.ReadCloser, int64, error) {
	if err := s.usable(ctx); err != nil {
		return nil, 0, err
	}
	real, err := s.resolve(ctx, p, false)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", p, err)
	}
	resp, err := s.p.do(ctx, "download file", request{
		method: http.MethodGet, url: s.execd + "/files/download?path=" + queryEscape(real), header: s.hdr, idempotent: true,
	})
	switch {
	case statusOf(err) == http.StatusNotFound && codeOf(err) != "SANDBOX_NOT_FOUND":
		return nil, 0, fmt.Errorf("get %s: %w", p, fs.ErrNotExist)
	case err != nil:
		return nil, 0, fmt.Errorf("get %s: %w", p, s.mapErr(ctx, err))
	}
	size := resp.ContentLength
	if size < 0 {
		infos, err := s.info(ctx, real)
		if err != nil {
			_ = resp.Body.Close()
			return nil, 0, fmt.Errorf("get %s: %w", p, err)
		}
		size = infos.Size
	}
	return resp.Body, size, nil
}

// fileInfo is execd's FileInfo.
type fileInfo struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
}

// info returns execd's GET /files/info of the absolute path real.
func (s *remote) info(ctx context.Context, real string) (fileInfo, error) {
	resp, err := s.p.do(ctx, "file info", request{
		method: http.MethodGet, url: s.execd + "/files/info?path=" + queryEscape(real), header: s.hdr, idempotent: true,
	})
	if err != nil {
		return fileInfo{}, s.mapErr(ctx, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var m map[string]fileInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m); err != nil {
		return fileInfo{}, fmt.Errorf("file info: decode: %w", err)
	}
	fi, ok := m[real]
	if !ok {
		return fileInfo{}, fmt.Errorf("file info: no entry for %q", real)
	}
	return fi, nil
}

// ListFiles lists the regular files under dir with execd's GET
// /files/search (pattern **); a missing dir is an empty list.
func (s *remote) ListFiles(ctx context.Context, dir string) ([]sandbox.FileInfo, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	abs, err := shellexec.Lexical(s.root, dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	listed := abs
	if path.IsAbs(dir) {
		listed = path.Clean(dir)
	}
	real, err := s.resolve(ctx, dir, false)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	resp, err := s.p.do(ctx, "search files", request{
		method: http.MethodGet, url: s.execd + "/files/search?path=" + queryEscape(real) + "&pattern=" + queryEscape("**"), header: s.hdr, idempotent: true,
	})
	switch {
	case statusOf(err) == http.StatusNotFound && codeOf(err) != "SANDBOX_NOT_FOUND":
		return []sandbox.FileInfo{}, nil
	case err != nil:
		return nil, fmt.Errorf("list %s: %w", dir, s.mapErr(ctx, err))
	}
	defer func() { _ = resp.Body.Close() }()
	var found []fileInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&found); err != nil {
		return nil, fmt.Errorf("list %s: decode: %w", dir, err)
	}
	files := []sandbox.FileInfo{}
	for _, f := range found {
		rel, ok := strings.CutPrefix(path.Clean(f.Path), strings.TrimSuffix(real, "/")+"/")
		if f.Type != "file" || !ok {
			continue
		}
		files = append(files, sandbox.FileInfo{Path: path.Join(listed, rel), Size: f.Size, ModTime: f.ModifiedAt})
	}
	slices.SortFunc(files, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// RemoveAll removes p and everything under it with execd's DELETE
// /directories (rm -rf). The parent's symbolic links are resolved first;
// p itself, when a link, is removed, not followed.
func (s *remote) RemoveAll(ctx context.Context, p string) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	target, _, err := shellexec.RemovePath(s.root, p, func(dir string) (string, bool, error) {
		real, err := s.resolve(ctx, dir, false)
		return real, true, err
	})
	if err != nil {
		return err
	}
	resp, err := s.p.do(ctx, "remove directories", request{
		method: http.MethodDelete, url: s.execd + "/directories?path=" + queryEscape(target), header: s.hdr, idempotent: true,
	})
	if err != nil {
		return fmt.Errorf("remove %s: %w", p, s.mapErr(ctx, err))
	}
	_ = resp.Body.Close()
	return nil
}

var _ sandbox.FileTransfer = (*remote)(nil)

// uploadParts returns the begin function of an execd upload body (see
// [transfer.MultipartStream]): the JSON metadata part, then the file part
// named name.
func uploadParts(meta []byte, name string) func(*multipart.Writer) error {
	return func(mw *multipart.Writer) error {
		mh := textproto.MIMEHeader{}
		mh.Set("Content-Disposition", `form-data; name="metadata"`)
		mh.Set("Content-Type", "application/json")
		part, err := mw.CreatePart(mh)
		if err != nil {
			return err
		}
		if _, err := part.Write(meta); err != nil {
			return err
		}
		_, err = mw.CreateFormFile("file", name)
		return err
	}
}
