package e2bproto

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"path"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// TarTree returns a tar archive of src, the entries [sandbox.WalkTree]
// yields (directories, regular files with the mode [sandbox.PutTree]
// gives them, symbolic links), written as the reader is read: no file is
// held in memory. Closing the reader early stops the writer.
func TarTree(src fs.FS) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src)) }()
	return pr
}

func writeTar(w io.Writer, src fs.FS) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	err := sandbox.WalkTree(src, func(e sandbox.TreeEntry) error {
		h := &tar.Header{Name: e.Name, Mode: int64(e.Mode.Perm()), ModTime: now, Format: tar.FormatPAX}
		switch {
		case e.Mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, e.Name+"/"
		case e.Mode&fs.ModeSymlink != 0:
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.Target
		default:
			h.Typeflag, h.Size = tar.TypeReg, e.Size
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := src.Open(e.Name)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		if _, err := io.Copy(tw, sandbox.ExactReader(f, e.Size)); err != nil {
			return fmt.Errorf("%s: %w", e.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// MultipartPipe returns a multipart/form-data body of unknown length (the
// request goes chunked) and its content type. begin writes the leading
// parts and opens the last part, whose content is then copied from r as
// the body is read. Closing the body early stops the copy.
func MultipartPipe(begin func(*multipart.Writer) error, r io.Reader) (io.ReadCloser, string) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := begin(mw)
		if err == nil {
			_, err = io.Copy(pw, r)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr, mw.FormDataContentType()
}

// TreeExtractor extracts the archive $1 into the directory $2 (created
// when missing) without restoring owners, and removes the archive. GNU
// and busybox tar both take -x -o -f -C.
const TreeExtractor = `mkdir -p -- "$2" && tar -xof "$1" -C "$2"; rc=$?; rm -f -- "$1"; exit $rc`

// PutTree copies src into dst (see [sandbox.PutTree]) in one archive: the
// tar stream is uploaded through envd's POST /files to a file beside the
// workspace and extracted there with tar, links included.
func (s *remoteSandbox) PutTree(ctx context.Context, dst string, src fs.FS) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if err := s.touch(ctx); err != nil {
		return err
	}
	real, err := s.resolveAny(ctx, dst)
	if err != nil {
		return fmt.Errorf("put tree %s: %w", dst, err)
	}
	archive := path.Join(s.stateDir(), newToken()+".tar")
	tree := TarTree(src)
	defer func() { _ = tree.Close() }()
	body, ctype := MultipartPipe(func(mw *multipart.Writer) error {
		_, err := mw.CreateFormFile("file", path.Base(archive))
		return err
	}, tree)
	resp, err := s.p.cfg.send(ctx, "envd write "+archive, noRetry, func(ctx context.Context) (*http.Request, error) {
		req, err := s.envdRequest(ctx, http.MethodPost, s.filesQuery(archive), body)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", ctype)
		return req, nil
	})
	if err != nil {
		_ = body.Close()
		return fmt.Errorf("put tree %s: upload: %w", dst, s.envdFailed(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if _, code, err := s.runFor(ctx, 10*time.Minute, 64<<10, TreeExtractor, archive, real); err != nil || code != 0 {
		return fmt.Errorf("put tree %s: tar: exit code %d: %v", dst, code, err)
	}
	return nil
}

var _ sandbox.TreePutter = (*remoteSandbox)(nil)
