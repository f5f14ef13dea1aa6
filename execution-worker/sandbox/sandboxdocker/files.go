package sandboxdocker

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
)

// maxFileSize bounds ReadFile, which holds the whole file in memory.
const maxFileSize = 256 << 20

// maxLinkHops bounds symbolic link resolution (the kernel's own limit is 40).
const maxLinkHops = 40

// lexical returns the absolute, clean container path p names, or
// ErrPathEscape. Relative paths are taken from Root and must not leave it;
// absolute ones must lie under Root or in the session paths
// ([sandbox.InSessionPaths]).
func lexical(p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("invalid path %q", p)
	}
	if !path.IsAbs(p) {
		rel := path.Clean(p)
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "", fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
		}
		return path.Join(Root, rel), nil
	}
	clean := path.Clean(p)
	if !allowed(clean) {
		return "", fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
	}
	return clean, nil
}

// within reports whether the absolute, clean container path p is Root or
// lies under it.
func within(p string) bool {
	return p == Root || strings.HasPrefix(p, Root+"/")
}

// allowed reports whether file access may reach the absolute, clean
// container path p: Root and the session paths.
func allowed(p string) bool {
	return within(p) || sandbox.InSessionPaths(p)
}

// under returns p relative to its ancestor dir (both absolute and clean),
// and false when p is not strictly below dir.
func under(dir, p string) (string, bool) {
	prefix := dir + "/"
	if dir == "/" {
		prefix = "/"
	}
	rel, ok := strings.CutPrefix(p, prefix)
	if !ok || rel == "" {
		return "", false
	}
	return rel, true
}

// resolved is a path resolved inside the container.
type resolved struct {
	// path is the absolute container path with every existing symbolic
	// link resolved; it lies under Root.
	path string
	// stat describes path when exists is set.
	stat   container.PathStat
	exists bool
	// dir is the deepest existing directory on the way to path (path's
	// parent when that exists).
	dir string
}

// resolve checks p lexically, then walks it component by component with the
// daemon's stat endpoint, which reports the target of a symbolic link fully
// resolved within the container. A link resolving outside Root is an escape.
func (s *containerSandbox) resolve(ctx context.Context, p string) (resolved, error) {
	abs, err := lexical(p)
	if err != nil {
		return resolved{}, err
	}
	// Root is trusted as the walk's start; a session path is walked from
	// the container's root, so a link anywhere on its way is checked.
	cur := resolved{path: Root, exists: true, dir: Root}
	rest, _ := under(Root, abs)
	if !within(abs) {
		cur = resolved{path: "/", exists: true, dir: "/"}
		rest, _ = under("/", abs)
	}
	if rest == "" {
		st, err := s.stat(ctx, cur.path)
		if err != nil {
			return resolved{}, err
		}
		cur.stat = st
		return cur, nil
	}
	comps := strings.Split(rest, "/")
	hops := 0
	for i, name := range comps {
		if !cur.exists {
			// Below a missing component nothing exists, so nothing can be
			// a link.
			cur.path = path.Join(cur.path, name)
			continue
		}
		next := path.Join(cur.path, name)
		st, err := s.stat(ctx, next)
		if cerrdefs.IsNotFound(err) {
			cur = resolved{path: next, dir: cur.path}
			continue
		}
		if err != nil {
			return resolved{}, err
		}
		if st.Mode&fs.ModeSymlink != 0 {
			hops++
			if hops > maxLinkHops {
				return resolved{}, fmt.Errorf("%q: too many levels of symbolic links", p)
			}
			target := path.Clean(st.LinkTarget)
			if !path.IsAbs(target) || !allowed(target) {
				return resolved{}, fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
			}
			// The daemon resolved the whole link chain; the target may
			// still be missing (a dangling link).
			tst, err := s.stat(ctx, target)
			switch {
			case cerrdefs.IsNotFound(err):
				dir, derr := s.deepestDir(ctx, path.Dir(target))
				if derr != nil {
					return resolved{}, derr
				}
				cur = resolved{path: target, dir: dir}
				continue
			case err != nil:
				return resolved{}, err
			case tst.Mode&fs.ModeSymlink != 0:
				return resolved{}, fmt.Errorf("%q: unresolved symbolic link", p)
			}
			next, st = target, tst
		}
		if i < len(comps)-1 && !st.Mode.IsDir() {
			return resolved{}, fmt.Errorf("%q: %s is not a directory", p, next)
		}
		cur = resolved{path: next, stat: st, exists: true, dir: path.Dir(next)}
	}
	return cur, nil
}

// deepestDir returns the deepest existing ancestor of the clean path p (p
// itself when it exists); the container's root always exists.
func (s *containerSandbox) deepestDir(ctx context.Context, p string) (string, error) {
	for p != "/" {
		_, err := s.stat(ctx, p)
		if err == nil {
			return p, nil
		}
		if !cerrdefs.IsNotFound(err) {
			return "", err
		}
		p = path.Dir(p)
	}
	return p, nil
}

func (s *containerSandbox) stat(ctx context.Context, p string) (container.PathStat, error) {
	res, err := s.p.cli.ContainerStatPath(ctx, s.ref.ID, client.ContainerStatPathOptions{Path: p})
	if err != nil {
		if cerrdefs.IsNotFound(err) && !s.containerExists(ctx) {
			return container.PathStat{}, s.mapErr(err)
		}
		return container.PathStat{}, err
	}
	return res.Stat, nil
}

// containerExists tells a missing container from a missing path (the
// daemon answers 404 for both).
func (s *containerSandbox) containerExists(ctx context.Context) bool {
	_, err := s.p.cli.ContainerInspect(ctx, s.ref.ID, client.ContainerInspectOptions{})
	return !cerrdefs.IsNotFound(err)
}

// ReadFile returns the contents of a regular file under Root.
func (s *containerSandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if err := s.checkUsable(); err != nil {
		return nil, err
	}
	r, err := s.resolve(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, s.fileErr(err))
	}
	if !r.exists {
		return nil, fmt.Errorf("read %s: %w", p, fs.ErrNotExist)
	}
	if !r.stat.Mode.IsRegular() {
		return nil, fmt.Errorf("read %s: not a regular file", p)
	}
	if r.stat.Size <= maxShellRead {
		data, ok, err := s.readInShell(ctx, r.path, r.stat.Size)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		if ok {
			return data, nil
		}
	}
	res, err := s.p.cli.CopyFromContainer(ctx, s.ref.ID, client.CopyFromContainerOptions{SourcePath: r.path})
	if err != nil {
		if cerrdefs.IsNotFound(err) && s.containerExists(ctx) {
			return nil, fmt.Errorf("read %s: %w", p, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("read %s: %w", p, s.fileErr(err))
	}
	defer func() { _ = res.Content.Close() }()
	tr := tar.NewReader(res.Content)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read %s: empty archive from the daemon", p)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		if hdr.Size > maxFileSize {
			return nil, fmt.Errorf("read %s: file larger than %d bytes", p, maxFileSize)
		}
		data := make([]byte, hdr.Size)
		if _, err := io.ReadFull(tr, data); err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		return data, nil
	}
}

// WriteFile writes data to a file under Root or in the session paths,
// creating missing parent directories (mode 0755). An existing link inside
// the allowed paths is written through, not replaced.
func (s *containerSandbox) WriteFile(ctx context.Context, p string, data []byte, perm fs.FileMode) error {
	perm = cmp.Or(perm, 0o644)
	if len(data) <= maxShellWrite && bytes.IndexByte(data, 0) < 0 {
		if err := s.writeInShell(ctx, p, data, perm); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		return nil
	}
	if err := s.put(ctx, p, bytes.NewReader(data), int64(len(data)), perm, false); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// The file tools' contents go through the sandbox's shells rather than the
// daemon's archive endpoints, which copy through a tar of the container's
// filesystem and cost 130-200 ms a call on this kind of host (a shell
// round trip costs 1-3 ms). Paths are still resolved with the daemon's
// stat endpoint (a few ms a component), so the rules on links are the
// same. Files larger than these limits, and contents with NUL bytes (which
// a shell script cannot carry), use the archive endpoints.
const (
	maxShellRead  = 16 << 20
	maxShellWrite = 1 << 20
)

// readInShell reads the resolved regular file real of the given size with
// cat. ok is false when the file grew past its size meanwhile (the caller
// then reads it through the archive endpoint).
func (s *containerSandbox) readInShell(ctx context.Context, real string, size int64) (data []byte, ok bool, err error) {
	res, err := s.fileCommand(ctx, "cat", "exec cat -- "+shellexec.Quote(real), int(size)+1)
	if err != nil || int64(len(res.Stdout)) > size {
		return nil, false, err
	}
	return res.Stdout, true, nil
}

// fileCommand runs cmd, a file operation named what, in a pooled shell:
// a timeout or a non-zero exit is an error naming what.
func (s *containerSandbox) fileCommand(ctx context.Context, what, cmd string, maxOutput int) (*sandbox.ExecResult, error) {
	res, err := s.Exec(ctx, sandbox.ExecRequest{Command: cmd, MaxOutput: maxOutput})
	switch {
	case err != nil:
		return nil, s.fileErr(err)
	case res.TimedOut:
		return nil, fmt.Errorf("%s timed out", what)
	case res.ExitCode != 0:
		return nil, fmt.Errorf("%s exited with %d: %s", what, res.ExitCode, firstLine(res.Stderr))
	}
	return res, nil
}

// writeInShell writes data (no NUL byte) to p with printf, creating
// missing parents (mode 0755); an existing link inside the allowed paths is
// written through, as put does.
func (s *containerSandbox) writeInShell(ctx context.Context, p string, data []byte, perm fs.FileMode) error {
	r, err := s.target(ctx, p)
	if err != nil {
		return err
	}
	real := shellexec.Quote(r.path)
	cmd := "mkdir -p -- " + shellexec.Quote(path.Dir(r.path)) + " && printf '%s' " + shellexec.Quote(string(data)) + " >" + real +
		" && chmod " + fmt.Sprintf("%o", perm.Perm()) + " -- " + real
	_, err = s.fileCommand(ctx, "write", cmd, 0)
	return err
}

// fileErr maps errors of file operations, keeping sandbox sentinels.
func (s *containerSandbox) fileErr(err error) error {
	if errors.Is(err, sandbox.ErrPathEscape) || errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrDestroyed) {
		return err
	}
	if s.destroyed.Load() {
		return sandbox.ErrDestroyed
	}
	return err
}
