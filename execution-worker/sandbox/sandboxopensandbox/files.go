package sandboxopensandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/transfer"
)

// maxFileSize bounds ReadFile, which holds the whole file in memory.
const maxFileSize = 256 << 20

// resolver prints the physical path of $2 (an absolute path), resolving
// symbolic links as far as the path exists; with $3 = mkdir it also creates
// the parent directory when the result lies under the root $1 or a session
// root (/mnt/session, /mnt/memory). Exit 3: the
// path cannot be resolved.
const resolver = `r="$1"; p="$2"; rest=
while [ ! -e "$p" ] && [ ! -L "$p" ]; do rest="/${p##*/}$rest"; p="${p%/*}"; [ -z "$p" ] && p=/; done
q=$(readlink -f -- "$p") || exit 3
[ "$q" = / ] && q=
t="$q$rest"; [ -z "$t" ] && t=/
case "$t/" in "$r"/*|/mnt/session/*|/mnt/memory/*) [ "$3" = mkdir ] && { mkdir -p -- "${t%/*}" || exit 4; } ;; esac
printf '%s' "$t"`

func queryEscape(s string) string { return url.QueryEscape(s) }

// resolve checks p lexically, then resolves it inside the sandbox.
func (s *remote) resolve(ctx context.Context, p string, mkdir bool) (string, error) {
	abs, err := shellexec.Lexical(s.root, p)
	if err != nil {
		return "", err
	}
	mode := "check"
	if mkdir {
		mode = "mkdir"
	}
	res, err := s.run(ctx, "/bin/sh -c "+shellexec.Quote(resolver)+" mango-resolve "+shellexec.Quote(s.root)+" "+shellexec.Quote(abs)+" "+mode, "/", nil)
	if err != nil {
		return "", s.mapErr(ctx, err)
	}
	switch res.code {
	case 0:
	case 3:
		return "", fmt.Errorf("%q: cannot resolve symbolic links: %w", p, sandbox.ErrPathEscape)
	default:
		return "", fmt.Errorf("%q: resolve: exit code %d", p, res.code)
	}
	real := res.stdout.String()
	if !path.IsAbs(real) || path.Clean(real) != real || !shellexec.Allowed(s.root, real) {
		return "", fmt.Errorf("%q resolves to %q: %w", p, real, sandbox.ErrPathEscape)
	}
	return real, nil
}

// ReadFile returns the contents of a file under the root.
func (s *remote) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	real, err := s.resolve(ctx, p, false)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	data, _, err := s.download(ctx, real, maxFileSize)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, s.mapErr(ctx, err))
	}
	return data, nil
}

// WriteFile writes a file under the root, creating parent directories.
func (s *remote) WriteFile(ctx context.Context, p string, data []byte, perm fs.FileMode) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	real, err := s.resolve(ctx, p, true)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if real == s.root || sandbox.IsSessionRoot(real) {
		return fmt.Errorf("write %s: is a directory", p)
	}
	perm = cmp.Or(perm, 0o644)
	if err := s.upload(ctx, real, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", p, s.mapErr(ctx, err))
	}
	return nil
}

// download fetches at most limit bytes of a file; truncated reports more.
// A missing file is fs.ErrNotExist.
func (s *remote) download(ctx context.Context, p string, limit int) ([]byte, bool, error) {
	hdr := s.hdr.Clone()
	hdr.Set("Range", "bytes=0-"+strconv.Itoa(limit))
	resp, err := s.p.do(ctx, "download file", request{
		method: http.MethodGet, url: s.execd + "/files/download?path=" + queryEscape(p), header: hdr, idempotent: true,
	})
	switch {
	case statusOf(err) == http.StatusRequestedRangeNotSatisfiable:
		return []byte{}, false, nil // an empty file
	case statusOf(err) == http.StatusNotFound && codeOf(err) != "SANDBOX_NOT_FOUND":
		return nil, false, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	case err != nil:
		return nil, false, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, false, err
	}
	if len(data) > limit {
		return data[:limit], true, nil
	}
	return data, false, nil
}

// upload writes a file with execd's multipart upload: a metadata part
// (JSON) followed by the file part.
func (s *remote) upload(ctx context.Context, p string, data []byte, perm fs.FileMode) error {
	mode, _ := strconv.Atoi(strconv.FormatUint(uint64(perm.Perm()), 8))
	meta, err := json.Marshal(map[string]any{"path": p, "mode": mode})
	if err != nil {
		return err
	}
	body := transfer.MultipartBytes(uploadParts(meta, path.Base(p)), data)
	resp, err := s.p.do(ctx, "upload file", request{method: http.MethodPost, url: s.execd + "/files/upload", header: s.hdr, body: body, idempotent: true})
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	return nil
}
