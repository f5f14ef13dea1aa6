package sandboxk8s

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
)

// relative returns the resolved path relative to the canonical root, as
// the runtime's /upload and /download take it.
func relative(r shellexec.Resolved, p string) (string, error) {
	rel, ok := strings.CutPrefix(r.Path, strings.TrimSuffix(r.Root, "/")+"/")
	if !ok || rel == "" {
		return "", fmt.Errorf("%q: not a file under the workspace root", p)
	}
	if strings.ContainsFunc(rel, unicode.IsControl) {
		return "", fmt.Errorf("%q: control characters are not supported in file names", p)
	}
	return rel, nil
}

// ReadFile returns the content of a regular file under Root or under the
// session directory.
func (s *remoteSandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	sh := s.shell()
	r, err := sh.ReadTarget(ctx, p)
	if err != nil {
		return nil, err
	}
	rel, err := relative(r, p)
	if err != nil || strings.Contains(rel, "%") {
		// /download cannot name a file outside the runtime's root (the
		// session directory), nor, unambiguously, one with '%' (the
		// reference runtime percent-decodes the path once more after its
		// server did): such files are read through /execute.
		data, err := s.readThroughShell(ctx, r.Path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, sh.FileErr(err))
		}
		return data, nil
	}
	data, err := s.call(ctx, request{method: http.MethodGet, path: "/download/" + percentEncode(rel), idempotent: true})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil, fmt.Errorf("read %s: %w", p, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("read %s: %w", p, sh.FileErr(err))
	}
	return data, nil
}

// readThroughShell returns the content of the file at the absolute path x,
// base64-encoded by a script (the output of /execute is text).
func (s *remoteSandbox) readThroughShell(ctx context.Context, x string) ([]byte, error) {
	out, err := s.execute(ctx, "exec 2>/dev/null\nbase64 < "+shellexec.Quote(x)+" && printf '\\nMANGO-READ-OK\\n'", 5*time.Minute)
	if err != nil {
		return nil, err
	}
	enc, ok := strings.CutSuffix(out, "\nMANGO-READ-OK\n")
	if !ok {
		return nil, fmt.Errorf("cannot read the file in the sandbox")
	}
	data, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(enc, "\n", ""))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
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
	rel, err := relative(r, p)
	if err != nil {
		// Outside the runtime's root (the session directory): staged in
		// the root and moved in place.
		perm = cmp.Or(perm, 0o644)
		if err := s.putResolved(ctx, r, bytes.NewReader(data), int64(len(data)), perm); err != nil {
			return fmt.Errorf("write %s: %w", p, sh.FileErr(err))
		}
		return nil
	}
	if err := s.upload(ctx, rel, data); err != nil {
		return fmt.Errorf("write %s: %w", p, sh.FileErr(err))
	}
	return sh.Written(ctx, r, p, perm)
}
