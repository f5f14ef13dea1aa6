package sandboxopensandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// PutTree copies src into dst (see [sandbox.PutTree]) in one archive: the
// tar stream is uploaded through execd's POST /files/upload (chunked) to a
// file in the exec directory and extracted with tar, links included.
func (s *remote) PutTree(ctx context.Context, dst string, src fs.FS) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	real, err := s.resolve(ctx, dst, false)
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, err)
	}
	archive := execDir + "/" + shellexec.NewToken() + ".tar"
	meta, err := json.Marshal(map[string]any{"path": archive, "mode": 600})
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, err)
	}
	body, ctype := transfer.TarUpload(src, uploadParts(meta, "tree.tar"))
	defer func() { _ = body.Close() }()
	resp, err := s.p.do(ctx, "upload tree", request{
		method: http.MethodPost, url: s.execd + "/files/upload", header: s.hdr,
		body: httpcall.StreamBody(body, ctype),
	})
	if err != nil {
		return fmt.Errorf("put tree %s: upload: %w", dst, s.mapErr(ctx, err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	res, err := s.run(ctx, "/bin/sh -c "+shellexec.Quote(transfer.TreeExtractor)+" mango-tree "+shellexec.Quote(archive)+" "+shellexec.Quote(real), "/", nil)
	if err != nil {
		return fmt.Errorf("put tree %s: tar: %w", dst, s.mapErr(ctx, err))
	}
	if res.code != 0 {
		return fmt.Errorf("put tree %s: tar: exit code %d", dst, res.code)
	}
	return nil
}

var _ sandbox.TreePutter = (*remote)(nil)
