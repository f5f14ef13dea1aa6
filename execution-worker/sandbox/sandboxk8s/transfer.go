package sandboxk8s

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// lister prints "size mtime ./name" for every regular file under $d (not
// following symbolic links), then an end marker with find's status; a
// missing $d prints only the marker.
const lister = `exec 2>/dev/null
if [ -d "$d" ] && cd "$d"; then find . -type f -exec stat -c '%s %Y %n' -- {} +; rc=$?; else rc=0; fi
printf 'MANGO-LIST-END %s\n' "$rc"`

// stageName returns a fresh hidden file name in the root, for bytes on
// their way to or from a path the runtime's /upload and /download cannot
// name (outside the root, or with '%' for /download).
func stageName(kind string) string { return ".mango-" + kind + "-" + shellexec.NewToken() }

// PutFile streams size bytes of r through the runtime's POST /upload (one
// multipart part, with a Content-Length) and sets the mode with chmod
// through /execute. A path outside the runtime's root (the session
// directory) is uploaded to a hidden file in the root first and moved in
// place. The upload is not retried: r cannot be read twice.
func (s *remoteSandbox) PutFile(ctx context.Context, p string, r io.Reader, size int64, perm fs.FileMode) error {
	if size < 0 {
		return fmt.Errorf("put %s: negative size %d", p, size)
	}
	sh := s.shell()
	t, err := sh.WriteTarget(ctx, p)
	if err != nil {
		return err
	}
	perm = cmp.Or(perm, 0o644)
	if err := s.putResolved(ctx, t, r, size, perm); err != nil {
		return fmt.Errorf("put %s: %w", p, sh.FileErr(err))
	}
	return nil
}

// putResolved uploads to the resolved target t and applies perm.
func (s *remoteSandbox) putResolved(ctx context.Context, t shellexec.Resolved, r io.Reader, size int64, perm fs.FileMode) error {
	name, err := relative(t, t.Path)
	staged := err != nil
	if staged {
		name = stageName("put")
	}
	if err := s.uploadStream(ctx, name, r, size); err != nil {
		if staged {
			s.removeStaged(name)
		}
		return err
	}
	script := ""
	if staged {
		script = "mv -f -- " + shellexec.Quote(s.root+"/"+name) + " " + shellexec.Quote(t.Path) + " && "
	}
	script += "chmod " + strconv.FormatUint(uint64(perm.Perm()), 8) + " -- " + shellexec.Quote(t.Path) + " && echo ok"
	out, err := s.execute(ctx, "exec 2>/dev/null\n"+script, 5*time.Minute)
	if err == nil && strings.TrimSpace(out) != "ok" {
		err = fmt.Errorf("move or chmod in the sandbox failed")
	}
	if err != nil && staged {
		s.removeStaged(name)
	}
	return err
}

// uploadStream sends size bytes of r as the file name (relative to the
// runtime's root) through one POST /upload.
func (s *remoteSandbox) uploadStream(ctx context.Context, name string, r io.Reader, size int64) error {
	body, ctype, length := transfer.MultipartFile("file", name, r, size)
	_, _, err := s.p.sendOnce(ctx, *s.route.Load(), request{method: http.MethodPost, path: "/upload", length: length,
		body: httpcall.StreamBody(body, ctype)})
	return err
}

// removeStaged removes a staged file of the root, on its own context.
func (s *remoteSandbox) removeStaged(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = s.execute(ctx, "rm -f -- "+shellexec.Quote(s.root+"/"+name), 30*time.Second)
}

// GetFile streams p from the runtime's GET /download. A file outside the
// runtime's root, or whose name /download cannot carry ('%'), is linked
// (or copied) to a hidden file in the root first, removed when the reader
// is closed.
func (s *remoteSandbox) GetFile(ctx context.Context, p string) (io.ReadCloser, int64, error) {
	sh := s.shell()
	t, err := sh.ReadTarget(ctx, p)
	if err != nil {
		return nil, 0, err
	}
	name, err := relative(t, t.Path)
	staged := err != nil || strings.Contains(name, "%")
	if staged {
		name = stageName("get")
		src, dst := shellexec.Quote(t.Path), shellexec.Quote(s.root+"/"+name)
		out, err := s.execute(ctx, "exec 2>/dev/null\n{ ln -f -- "+src+" "+dst+" || cp -- "+src+" "+dst+"; } && echo ok", 5*time.Minute)
		if err == nil && strings.TrimSpace(out) != "ok" {
			err = fmt.Errorf("cannot stage the file in the workspace root")
		}
		if err != nil {
			return nil, 0, fmt.Errorf("get %s: %w", p, sh.FileErr(err))
		}
	}
	resp, err := s.p.stream(ctx, *s.route.Load(), request{method: http.MethodGet, path: "/download/" + percentEncode(name), idempotent: true})
	if err != nil {
		if staged {
			s.removeStaged(name)
		}
		if statusOf(err) == http.StatusNotFound {
			return nil, 0, fmt.Errorf("get %s: %w", p, fs.ErrNotExist)
		}
		return nil, 0, fmt.Errorf("get %s: %w", p, sh.FileErr(err))
	}
	size := resp.ContentLength
	if size < 0 {
		out, err := s.execute(ctx, "exec 2>/dev/null\nstat -c %s -- "+shellexec.Quote(t.Path), 30*time.Second)
		if err == nil {
			size, err = strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		}
		if err != nil {
			_ = resp.Body.Close()
			if staged {
				s.removeStaged(name)
			}
			return nil, 0, fmt.Errorf("get %s: size unknown: %w", p, sh.FileErr(err))
		}
	}
	if !staged {
		return resp.Body, size, nil
	}
	return &stagedReader{ReadCloser: resp.Body, done: func() { s.removeStaged(name) }}, size, nil
}

// stagedReader removes its staged file when closed.
type stagedReader struct {
	io.ReadCloser
	done func()
}

func (r *stagedReader) Close() error {
	err := r.ReadCloser.Close()
	r.done()
	return err
}

// ListFiles lists the regular files under dir with find and stat run
// through /execute (the runtime has no listing).
func (s *remoteSandbox) ListFiles(ctx context.Context, dir string) ([]sandbox.FileInfo, error) {
	abs, err := shellexec.Lexical(s.root, dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	listed := abs
	if path.IsAbs(dir) {
		listed = path.Clean(dir)
	}
	sh := s.shell()
	t, err := sh.Resolve(ctx, dir, false)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, sh.FileErr(err))
	}
	if t.Kind != shellexec.KindDir {
		return []sandbox.FileInfo{}, nil
	}
	out, err := s.execute(ctx, "d="+shellexec.Quote(t.Path)+"\n"+lister, 5*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, sh.FileErr(err))
	}
	body, status, ok := cutLastLine(out, "MANGO-LIST-END ")
	if !ok {
		return nil, fmt.Errorf("list %s: %w: no end marker", dir, errMalformed)
	}
	if status != "0" {
		return nil, fmt.Errorf("list %s: find: exit status %s", dir, status)
	}
	files, err := transfer.ParseStatList(listed, body)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	if files == nil {
		files = []sandbox.FileInfo{}
	}
	return files, nil
}

// cutLastLine splits out into what precedes its last line and the rest of
// that line after prefix.
func cutLastLine(out, prefix string) (body, rest string, ok bool) {
	out = strings.TrimSuffix(out, "\n")
	i := strings.LastIndexByte(out, '\n')
	last := out[i+1:]
	rest, ok = strings.CutPrefix(last, prefix)
	if i < 0 {
		return "", rest, ok
	}
	return out[:i+1], rest, ok
}

// RemoveAll removes p and everything under it with rm -rf through
// /execute. The parent's symbolic links are resolved first; p itself, when
// a link, is removed, not followed.
func (s *remoteSandbox) RemoveAll(ctx context.Context, p string) error {
	sh := s.shell()
	target, ok, err := sh.RemoveTarget(ctx, p)
	if err != nil || !ok {
		return err
	}
	out, err := s.execute(ctx, "exec 2>/dev/null\nrm -rf -- "+shellexec.Quote(target)+" && echo ok", 5*time.Minute)
	if err == nil && strings.TrimSpace(out) != "ok" {
		err = fmt.Errorf("rm -rf failed")
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", p, sh.FileErr(err))
	}
	return nil
}

var _ sandbox.FileTransfer = (*remoteSandbox)(nil)
