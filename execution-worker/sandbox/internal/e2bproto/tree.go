package e2bproto

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// PutTree copies src into dst (see [sandbox.PutTree]) in one archive: the
// tar stream is uploaded through envd's POST /files to a file beside the
// workspace and extracted there with tar, links included.
func (s *remoteSandbox) PutTree(ctx context.Context, dst string, src fs.FS) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	real, err := s.resolveAny(ctx, dst)
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, err)
	}
	archive := path.Join(s.stateDir(), shellexec.NewToken()+".tar")
	body, ctype := transfer.TarUpload(src, transfer.FormFile("file", path.Base(archive)))
	defer func() { _ = body.Close() }()
	resp, err := s.p.cfg.send(ctx, "envd write "+archive, noRetry, func(ctx context.Context) (*http.Request, error) {
		req, err := s.envdRequest(ctx, http.MethodPost, s.filesQuery(archive), body)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", ctype)
		return req, nil
	})
	if err != nil {
		return fmt.Errorf("put tree %s: upload: %w", dst, s.envdFailed(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if _, code, err := s.runFor(ctx, 10*time.Minute, 64<<10, transfer.TreeExtractor, archive, real); err != nil || code != 0 {
		return fmt.Errorf("put tree %s: tar: exit code %d: %v", dst, code, err)
	}
	return nil
}

var _ sandbox.TreePutter = (*remoteSandbox)(nil)
