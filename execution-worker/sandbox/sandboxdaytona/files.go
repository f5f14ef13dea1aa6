package sandboxdaytona

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// lexical maps p (relative to root, or absolute under it) to a clean
// absolute path under root, or ErrPathEscape.
func lexical(root, p string) (string, error) {
	if p == "" || strings.ContainsAny(p, "\x00\n") {
		return "", fmt.Errorf("invalid path %q", p)
	}
	var abs string
	if path.IsAbs(p) {
		abs = path.Clean(p)
	} else {
		abs = path.Join(root, p)
	}
	if !within(root, abs) {
		return "", fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
	}
	return abs, nil
}

func within(root, p string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

// resolveScript resolves $p inside the sandbox: the deepest existing prefix
// through readlink -f, plus the missing rest. It prints the canonical root,
// the resolved path and its kind (file, dir, missing, other). With mk=1 and
// a resolved path inside the root, it also creates the missing parent
// directories. A resolved path outside the root prints "escape".
const resolveScript = `exec 2>/dev/null
R=$(readlink -f -- "$root") || { echo fail; exit 0; }
q=$p; rest=
while [ ! -e "$q" ] && [ ! -L "$q" ]; do rest="/${q##*/}$rest"; q=${q%/*}; [ -n "$q" ] || q=/; done
r=$(readlink -f -- "$q") || { echo fail; exit 0; }
[ "$r" = / ] && r=
x=$r$rest
case "$x" in "$R"|"$R"/*) ;; *) echo escape; exit 0;; esac
if [ -n "$rest" ] || [ ! -e "$x" ]; then k=missing
elif [ -f "$x" ]; then k=file
elif [ -d "$x" ]; then k=dir
else k=other; fi
if [ "$mk" = 1 ] && [ "$k" = missing ]; then mkdir -p -- "${x%/*}" || { echo fail; exit 0; }; fi
printf 'ok\n%s\n%s\n%s\n' "$R" "$x" "$k"
`

// resolve checks p lexically and then inside the sandbox.
func (s *remoteSandbox) resolve(ctx context.Context, p string, mkParents bool) (string, string, error) {
	abs, err := lexical(s.root, p)
	if err != nil {
		return "", "", err
	}
	mk := "0"
	if mkParents {
		mk = "1"
	}
	out, err := s.execute(ctx, "root="+quote(s.root)+"\np="+quote(abs)+"\nmk="+mk+"\n"+resolveScript, 30e9)
	if err != nil {
		return "", "", err
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	// Skip anything the daemon printed before the script's answer.
	for i, l := range lines {
		switch l {
		case "escape":
			return "", "", fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
		case "fail":
			return "", "", fmt.Errorf("%q: cannot resolve the path in the sandbox", p)
		case "ok":
			if len(lines) != i+4 {
				return "", "", fmt.Errorf("daytona: resolve %q: %w: %q", p, errMalformed, out)
			}
			canonRoot, x, kind := lines[i+1], lines[i+2], lines[i+3]
			if !path.IsAbs(x) || !within(canonRoot, x) {
				return "", "", fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
			}
			return x, kind, nil
		}
	}
	return "", "", fmt.Errorf("daytona: resolve %q: %w: %q", p, errMalformed, out)
}

// ReadFile returns the content of a regular file under Root.
func (s *remoteSandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	x, kind, err := s.resolve(ctx, p, false)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, s.fileErr(err))
	}
	switch kind {
	case "missing":
		return nil, fmt.Errorf("read %s: %w", p, fs.ErrNotExist)
	case "file":
	default:
		return nil, fmt.Errorf("read %s: not a regular file", p)
	}
	data, err := s.call(ctx, "/files/download?"+url.Values{"path": {x}}.Encode(), request{method: http.MethodGet, idempotent: true})
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
	if err := s.usable(ctx); err != nil {
		return err
	}
	x, kind, err := s.resolve(ctx, p, true)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, s.fileErr(err))
	}
	if kind == "dir" || kind == "other" {
		return fmt.Errorf("write %s: not a regular file", p)
	}
	if err := s.upload(ctx, x, data); err != nil {
		return fmt.Errorf("write %s: %w", p, s.fileErr(err))
	}
	if perm = perm.Perm(); kind == "missing" && perm != 0 && perm != 0o644 {
		out, err := s.execute(ctx, "chmod "+strconv.FormatUint(uint64(perm), 8)+" -- "+quote(x)+" && echo ok", 30e9)
		if err != nil {
			return fmt.Errorf("write %s: chmod: %w", p, s.fileErr(err))
		}
		if strings.TrimSpace(out) != "ok" {
			return fmt.Errorf("write %s: chmod failed: %q", p, out)
		}
	}
	return nil
}

// upload writes data to the absolute path x through the multipart upload.
func (s *remoteSandbox) upload(ctx context.Context, x string, data []byte) error {
	body := func() (io.Reader, string, error) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, err := mw.CreateFormFile("file", path.Base(x))
		if err != nil {
			return nil, "", err
		}
		if _, err := fw.Write(data); err != nil {
			return nil, "", err
		}
		if err := mw.Close(); err != nil {
			return nil, "", err
		}
		return &buf, mw.FormDataContentType(), nil
	}
	_, err := s.call(ctx, "/files/upload?"+url.Values{"path": {x}}.Encode(), request{method: http.MethodPost, body: body, idempotent: true})
	return err
}

// fileErr keeps sandbox sentinels and reports ErrDestroyed after Destroy.
func (s *remoteSandbox) fileErr(err error) error {
	if s.destroyed.Load() {
		return sandbox.ErrDestroyed
	}
	return err
}
