package sandboxdocker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
)

// PutFile streams r into the container as a tar archive built on the fly
// (the archive endpoint, one call, never the whole file in memory), under a
// temporary name beside p, then renames it into place with mv: a reader
// sees the old file or the whole new one, and an upload that failed
// midway, which the daemon may still be extracting after the call
// returned, can never overwrite p later. An existing link inside the
// allowed paths is written through.
func (s *containerSandbox) PutFile(ctx context.Context, p string, r io.Reader, size int64, perm fs.FileMode) error {
	if err := s.put(ctx, p, r, size, perm, true); err != nil {
		return fmt.Errorf("put %s: %w", p, err)
	}
	return nil
}

// tempPrefix starts the names of PutFile's temporary files; ListFiles does
// not report them.
const tempPrefix = ".mango-put-"

// put writes size bytes of r to p: through a temporary file renamed into
// place when viaTemp is set (PutFile), directly otherwise (WriteFile, whose
// content is in memory and cannot fail midway).
func (s *containerSandbox) put(ctx context.Context, p string, r io.Reader, size int64, perm fs.FileMode, viaTemp bool) error {
	if err := s.checkUsable(); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("negative size %d", size)
	}
	res, err := s.target(ctx, p)
	if err != nil {
		return err
	}
	rel, ok := under(res.dir, res.path)
	if !ok {
		return fmt.Errorf("cannot place %s under %s", res.path, res.dir)
	}
	name := rel
	if viaTemp {
		name = path.Join(path.Dir(rel), tempPrefix+shellexec.NewToken())
	}
	err = s.extract(ctx, res.dir, func(tw *tar.Writer) error {
		now := time.Now()
		if err := writeParents(tw, name, now); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg,
			Name:     name,
			Mode:     int64(perm.Perm()),
			Size:     size,
			ModTime:  now,
		}); err != nil {
			return err
		}
		_, err := io.Copy(tw, sandbox.ExactReader(r, size))
		return err
	})
	if !viaTemp {
		return err
	}
	tmp := path.Join(res.dir, name)
	if err != nil {
		// Best effort: the daemon may still be writing it.
		_, _ = s.Exec(ctx, sandbox.ExecRequest{Command: "rm -f -- " + shellexec.Quote(tmp)})
		return err
	}
	_, err = s.fileCommand(ctx, "mv", "mv -f -- "+shellexec.Quote(tmp)+" "+shellexec.Quote(res.path), 0)
	return err
}

// target resolves p as a file to write: missing, or a regular file.
func (s *containerSandbox) target(ctx context.Context, p string) (resolved, error) {
	res, err := s.resolve(ctx, p)
	if err != nil {
		return resolved{}, s.fileErr(err)
	}
	if res.exists && res.stat.Mode.IsDir() {
		return resolved{}, errors.New("is a directory")
	}
	if res.exists && !res.stat.Mode.IsRegular() {
		return resolved{}, errors.New("not a regular file")
	}
	return res, nil
}

// writeParents writes a directory entry (mode 0755) for every parent of the
// slash-separated relative name.
func writeParents(tw *tar.Writer, name string, now time.Time) error {
	parts := strings.Split(name, "/")
	for i := range parts[:len(parts)-1] {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir,
			Name:     strings.Join(parts[:i+1], "/") + "/",
			Mode:     0o755,
			ModTime:  now,
		}); err != nil {
			return err
		}
	}
	return nil
}

// errUploadEnded unblocks an archive writer whose upload has ended.
var errUploadEnded = errors.New("archive upload ended")

// extract streams the archive write produces into the container directory
// dir, through a pipe: the archive is never held in memory. An error of
// write (a short source, a failing reader) wins over the daemon's.
func (s *containerSandbox) extract(ctx context.Context, dir string, write func(*tar.Writer) error) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		tw := tar.NewWriter(pw)
		err := write(tw)
		if err == nil {
			err = tw.Close()
		}
		_ = pw.CloseWithError(err) // nil: the reader sees io.EOF
		done <- err
	}()
	_, err := s.p.cli.CopyToContainer(ctx, s.ref.ID, client.CopyToContainerOptions{
		DestinationPath: dir,
		Content:         pr,
	})
	_ = pr.CloseWithError(errUploadEnded)
	if werr := <-done; werr != nil && !errors.Is(werr, errUploadEnded) {
		return werr
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) && !s.containerExists(ctx) {
			return s.mapErr(err)
		}
		return s.fileErr(err)
	}
	return nil
}

// GetFile streams a regular file out of the container's archive endpoint.
func (s *containerSandbox) GetFile(ctx context.Context, p string) (io.ReadCloser, int64, error) {
	if err := s.checkUsable(); err != nil {
		return nil, 0, err
	}
	r, err := s.resolve(ctx, p)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", p, s.fileErr(err))
	}
	if !r.exists {
		return nil, 0, fmt.Errorf("get %s: %w", p, fs.ErrNotExist)
	}
	if !r.stat.Mode.IsRegular() {
		return nil, 0, fmt.Errorf("get %s: not a regular file", p)
	}
	res, err := s.p.cli.CopyFromContainer(ctx, s.ref.ID, client.CopyFromContainerOptions{SourcePath: r.path})
	if err != nil {
		if cerrdefs.IsNotFound(err) && s.containerExists(ctx) {
			return nil, 0, fmt.Errorf("get %s: %w", p, fs.ErrNotExist)
		}
		return nil, 0, fmt.Errorf("get %s: %w", p, s.fileErr(err))
	}
	tr := tar.NewReader(res.Content)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			_ = res.Content.Close()
			return nil, 0, fmt.Errorf("get %s: no regular file in the daemon's archive", p)
		}
		if err != nil {
			_ = res.Content.Close()
			return nil, 0, fmt.Errorf("get %s: %w", p, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			return entryReader{Reader: tr, Closer: res.Content}, hdr.Size, nil
		}
	}
}

// entryReader reads one tar entry and closes the archive stream.
type entryReader struct {
	io.Reader
	io.Closer
}

// listScript prints, for each batch of files find hands it, the batch's
// length on a line, the names NUL-terminated, then "size mtime name" per
// file that still exists (busybox find has no -printf). The names tell
// where each stat line ends even when a name holds a newline.
const listScript = `printf '%d\n' $#; printf '%s\0' "$@"; stat -c '%s %Y %n' "$@" 2>/dev/null; true`

// maxListOutput bounds the listing a ListFiles command may print.
const maxListOutput = 64 << 20

// ListFiles lists dir with find and stat inside the container. Paths are
// reported under dir as it was named (relative names under Root).
func (s *containerSandbox) ListFiles(ctx context.Context, dir string) ([]sandbox.FileInfo, error) {
	if err := s.checkUsable(); err != nil {
		return nil, err
	}
	r, err := s.resolve(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, s.fileErr(err))
	}
	if !r.exists {
		return nil, nil
	}
	if !r.stat.Mode.IsDir() {
		return nil, fmt.Errorf("list %s: not a directory", dir)
	}
	prefix, err := lexical(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	res, err := s.Exec(ctx, sandbox.ExecRequest{
		Command:   "find " + shellexec.Quote(r.path) + " -type f -exec sh -c " + shellexec.Quote(listScript) + " sh {} +",
		MaxOutput: maxListOutput,
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	switch {
	case res.TimedOut:
		return nil, fmt.Errorf("list %s: timed out", dir)
	case res.Truncated:
		return nil, fmt.Errorf("list %s: more than %d bytes of listing", dir, maxListOutput)
	case res.ExitCode != 0:
		// find fails when a directory vanishes during the walk.
		return nil, fmt.Errorf("list %s: find exited with %d: %s", dir, res.ExitCode, firstLine(res.Stderr))
	}
	files, err := parseListing(res.Stdout, r.path, prefix)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	slices.SortFunc(files, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// GetTree streams dir out of the container's archive endpoint: one
// resolution of dir and one archive of the whole directory, whose entries
// (named under dir's base name) are mapped back to paths under dir as it
// was named. Entries that are not regular files (links, hard links,
// devices) and names that would leave dir are skipped.
func (s *containerSandbox) GetTree(ctx context.Context, dir string, fn sandbox.WalkFilesFunc) error {
	if err := s.checkUsable(); err != nil {
		return err
	}
	r, err := s.resolve(ctx, dir)
	if err != nil {
		return fmt.Errorf("get tree %s: %w", dir, s.fileErr(err))
	}
	if !r.exists {
		return nil
	}
	if !r.stat.Mode.IsDir() {
		return fmt.Errorf("get tree %s: not a directory", dir)
	}
	prefix, err := lexical(dir)
	if err != nil {
		return fmt.Errorf("get tree %s: %w", dir, err)
	}
	res, err := s.p.cli.CopyFromContainer(ctx, s.ref.ID, client.CopyFromContainerOptions{SourcePath: r.path})
	if err != nil {
		if cerrdefs.IsNotFound(err) && s.containerExists(ctx) {
			return nil // dir vanished since it was resolved
		}
		return fmt.Errorf("get tree %s: %w", dir, s.fileErr(err))
	}
	defer func() { _ = res.Content.Close() }()
	if err := walkArchive(tar.NewReader(res.Content), path.Base(r.path), prefix, fn); err != nil {
		return fmt.Errorf("get tree %s: %w", dir, err)
	}
	return nil
}

// walkArchive calls fn for every regular file of tr named under base/,
// reported as prefix/<name below base>. Other entries, the temporary
// files of PutFile, and names that are not clean paths below base are
// skipped.
func walkArchive(tr *tar.Reader, base, prefix string, fn sandbox.WalkFilesFunc) error {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		rel, ok := strings.CutPrefix(hdr.Name, base+"/")
		if !ok || !fs.ValidPath(rel) || rel == "." || strings.HasPrefix(path.Base(rel), tempPrefix) {
			continue
		}
		if err := fn(path.Join(prefix, rel), hdr.Size, tr); err != nil {
			return err
		}
	}
}

// parseListing reads the output of listScript. Names under the container
// directory real are reported under prefix; a name without its stat line
// (removed between find and stat) is left out.
func parseListing(out []byte, real, prefix string) ([]sandbox.FileInfo, error) {
	br := bufio.NewReader(bytes.NewReader(out))
	var files []sandbox.FileInfo
	for {
		line, err := br.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" {
			return files, nil
		}
		if err != nil {
			return nil, errors.New("truncated listing")
		}
		n, err := strconv.Atoi(strings.TrimSuffix(line, "\n"))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("unexpected listing line %q", line)
		}
		names := make([]string, n)
		for i := range names {
			name, err := br.ReadString(0)
			if err != nil {
				return nil, errors.New("truncated listing")
			}
			names[i] = strings.TrimSuffix(name, "\x00")
		}
		for _, name := range names {
			size, mtime, ok := statLine(br, name)
			if !ok || strings.HasPrefix(path.Base(name), tempPrefix) {
				continue
			}
			rel, ok := under(real, name)
			if !ok {
				return nil, fmt.Errorf("find reported %q outside %s", name, real)
			}
			files = append(files, sandbox.FileInfo{Path: path.Join(prefix, rel), Size: size, ModTime: mtime})
		}
	}
}

// statLine consumes "size mtime name\n" from br when that is what comes
// next, and leaves br untouched otherwise.
func statLine(br *bufio.Reader, name string) (int64, time.Time, bool) {
	// The line is at most two 20-digit numbers, two spaces, the name and
	// a newline; Peek fails near the end of the input, so try shorter.
	want := len(name) + 44
	buf, _ := br.Peek(want)
	sizeStr, rest, ok := strings.Cut(string(buf), " ")
	if !ok {
		return 0, time.Time{}, false
	}
	mtimeStr, rest, ok := strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(rest, name+"\n") {
		return 0, time.Time{}, false
	}
	size, err1 := strconv.ParseInt(sizeStr, 10, 64)
	mtime, err2 := strconv.ParseInt(mtimeStr, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, time.Time{}, false
	}
	_, _ = br.Discard(len(sizeStr) + 1 + len(mtimeStr) + 1 + len(name) + 1)
	return size, time.Unix(mtime, 0), true
}

// RemoveAll removes p with rm -rf inside the container. A link is removed,
// not followed: only p's parent is resolved. Root and the top session
// directory, whose parents lie outside the allowed paths, cannot be
// removed.
func (s *containerSandbox) RemoveAll(ctx context.Context, p string) error {
	if err := s.checkUsable(); err != nil {
		return err
	}
	abs, err := lexical(p)
	if err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	if !allowed(path.Dir(abs)) {
		return fmt.Errorf("remove %s: cannot remove a top directory", p)
	}
	parent, err := s.resolve(ctx, path.Dir(abs))
	if err != nil {
		return fmt.Errorf("remove %s: %w", p, s.fileErr(err))
	}
	if !parent.exists {
		return nil
	}
	target := path.Join(parent.path, path.Base(abs))
	res, err := s.Exec(ctx, sandbox.ExecRequest{Command: "rm -rf -- " + shellexec.Quote(target)})
	if err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	if res.ExitCode != 0 || res.TimedOut {
		return fmt.Errorf("remove %s: rm exited with %d: %s", p, res.ExitCode, firstLine(res.Stderr))
	}
	return nil
}

// PutTree copies src into dst with one archive stream: directories,
// regular files and symbolic links (kept as links, target unchanged).
func (s *containerSandbox) PutTree(ctx context.Context, dst string, src fs.FS) error {
	if err := s.checkUsable(); err != nil {
		return err
	}
	r, err := s.resolve(ctx, dst)
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, s.fileErr(err))
	}
	if r.exists && !r.stat.Mode.IsDir() {
		return fmt.Errorf("put tree %s: not a directory", dst)
	}
	// A tree of directories only (the session directories) is made with
	// mkdir in a pooled shell: an archive costs 130-200 ms.
	if dirs, ok := directoriesOnly(src); ok {
		if err := s.makeDirs(ctx, r.path, dirs); err != nil {
			return fmt.Errorf("put tree %s: %w", dst, err)
		}
		return nil
	}
	// The archive is extracted in the deepest existing directory; base
	// names dst below it ("" when dst exists).
	into, base := r.path, ""
	if !r.exists {
		rel, ok := under(r.dir, r.path)
		if !ok {
			return fmt.Errorf("put tree %s: cannot place %s under %s", dst, r.path, r.dir)
		}
		into, base = r.dir, rel
	}
	err = s.extract(ctx, into, func(tw *tar.Writer) error {
		now := time.Now()
		if base != "" {
			if err := writeParents(tw, base+"/.", now); err != nil {
				return err
			}
		}
		return sandbox.WalkTree(src, func(e sandbox.TreeEntry) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return writeEntry(tw, src, path.Join(base, e.Name), e, now)
		})
	})
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, err)
	}
	return nil
}

// maxShellDirs bounds the directories PutTree makes with mkdir.
const maxShellDirs = 64

// directoriesOnly returns the directories of src when it holds nothing
// else (and not too many), parents first.
func directoriesOnly(src fs.FS) ([]string, bool) {
	var dirs []string
	errOther := errors.New("not only directories")
	err := sandbox.WalkTree(src, func(e sandbox.TreeEntry) error {
		if !e.Mode.IsDir() || len(dirs) == maxShellDirs {
			return errOther
		}
		dirs = append(dirs, e.Name)
		return nil
	})
	return dirs, err == nil
}

// makeDirs makes dst (resolved) and the directories dirs under it, mode
// 0755 as the archive would.
func (s *containerSandbox) makeDirs(ctx context.Context, dst string, dirs []string) error {
	cmd := "mkdir -p -m 0755 -- " + shellexec.Quote(dst)
	for _, d := range dirs {
		cmd += " " + shellexec.Quote(path.Join(dst, d))
	}
	_, err := s.fileCommand(ctx, "mkdir", cmd, 0)
	return err
}

// writeEntry writes one tree entry to the archive under name.
func writeEntry(tw *tar.Writer, src fs.FS, name string, e sandbox.TreeEntry, now time.Time) error {
	hdr := &tar.Header{Name: name, Mode: int64(e.Mode.Perm()), ModTime: now}
	switch {
	case e.Mode.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		return tw.WriteHeader(hdr)
	case e.Mode&fs.ModeSymlink != 0:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
		return tw.WriteHeader(hdr)
	}
	f, err := src.Open(e.Name)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, sandbox.ExactReader(f, e.Size)); err != nil {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	return nil
}

// firstLine returns the first line of a command's output, for errors.
func firstLine(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return line
}

var (
	_ sandbox.FileTransfer = (*containerSandbox)(nil)
	_ sandbox.TreePutter   = (*containerSandbox)(nil)
)

var _ sandbox.TreeGetter = (*containerSandbox)(nil)
