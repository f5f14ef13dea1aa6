package sandboxdaytona

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/url"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// PutTree copies src into dst (see [sandbox.PutTree]) in one archive: the
// tar stream is uploaded through the toolbox's POST /files/upload
// (chunked) to /tmp and extracted with tar, links included.
func (s *remoteSandbox) PutTree(ctx context.Context, dst string, src fs.FS) error {
	return s.shell().PutTree(ctx, dst, src, func(ctx context.Context, tree io.Reader) (string, error) {
		archive := "/tmp/.mango-tree-" + shellexec.NewToken() + ".tar"
		body, ctype := transfer.MultipartPipe(transfer.FormFile("file", "tree.tar"), tree)
		defer func() { _ = body.Close() }()
		req := request{method: http.MethodPost, body: httpcall.StreamBody(body, ctype)}
		req.url = s.toolbox.Load().base + "/files/upload?" + url.Values{"path": {archive}}.Encode()
		resp, _, err := s.p.send(ctx, req)
		if err != nil {
			return "", err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
		return archive, nil
	})
}

var _ sandbox.TreePutter = (*remoteSandbox)(nil)
