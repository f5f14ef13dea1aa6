package shellexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// extractedMarker is what the extraction script prints on success: the
// Runner returns what a script printed, not its exit status.
const extractedMarker = "MANGO-TREE-OK"

// PutTree copies src into the directory dst (see [sandbox.PutTree]) as one
// tar archive, links included: upload sends tree (a [transfer.TarTree]
// stream, read once, unknown length) to a new file in the sandbox and
// returns that file's absolute path; the archive is then extracted into
// dst with tar and removed. dst must be a directory or missing. Errors
// name dst.
func (sh *Shell) PutTree(ctx context.Context, dst string, src fs.FS, upload func(ctx context.Context, tree io.Reader) (archive string, err error)) error {
	if err := sh.usable(ctx); err != nil {
		return err
	}
	t, err := sh.Resolve(ctx, dst, false)
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, sh.FileErr(err))
	}
	if t.Kind != KindDir && t.Kind != KindMissing {
		return fmt.Errorf("put tree %s: not a directory", dst)
	}
	tree := transfer.TarTree(src)
	defer func() { _ = tree.Close() }()
	archive, err := upload(ctx, tree)
	if err != nil {
		return fmt.Errorf("put tree %s: upload: %w", dst, sh.FileErr(err))
	}
	script := "set -- " + Quote(archive) + " " + Quote(t.Path) + "\n(" + transfer.TreeExtractor + ") >/dev/null 2>&1 && echo " + extractedMarker
	out, err := sh.Run(ctx, script, 10*time.Minute)
	if err == nil && !strings.Contains(out, extractedMarker) {
		err = errors.New("tar failed in the sandbox")
	}
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, sh.FileErr(err))
	}
	return nil
}
