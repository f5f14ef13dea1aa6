package sandboxk8s

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// PutTree copies src into dst (see [sandbox.PutTree]) in one archive: the
// tar stream is uploaded through the runtime's POST /upload (chunked) to a
// hidden file of the root and extracted with tar through /execute, links
// included.
func (s *remoteSandbox) PutTree(ctx context.Context, dst string, src fs.FS) error {
	sh := s.shell()
	t, err := sh.Resolve(ctx, dst, false)
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, sh.FileErr(err))
	}
	if t.Kind != shellexec.KindDir && t.Kind != shellexec.KindMissing {
		return fmt.Errorf("put tree %s: not a directory", dst)
	}
	name := stageName("tree")
	tree := transfer.TarTree(src)
	defer func() { _ = tree.Close() }()
	body, ctype := transfer.MultipartPipe(func(mw *multipart.Writer) error {
		_, err := mw.CreateFormFile("file", name)
		return err
	}, tree)
	defer func() { _ = body.Close() }()
	sent := false
	_, _, err = s.p.sendOnce(ctx, *s.route.Load(), request{method: http.MethodPost, path: "/upload",
		body: func() (io.Reader, string, error) {
			if sent {
				return nil, "", errResent
			}
			sent = true
			return body, ctype, nil
		}})
	if err != nil {
		s.removeStaged(name)
		return fmt.Errorf("put tree %s: upload: %w", dst, sh.FileErr(err))
	}
	script := "set -- " + shellexec.Quote(s.root+"/"+name) + " " + shellexec.Quote(t.Path) + "\n(" + transfer.TreeExtractor + ") >/dev/null 2>&1 && echo MANGO-TREE-OK"
	out, err := s.execute(ctx, script, 10*time.Minute)
	if err == nil && !strings.Contains(out, "MANGO-TREE-OK") {
		err = fmt.Errorf("tar failed in the sandbox")
	}
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, sh.FileErr(err))
	}
	return nil
}

var _ sandbox.TreePutter = (*remoteSandbox)(nil)
