package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"
)

// Session directories: where a session's inputs are mounted and where the
// agent leaves what it wants published. They are absolute paths as the
// agent sees them. Container and remote providers use them as they are; a
// provider whose Root is not /workspace (local) maps them into its
// workspace (see [Sandbox.ReadFile]).
const (
	// SessionDir holds the session's mounts and outputs.
	SessionDir = "/mnt/session"
	// UploadsDir is where file resources are mounted by default
	// (UploadsDir/<file id>), read-only.
	UploadsDir = SessionDir + "/uploads"
	// OutputsDir is where the agent writes files to be published as Files
	// before the session goes idle.
	OutputsDir = SessionDir + "/outputs"
	// MemoryDir holds the session's memory stores, each mounted at
	// MemoryDir/<name>. Like SessionDir it is a session root: every
	// provider maps it, and it cannot be removed itself.
	MemoryDir = "/mnt/memory"
	// WorkspaceDir is the workspace as container providers mount it; a
	// repository resource's default mount path is WorkspaceDir/<repo>.
	WorkspaceDir = "/workspace"
)

// SessionRoots are the directories outside the workspace a session may
// address ([SessionDir] and [MemoryDir]): providers whose Root is not
// /workspace map each of them into their workspace, and
// [FileTransfer.RemoveAll] refuses to remove one of them itself.
var SessionRoots = []string{SessionDir, MemoryDir}

// SessionRoot returns the session root ([SessionRoots]) the absolute,
// cleaned path p is or lies under, and false when there is none.
func SessionRoot(p string) (string, bool) {
	for _, dir := range SessionRoots {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return dir, true
		}
	}
	return "", false
}

// IsSessionRoot reports whether the absolute, cleaned path p is one of
// [SessionRoots] itself.
func IsSessionRoot(p string) bool {
	for _, dir := range SessionRoots {
		if p == dir {
			return true
		}
	}
	return false
}

// FileInfo describes one regular file found by [FileTransfer.ListFiles].
type FileInfo struct {
	// Path is the file's absolute path as the agent sees it (under the
	// directory that was listed, cleaned, with forward slashes).
	Path string
	// Size is the file's length in bytes.
	Size int64
	// ModTime is the last modification time, at the provider's precision
	// (zero when the provider cannot tell).
	ModTime time.Time
}

// FileTransfer is the capability of sandboxes that exchange whole files
// with the worker at absolute paths: the workspace, and the session
// directories under [SessionDir] and [MemoryDir] even when they lie outside Root. The
// worker uses it to mount session resources and to collect outputs. Every
// provider's Sandbox implements it.
//
// Paths are absolute as the agent sees them ([Sandbox.ReadFile] accepts the
// same); a path that is neither under Root, nor under [WorkspaceDir], nor
// under one of [SessionRoots] returns [ErrPathEscape]. Implementations stream: no
// method holds a whole file in memory.
type FileTransfer interface {
	// PutFile writes size bytes read from r to path, creating missing
	// parent directories (mode 0755) and replacing an existing file. The
	// file has mode perm once PutFile returns nil; a failed PutFile may
	// leave a partial file at path, which a retry replaces. r yielding
	// fewer or more than size bytes is an error.
	PutFile(ctx context.Context, path string, r io.Reader, size int64, perm fs.FileMode) error
	// GetFile opens path for reading and returns its size. A missing file
	// returns an error matching fs.ErrNotExist. The caller closes the
	// reader.
	GetFile(ctx context.Context, path string) (io.ReadCloser, int64, error)
	// ListFiles returns every regular file under dir, recursively, sorted
	// by Path. Symbolic links are not followed and not listed. A missing
	// dir is not an error: the list is empty.
	ListFiles(ctx context.Context, dir string) ([]FileInfo, error)
	// RemoveAll removes path and everything under it; a missing path is
	// not an error. The workspace root and the [SessionRoots] themselves
	// are refused.
	RemoveAll(ctx context.Context, path string) error
}

// InSessionPaths reports whether the absolute, cleaned path p lies in a
// directory the session may address outside its Root: [SessionDir],
// [MemoryDir] or [WorkspaceDir] (or is one of them).
func InSessionPaths(p string) bool {
	p = path.Clean(p)
	if _, ok := SessionRoot(p); ok {
		return true
	}
	return p == WorkspaceDir || strings.HasPrefix(p, WorkspaceDir+"/")
}

// ErrSizeMismatch reports a [FileTransfer.PutFile] reader that yielded
// fewer or more bytes than the size it was announced with.
var ErrSizeMismatch = errors.New("content length differs from the announced size")

// ExactReader returns a reader of r that yields exactly size bytes: it
// fails with an error matching [ErrSizeMismatch] when r ends early, or when
// r still has data after size bytes (it probes r for one more byte before
// reporting io.EOF). Implementations of PutFile wrap their input with it.
func ExactReader(r io.Reader, size int64) io.Reader {
	return &exactReader{r: r, left: size, size: size}
}

type exactReader struct {
	r          io.Reader
	left, size int64
	err        error
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.left <= 0 {
		// Every announced byte was delivered: r must be at its end.
		var probe [1]byte
		n, err := io.ReadFull(e.r, probe[:])
		switch {
		case n > 0:
			e.err = fmt.Errorf("more than %d bytes: %w", e.size, ErrSizeMismatch)
		case errors.Is(err, io.EOF):
			e.err = io.EOF
		default:
			e.err = err
		}
		return 0, e.err
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if errors.Is(err, io.EOF) {
		if e.left > 0 {
			e.err = fmt.Errorf("%d bytes, want %d: %w", e.size-e.left, e.size, ErrSizeMismatch)
			return n, e.err
		}
		err = nil // the probe above reports the end
	}
	return n, err
}
