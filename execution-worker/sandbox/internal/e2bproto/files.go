package e2bproto

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

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// maxListOutput bounds the listing ListFiles reads (about a million files).
const maxListOutput = 64 << 20

// lister prints "size mtime ./name" for every regular file under $1 (not
// following symbolic links); a missing $1 prints nothing. busybox's find
// and stat support all of it.
const lister = `[ -d "$1" ] || exit 0
cd "$1" || exit 1
exec find . -type f -exec stat -c '%s %Y %n' -- {} +`

// PutFile streams size bytes of r to p through envd's POST /files
// (multipart, with a Content-Length), which creates missing parent
// directories. A mode other than 0644 (envd's) is set with chmod. The
// upload is not retried: r cannot be read twice.
func (s *remoteSandbox) PutFile(ctx context.Context, p string, r io.Reader, size int64, perm fs.FileMode) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("put %s: negative size %d", p, size)
	}
	real, err := s.resolve(ctx, p)
	if err != nil {
		return fmt.Errorf("put %s: %w", p, err)
	}
	body, ctype, length := transfer.MultipartFile("file", path.Base(real), r, size)
	resp, err := s.p.cfg.send(ctx, "envd write "+p, noRetry, func(ctx context.Context) (*http.Request, error) {
		req, err := s.envdRequest(ctx, http.MethodPost, s.filesQuery(real), body)
		if err != nil {
			return nil, err
		}
		req.ContentLength = length
		req.Header.Set("Content-Type", ctype)
		return req, nil
	})
	if err != nil {
		return fmt.Errorf("put %s: %w", p, s.envdFailed(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	perm = cmp.Or(perm, 0o644)
	if _, code, err := s.run(ctx, `chmod "$1" "$2"`, fmt.Sprintf("%o", perm.Perm()), real); err != nil || code != 0 {
		return fmt.Errorf("put %s: chmod %o: exit code %d: %v", p, perm.Perm(), code, err)
	}
	return nil
}

// GetFile streams p from envd's GET /files.
func (s *remoteSandbox) GetFile(ctx context.Context, p string) (io.ReadCloser, int64, error) {
	if err := s.usable(ctx); err != nil {
		return nil, 0, err
	}
	real, err := s.resolve(ctx, p)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", p, err)
	}
	resp, err := s.p.cfg.send(ctx, "envd read "+p, retrySafe, func(ctx context.Context) (*http.Request, error) {
		return s.envdRequest(ctx, http.MethodGet, s.filesQuery(real), nil)
	})
	if statusOf(err) == http.StatusNotFound {
		return nil, 0, fmt.Errorf("get %s: %w", p, fs.ErrNotExist)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", p, s.envdFailed(err))
	}
	size := resp.ContentLength
	if size < 0 {
		out, code, err := s.run(ctx, `stat -c %s -- "$1"`, real)
		if err == nil && code == 0 {
			size, err = strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		}
		if err != nil || code != 0 {
			_ = resp.Body.Close()
			return nil, 0, fmt.Errorf("get %s: size unknown (exit code %d): %v", p, code, err)
		}
	}
	return resp.Body, size, nil
}

// ListFiles lists the regular files under dir with find and stat run
// through envd (envd's /files has no listing).
func (s *remoteSandbox) ListFiles(ctx context.Context, dir string) ([]sandbox.FileInfo, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	listed, err := s.agentPath(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	real, err := s.resolveAny(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	out, code, err := s.runFor(ctx, 5*time.Minute, maxListOutput+1, lister, real)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	if code != 0 {
		return nil, fmt.Errorf("list %s: find: exit code %d", dir, code)
	}
	if len(out) > maxListOutput {
		return nil, fmt.Errorf("list %s: more than %d bytes of listing", dir, maxListOutput)
	}
	files, err := transfer.ParseStatList(listed, out)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return files, nil
}

// agentPath returns dir as the agent named it: absolute, cleaned, relative
// paths taken from the root.
func (s *remoteSandbox) agentPath(dir string) (string, error) {
	if _, err := shellexec.Lexical(s.root, dir); err != nil {
		return "", err
	}
	if !path.IsAbs(dir) {
		return path.Join(s.root, dir), nil
	}
	return path.Clean(dir), nil
}

// RemoveAll removes p with rm -rf run through envd. The parent's symbolic
// links are resolved first; p itself, when a link, is removed, not
// followed.
func (s *remoteSandbox) RemoveAll(ctx context.Context, p string) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	target, _, err := shellexec.RemovePath(s.root, p, func(dir string) (string, bool, error) {
		real, err := s.resolveAny(ctx, dir)
		return real, true, err
	})
	if err != nil {
		return err
	}
	if _, code, err := s.run(ctx, `rm -rf -- "$1"`, target); err != nil || code != 0 {
		return fmt.Errorf("remove %s: rm: exit code %d: %v", p, code, err)
	}
	return nil
}

var _ sandbox.FileTransfer = (*remoteSandbox)(nil)
