package sandboxdocker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// maxFileSize bounds ReadFile, which holds the whole file in memory.
const maxFileSize = 256 << 20

// maxLinkHops bounds symbolic link resolution (the kernel's own limit is 40).
const maxLinkHops = 40

// lexical returns the components of p relative to Root, or ErrPathEscape.
// Relative paths are taken from Root; absolute ones must lie under it.
func lexical(p string) ([]string, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return nil, fmt.Errorf("invalid path %q", p)
	}
	var rel string
	if path.IsAbs(p) {
		clean := path.Clean(p)
		switch {
		case clean == Root:
			rel = "."
		case strings.HasPrefix(clean, Root+"/"):
			rel = strings.TrimPrefix(clean, Root+"/")
		default:
			return nil, fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
		}
	} else {
		rel = path.Clean(p)
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
		}
	}
	if rel == "." {
		return nil, nil
	}
	return strings.Split(rel, "/"), nil
}

// within reports whether the absolute, clean container path p is Root or
// lies under it.
func within(p string) bool {
	return p == Root || strings.HasPrefix(p, Root+"/")
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
	comps, err := lexical(p)
	if err != nil {
		return resolved{}, err
	}
	cur := resolved{path: Root, exists: true, dir: Root}
	if len(comps) == 0 {
		st, err := s.stat(ctx, Root)
		if err != nil {
			return resolved{}, err
		}
		cur.stat = st
		return cur, nil
	}
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
			if !path.IsAbs(target) || !within(target) {
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
// itself when it exists), which must lie under Root.
func (s *containerSandbox) deepestDir(ctx context.Context, p string) (string, error) {
	for within(p) {
		_, err := s.stat(ctx, p)
		if err == nil {
			return p, nil
		}
		if !cerrdefs.IsNotFound(err) {
			return "", err
		}
		p = path.Dir(p)
	}
	return "", fmt.Errorf("%q: %w", p, sandbox.ErrPathEscape)
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

// WriteFile writes data to a file under Root, creating missing parent
// directories (mode 0755). An existing link inside the workspace is written
// through, not replaced.
func (s *containerSandbox) WriteFile(ctx context.Context, p string, data []byte, perm fs.FileMode) error {
	if err := s.checkUsable(); err != nil {
		return err
	}
	r, err := s.resolve(ctx, p)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, s.fileErr(err))
	}
	if r.path == Root || (r.exists && r.stat.Mode.IsDir()) {
		return fmt.Errorf("write %s: is a directory", p)
	}
	if r.exists && !r.stat.Mode.IsRegular() {
		return fmt.Errorf("write %s: not a regular file", p)
	}
	if perm == 0 {
		perm = 0o644
	}
	rel := strings.TrimPrefix(r.path, r.dir+"/")
	if rel == r.path || rel == "" {
		return fmt.Errorf("write %s: cannot place %s under %s", p, r.path, r.dir)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	parts := strings.Split(rel, "/")
	for i := range parts[:len(parts)-1] {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir,
			Name:     strings.Join(parts[:i+1], "/") + "/",
			Mode:     0o755,
			ModTime:  now,
		}); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     rel,
		Mode:     int64(perm.Perm()),
		Size:     int64(len(data)),
		ModTime:  now,
	}); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	_, err = s.p.cli.CopyToContainer(ctx, s.ref.ID, client.CopyToContainerOptions{
		DestinationPath: r.dir,
		Content:         &buf,
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", p, s.fileErr(err))
	}
	return nil
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
