package sandboxdaytona

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
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

// PutFile streams size bytes of r to p through the toolbox's POST
// /files/upload (multipart field "file", with a Content-Length), after
// the parents were created by the path check, and then sets the mode with
// POST /files/permissions. The upload is not retried: r cannot be read
// twice.
func (s *remoteSandbox) PutFile(ctx context.Context, p string, r io.Reader, size int64, perm fs.FileMode) error {
	if size < 0 {
		return fmt.Errorf("put %s: negative size %d", p, size)
	}
	sh := s.shell()
	t, err := sh.WriteTarget(ctx, p)
	if err != nil {
		return err
	}
	body, ctype, length := transfer.MultipartFile("file", path.Base(t.Path), r, size)
	req := request{method: http.MethodPost, length: length, body: httpcall.StreamBody(body, ctype)}
	req.url = s.toolbox.Load().base + "/files/upload?" + url.Values{"path": {t.Path}}.Encode()
	resp, _, err := s.p.send(ctx, req)
	if err != nil {
		return fmt.Errorf("put %s: %w", p, s.fileErr(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	perm = cmp.Or(perm, 0o644)
	q := url.Values{"path": {t.Path}, "mode": {fmt.Sprintf("%04o", perm.Perm())}}
	if _, err := s.call(ctx, "/files/permissions?"+q.Encode(), request{method: http.MethodPost, idempotent: true}); err != nil {
		return fmt.Errorf("put %s: set mode: %w", p, s.fileErr(err))
	}
	return nil
}

// GetFile streams p from the toolbox's GET /files/download.
func (s *remoteSandbox) GetFile(ctx context.Context, p string) (io.ReadCloser, int64, error) {
	t, err := s.shell().ReadTarget(ctx, p)
	if err != nil {
		return nil, 0, err
	}
	req := request{method: http.MethodGet, idempotent: true}
	req.url = s.toolbox.Load().base + "/files/download?" + url.Values{"path": {t.Path}}.Encode()
	resp, err := s.p.stream(ctx, req)
	if statusOf(err) == http.StatusNotFound {
		return nil, 0, fmt.Errorf("get %s: %w", p, fs.ErrNotExist)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", p, s.fileErr(err))
	}
	size := resp.ContentLength
	if size < 0 {
		info, err := s.info(ctx, t.Path)
		if err != nil {
			_ = resp.Body.Close()
			return nil, 0, fmt.Errorf("get %s: %w", p, s.fileErr(err))
		}
		size = info.Size
	}
	return resp.Body, size, nil
}

// fileInfo is the toolbox's FileInfo.
type fileInfo struct {
	Name       string `json:"name"`
	IsDir      bool   `json:"isDir"`
	Size       int64  `json:"size"`
	Mode       string `json:"mode"`
	ModifiedAt string `json:"modifiedAt"`
}

// regular reports a regular file: the toolbox lists entries with Lstat
// and renders the mode as Go's FileMode.String ("-rw-r--r--" for a
// regular file, "L..." for a link).
func (f fileInfo) regular() bool { return !f.IsDir && strings.HasPrefix(f.Mode, "-") }

func (f fileInfo) modTime() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, f.ModifiedAt)
	return t
}

// info returns the toolbox's GET /files/info of the absolute path x.
func (s *remoteSandbox) info(ctx context.Context, x string) (fileInfo, error) {
	data, err := s.call(ctx, "/files/info?"+url.Values{"path": {x}}.Encode(), request{method: http.MethodGet, idempotent: true})
	if err != nil {
		return fileInfo{}, err
	}
	var fi fileInfo
	if err := decode("files/info", data, &fi); err != nil {
		return fileInfo{}, err
	}
	return fi, nil
}

// ListFiles lists the regular files under dir by walking it with the
// toolbox's GET /files (one call per directory); symbolic links are
// neither followed nor listed.
func (s *remoteSandbox) ListFiles(ctx context.Context, dir string) ([]sandbox.FileInfo, error) {
	abs, err := shellexec.Lexical(s.root, dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	listed := abs
	if path.IsAbs(dir) {
		listed = path.Clean(dir)
	}
	t, err := s.shell().Resolve(ctx, dir, false)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, s.fileErr(err))
	}
	files := []sandbox.FileInfo{}
	if t.Kind != shellexec.KindDir {
		return files, nil
	}
	pending := []string{""}
	for len(pending) > 0 {
		rel := pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		data, err := s.call(ctx, "/files?"+url.Values{"path": {path.Join(t.Path, rel)}}.Encode(), request{method: http.MethodGet, idempotent: true})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", dir, s.fileErr(err))
		}
		var entries []fileInfo
		if err := json.Unmarshal(data, &entries); err != nil {
			return nil, fmt.Errorf("list %s: %w: %v", dir, errMalformed, err)
		}
		for _, e := range entries {
			if e.Name == "" || e.Name == "." || e.Name == ".." || strings.Contains(e.Name, "/") {
				continue
			}
			switch name := path.Join(rel, e.Name); {
			case e.IsDir:
				pending = append(pending, name)
			case e.regular():
				files = append(files, sandbox.FileInfo{Path: path.Join(listed, name), Size: e.Size, ModTime: e.modTime()})
			}
		}
	}
	slices.SortFunc(files, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// RemoveAll removes p and everything under it with the toolbox's DELETE
// /files?recursive=true. The parent's symbolic links are resolved first;
// p itself, when a link, is removed, not followed. A missing p is no
// error.
func (s *remoteSandbox) RemoveAll(ctx context.Context, p string) error {
	target, ok, err := s.shell().RemoveTarget(ctx, p)
	if err != nil || !ok {
		return err
	}
	q := url.Values{"path": {target}, "recursive": {strconv.FormatBool(true)}}
	_, err = s.call(ctx, "/files?"+q.Encode(), request{method: http.MethodDelete, idempotent: true})
	if err != nil && statusOf(err) != http.StatusNotFound {
		return fmt.Errorf("remove %s: %w", p, s.fileErr(err))
	}
	return nil
}

var _ sandbox.FileTransfer = (*remoteSandbox)(nil)
