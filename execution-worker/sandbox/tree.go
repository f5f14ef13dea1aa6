package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
)

// TreePutter is implemented by sandboxes that copy a whole tree in one
// operation (one archive stream instead of one call per file). [PutTree]
// uses it when the sandbox offers it.
type TreePutter interface {
	// PutTree has the contract of the function [PutTree], symbolic links
	// included: they are created as links.
	PutTree(ctx context.Context, dst string, src fs.FS) error
}

// PutTree copies the tree src into the directory dst of ft (an absolute
// path as the agent sees it, or one relative to Root, with the path rules
// of [FileTransfer]). Every regular file of src is written to dst/<name>
// with mode 0755 when any of its executable bits is set and 0644 otherwise
// (the two modes git records); missing directories are created with mode
// 0755. Files already under dst that src does not name are kept; those it
// names are replaced.
//
// Symbolic links of src (when src implements [fs.ReadLinkFS], as
// [os.DirFS] does) are created as links, with their target unchanged, by
// sandboxes implementing [TreePutter]; the generic copy through
// [FileTransfer.PutFile] skips them, and skips empty directories. Other
// file types (devices, sockets, pipes) are always skipped.
func PutTree(ctx context.Context, ft FileTransfer, dst string, src fs.FS) error {
	if tp, ok := ft.(TreePutter); ok {
		return tp.PutTree(ctx, dst, src)
	}
	return WalkTree(src, func(e TreeEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.Mode.IsRegular() {
			return nil
		}
		f, err := src.Open(e.Name)
		if err != nil {
			return fmt.Errorf("put tree: %w", err)
		}
		defer func() { _ = f.Close() }()
		if err := ft.PutFile(ctx, path.Join(dst, e.Name), f, e.Size, e.Mode.Perm()); err != nil {
			return fmt.Errorf("put tree: %w", err)
		}
		return nil
	})
}

// PutReadOnlyTree is [PutTree] with read-only files: every regular file of
// src is written with mode 0555 when any of its executable bits is set and
// 0444 otherwise. Directories are made 0755 as PutTree makes them, so that
// [FileTransfer.RemoveAll] can remove the tree and a new one replace it.
// The worker places skills this way.
func PutReadOnlyTree(ctx context.Context, ft FileTransfer, dst string, src fs.FS) error {
	return PutTree(ctx, ft, dst, readOnlyTree{src})
}

// readOnlyTree is a tree whose regular files [WalkTree] gives read-only
// modes ([ReadOnlyFileMode]). It is an fs.FS like any tree, so that
// [TreePutter] implementations, which walk what they are given with
// WalkTree, honour it without knowing it.
type readOnlyTree struct{ fs.FS }

// TreeEntry is one entry of a tree walked by [WalkTree].
type TreeEntry struct {
	// Name is the slash-separated path relative to the tree's root; it is
	// a valid [fs.ValidPath] and never ".".
	Name string
	// Mode holds the entry's type and its permissions as [PutTree] writes
	// them: directories 0755, regular files 0644 or 0755 (0444 or 0555 in
	// a tree of [PutReadOnlyTree]), symbolic links 0777.
	Mode fs.FileMode
	// Size is a regular file's length in bytes.
	Size int64
	// Target is a symbolic link's target, unchanged.
	Target string
}

// WalkTree calls fn for every directory, regular file and (when src
// implements [fs.ReadLinkFS]) symbolic link of src, parents before their
// children, in lexical order. Links are not followed. A name seen twice or
// not a valid path is an error: an archive built from the entries can then
// never place a file below a link. TreePutter implementations use it so
// they agree with [PutTree] on what a tree holds.
func WalkTree(src fs.FS, fn func(TreeEntry) error) error {
	fileMode := TreeFileMode
	if ro, ok := src.(readOnlyTree); ok {
		src, fileMode = ro.FS, ReadOnlyFileMode
	}
	seen := map[string]bool{}
	return fs.WalkDir(src, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walk tree: %w", err)
		}
		if name == "." {
			if !d.IsDir() {
				return errors.New("walk tree: the root is not a directory")
			}
			return nil
		}
		if !fs.ValidPath(name) || seen[name] {
			return fmt.Errorf("walk tree: invalid or repeated name %q", name)
		}
		seen[name] = true
		e := TreeEntry{Name: name}
		switch t := d.Type(); {
		case t.IsDir():
			e.Mode = fs.ModeDir | 0o755
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return fmt.Errorf("walk tree: %w", err)
			}
			e.Mode, e.Size = fileMode(info.Mode()), info.Size()
		case t&fs.ModeSymlink != 0:
			rl, ok := src.(fs.ReadLinkFS)
			if !ok {
				return nil
			}
			target, err := rl.ReadLink(name)
			if err != nil {
				return fmt.Errorf("walk tree: %w", err)
			}
			e.Mode, e.Target = fs.ModeSymlink|0o777, target
		default:
			return nil
		}
		return fn(e)
	})
}

// TreeFileMode returns the mode [PutTree] gives a regular file of mode m:
// 0755 when m has an executable bit, 0644 otherwise.
func TreeFileMode(m fs.FileMode) fs.FileMode {
	if m.Perm()&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// ReadOnlyFileMode returns the mode [PutReadOnlyTree] gives a regular file
// of mode m: 0555 when m has an executable bit, 0444 otherwise.
func ReadOnlyFileMode(m fs.FileMode) fs.FileMode {
	return TreeFileMode(m) &^ 0o222
}

// TreeGetter is implemented by sandboxes that read a whole tree in one
// operation (one archive stream instead of one call per file). [WalkFiles]
// uses it when the sandbox offers it.
type TreeGetter interface {
	// GetTree has the contract of the function [WalkFiles].
	GetTree(ctx context.Context, dir string, fn WalkFilesFunc) error
}

// WalkFilesFunc receives one regular file found by [WalkFiles]: its
// absolute path as the agent sees it (as [FileInfo.Path]), its size, and
// its content. r is valid only until fn returns, and fn need not read it
// to its end. An error from fn stops the walk; WalkFiles returns it
// (possibly wrapped).
type WalkFilesFunc func(path string, size int64, r io.Reader) error

// WalkFiles calls fn for every regular file under dir (with the path rules
// of [FileTransfer]), recursively, in no particular order. Symbolic links
// are not followed and not reported; other entry types (directories,
// devices, sockets, pipes, hard links of archives) are skipped. A missing
// dir is not an error: fn is never called. A file removed while the walk
// runs may be left out.
//
// It uses [TreeGetter] when ft implements it, else [FileTransfer.ListFiles]
// and one [FileTransfer.GetFile] per file.
func WalkFiles(ctx context.Context, ft FileTransfer, dir string, fn WalkFilesFunc) error {
	if tg, ok := ft.(TreeGetter); ok {
		return tg.GetTree(ctx, dir, fn)
	}
	files, err := ft.ListFiles(ctx, dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := walkOne(ctx, ft, f.Path, fn); err != nil {
			return err
		}
	}
	return nil
}

// walkOne opens the file p and hands it to fn; a file gone since it was
// listed is skipped.
func walkOne(ctx context.Context, ft FileTransfer, p string, fn WalkFilesFunc) error {
	rc, size, err := ft.GetFile(ctx, p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	return fn(p, size, rc)
}
