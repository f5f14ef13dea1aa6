package sandboxdaytona

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// PutTree copies src into dst (see [sandbox.PutTree]) in one archive: the
// tar stream is uploaded through the toolbox's POST /files/upload
// (chunked) to /tmp and extracted with tar, links included.
func (s *remoteSandbox) PutTree(ctx context.Context, dst string, src fs.FS) error {
	sh := s.shell()
	t, err := sh.Resolve(ctx, dst, false)
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, s.fileErr(err))
	}
	if t.Kind != shellexec.KindDir && t.Kind != shellexec.KindMissing {
		return fmt.Errorf("put tree %s: not a directory", dst)
	}
	archive := "/tmp/.mango-tree-" + shellexec.NewToken() + ".tar"
	tree := transfer.TarTree(src)
	defer func() { _ = tree.Close() }()
	body, ctype := transfer.MultipartPipe(func(mw *multipart.Writer) error {
		_, err := mw.CreateFormFile("file", "tree.tar")
		return err
	}, tree)
	defer func() { _ = body.Close() }()
	sent := false
	req := request{method: http.MethodPost, body: func() (io.Reader, string, error) {
		if sent {
			return nil, "", errResent
		}
		sent = true
		return body, ctype, nil
	}}
	req.url = s.toolbox.Load().base + "/files/upload?" + url.Values{"path": {archive}}.Encode()
	resp, _, err := s.p.send(ctx, req)
	if err != nil {
		return fmt.Errorf("put tree %s: upload: %w", dst, s.fileErr(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	script := "set -- " + shellexec.Quote(archive) + " " + shellexec.Quote(t.Path) + "\n(" + transfer.TreeExtractor + ") >/dev/null 2>&1 && echo MANGO-TREE-OK"
	out, err := s.execute(ctx, script, 10*time.Minute)
	if err == nil && !strings.Contains(out, "MANGO-TREE-OK") {
		err = fmt.Errorf("tar failed in the sandbox")
	}
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, s.fileErr(err))
	}
	return nil
}

var _ sandbox.TreePutter = (*remoteSandbox)(nil)
