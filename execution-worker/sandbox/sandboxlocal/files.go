package sandboxlocal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// tempPrefix starts the names of the temporary files PutFile writes before
// renaming them into place; ListFiles does not report them.
const tempPrefix = ".mango-put-"

// PutFile writes size bytes of r to a temporary file beside name and
// renames it into place, so a reader sees the old file or the whole new
// one, never a part. An existing file, or a symbolic link, at name is
// replaced (a link is not written through, unlike WriteFile).
func (s *localSandbox) PutFile(ctx context.Context, name string, r io.Reader, size int64, perm fs.FileMode) error {
	root, rel, err := s.openRoot(ctx, name)
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	defer func() { _ = root.Close() }()
	if err := s.put(ctx, root, rel, r, size, perm); err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	return nil
}

// put is PutFile on an open root.
func (s *localSandbox) put(ctx context.Context, root *os.Root, rel string, r io.Reader, size int64, perm fs.FileMode) error {
	if rel == "." {
		return errors.New("is the workspace directory")
	}
	if size < 0 {
		return fmt.Errorf("negative size %d", size)
	}
	dir := filepath.Dir(rel)
	if dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return s.fileError(err, rel)
		}
	}
	tmp := filepath.Join(dir, tempPrefix+randomHex())
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return s.fileError(err, rel)
	}
	committed := false
	defer func() {
		if !committed {
			closeFile(f)
			_ = root.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, ctxReader{ctx, sandbox.ExactReader(r, size)}); err != nil {
		return err
	}
	if err := f.Chmod(perm.Perm()); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := root.Rename(tmp, rel); err != nil {
		return s.fileError(err, rel)
	}
	committed = true
	return nil
}

// ctxReader stops a copy when its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// GetFile opens the regular file name for reading.
func (s *localSandbox) GetFile(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	root, rel, err := s.openRoot(ctx, name)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", name, err)
	}
	// Files opened through a root stay usable after it is closed.
	defer func() { _ = root.Close() }()
	f, err := root.Open(rel)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", name, s.fileError(err, rel))
	}
	fi, err := f.Stat()
	if err != nil {
		closeFile(f)
		return nil, 0, fmt.Errorf("get %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		closeFile(f)
		return nil, 0, fmt.Errorf("get %s: not a regular file", name)
	}
	return f, fi.Size(), nil
}

// ListFiles walks dir without following symbolic links (dir itself may be
// a link inside the workspace). Paths are reported under dir as it was
// named: /mnt/session/outputs/x for dir /mnt/session/outputs, the host
// path for a dir relative to the workspace.
func (s *localSandbox) ListFiles(ctx context.Context, dir string) ([]sandbox.FileInfo, error) {
	root, rel, err := s.openRoot(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	defer func() { _ = root.Close() }()
	fi, err := root.Stat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, s.fileError(err, rel))
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("list %s: not a directory", dir)
	}
	prefix := s.agentPath(dir)
	var files []sandbox.FileInfo
	err = fs.WalkDir(root.FS(), filepath.ToSlash(rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), tempPrefix) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile
		}
		if err != nil {
			return err
		}
		within := strings.TrimPrefix(p, filepath.ToSlash(rel)+"/")
		if rel == "." {
			within = p
		}
		files = append(files, sandbox.FileInfo{Path: path.Join(prefix, within), Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, s.fileError(err, rel))
	}
	slices.SortFunc(files, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// agentPath returns the absolute, clean, slash-separated form of a path
// that rel accepted: as named when absolute, under the workspace otherwise.
func (s *localSandbox) agentPath(name string) string {
	if filepath.IsAbs(name) {
		return filepath.ToSlash(filepath.Clean(name))
	}
	return filepath.ToSlash(filepath.Join(s.dir, name))
}

// RemoveAll removes name and everything under it; a symbolic link is
// removed, not followed. The workspace itself (Destroy removes it) and the
// session roots ([sandbox.SessionRoots]) cannot be removed, as on
// container providers.
func (s *localSandbox) RemoveAll(ctx context.Context, name string) error {
	root, rel, err := s.openRoot(ctx, name)
	if err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	defer func() { _ = root.Close() }()
	if rel == "." || sandbox.IsSessionRoot("/"+filepath.ToSlash(rel)) {
		return fmt.Errorf("remove %s: cannot remove a top directory", name)
	}
	if err := root.RemoveAll(rel); err != nil {
		return fmt.Errorf("remove %s: %w", name, s.fileError(err, rel))
	}
	return nil
}

// PutTree copies src into dst through one os.Root: directories, regular
// files (each written as PutFile writes it) and symbolic links, which are
// created as links with their target unchanged (an existing file or link
// in their place is replaced). A link pointing outside the workspace is
// stored, but file access through it is refused like any other escape.
func (s *localSandbox) PutTree(ctx context.Context, dst string, src fs.FS) error {
	root, base, err := s.openRoot(ctx, dst)
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, err)
	}
	defer func() { _ = root.Close() }()
	if base != "." {
		if err := root.MkdirAll(base, 0o755); err != nil {
			return fmt.Errorf("put tree %s: %w", dst, s.fileError(err, base))
		}
	}
	dirs := dirRoots{root: root, open: map[string]*os.Root{}}
	defer dirs.close()
	err = sandbox.WalkTree(src, func(e sandbox.TreeEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := filepath.Join(base, filepath.FromSlash(e.Name))
		switch {
		case e.Mode.IsDir():
			if err := root.Mkdir(rel, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s: %w", e.Name, s.fileError(err, rel))
			}
		case e.Mode.IsRegular():
			f, err := src.Open(e.Name)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			dir, err := dirs.get(filepath.Dir(rel))
			if err != nil {
				return fmt.Errorf("%s: %w", e.Name, s.fileError(err, filepath.Dir(rel)))
			}
			if err := s.put(ctx, dir, filepath.Base(rel), f, e.Size, e.Mode); err != nil {
				return fmt.Errorf("%s: %w", e.Name, err)
			}
		case e.Mode&fs.ModeSymlink != 0:
			if err := root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s: %w", e.Name, s.fileError(err, rel))
			}
			if err := root.Symlink(e.Target, rel); err != nil {
				return fmt.Errorf("%s: %w", e.Name, s.fileError(err, rel))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, err)
	}
	return nil
}

// maxDirRoots bounds the directories PutTree keeps open.
const maxDirRoots = 64

// dirRoots keeps directories of a tree open as roots of their own, so
// that writing a file resolves one name instead of its whole path (each
// component costs os.Root a system call or two).
type dirRoots struct {
	root *os.Root
	open map[string]*os.Root
}

// get returns the directory rel of the workspace, opened once.
func (d *dirRoots) get(rel string) (*os.Root, error) {
	if rel == "." {
		return d.root, nil
	}
	if r, ok := d.open[rel]; ok {
		return r, nil
	}
	if len(d.open) >= maxDirRoots {
		d.close()
	}
	r, err := d.root.OpenRoot(rel)
	if err != nil {
		return nil, err
	}
	d.open[rel] = r
	return r, nil
}

func (d *dirRoots) close() {
	for rel, r := range d.open {
		_ = r.Close()
		delete(d.open, rel)
	}
}

var (
	_ sandbox.FileTransfer = (*localSandbox)(nil)
	_ sandbox.TreePutter   = (*localSandbox)(nil)
)
