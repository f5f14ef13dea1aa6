package sandboxdaytona

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path"

	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// ReadFile returns the content of a regular file under Root.
func (s *remoteSandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	r, err := s.shell().ReadTarget(ctx, p)
	if err != nil {
		return nil, err
	}
	data, err := s.call(ctx, "/files/download?"+url.Values{"path": {r.Path}}.Encode(), request{method: http.MethodGet, idempotent: true})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil, fmt.Errorf("read %s: %w", p, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("read %s: %w", p, s.fileErr(err))
	}
	return data, nil
}

// WriteFile writes data to a file under Root, creating missing parent
// directories. An existing link inside the workspace is written through.
func (s *remoteSandbox) WriteFile(ctx context.Context, p string, data []byte, perm fs.FileMode) error {
	sh := s.shell()
	r, err := sh.WriteTarget(ctx, p)
	if err != nil {
		return err
	}
	if err := s.upload(ctx, r.Path, data); err != nil {
		return fmt.Errorf("write %s: %w", p, s.fileErr(err))
	}
	return sh.Written(ctx, r, p, perm)
}

// upload writes data to the absolute path x through the multipart upload.
func (s *remoteSandbox) upload(ctx context.Context, x string, data []byte) error {
	body := transfer.MultipartBytes(transfer.FormFile("file", path.Base(x)), data)
	_, err := s.call(ctx, "/files/upload?"+url.Values{"path": {x}}.Encode(), request{method: http.MethodPost, body: body, idempotent: true})
	return err
}

// fileErr keeps sandbox sentinels and reports ErrDestroyed after Destroy.
func (s *remoteSandbox) fileErr(err error) error { return s.shell().FileErr(err) }
