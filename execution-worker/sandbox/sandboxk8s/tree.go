package sandboxk8s

import (
	"context"
	"io"
	"io/fs"
	"net/http"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// PutTree copies src into dst (see [sandbox.PutTree]) in one archive: the
// tar stream is uploaded through the runtime's POST /upload (chunked) to a
// hidden file of the root and extracted with tar through /execute, links
// included.
func (s *remoteSandbox) PutTree(ctx context.Context, dst string, src fs.FS) error {
	return s.shell().PutTree(ctx, dst, src, func(ctx context.Context, tree io.Reader) (string, error) {
		name := stageName("tree")
		body, ctype := transfer.MultipartPipe(transfer.FormFile("file", name), tree)
		defer func() { _ = body.Close() }()
		_, _, err := s.p.sendOnce(ctx, *s.route.Load(), request{method: http.MethodPost, path: "/upload", body: httpcall.StreamBody(body, ctype)})
		if err != nil {
			s.removeStaged(name)
			return "", err
		}
		return s.root + "/" + name, nil
	})
}

var _ sandbox.TreePutter = (*remoteSandbox)(nil)
