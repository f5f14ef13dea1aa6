package transfer

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
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

// TarUpload returns a multipart/form-data body of unknown length (the
// request goes chunked) whose last part, opened by begin (see
// [MultipartPipe], [FormFile]), holds src as one tar archive
// ([TarTree]), and its content type. Closing the body stops both the
// archive and the body writers; callers close it once the upload is done
// or failed.
func TarUpload(src fs.FS, begin func(*multipart.Writer) error) (io.ReadCloser, string) {
	tree := TarTree(src)
	body, ctype := MultipartPipe(begin, tree)
	return &tarBody{ReadCloser: body, tree: tree}, ctype
}

// tarBody is a multipart body that also closes the archive it copies.
type tarBody struct {
	io.ReadCloser
	tree io.Closer
}

func (b *tarBody) Close() error {
	err := b.ReadCloser.Close()
	_ = b.tree.Close()
	return err
}

// TreeExtractor extracts the archive $1 into the directory $2 (created
// when missing) without restoring owners, and removes the archive. GNU
// and busybox tar both take -x -o -f -C.
const TreeExtractor = `mkdir -p -- "$2" && tar -xof "$1" -C "$2"; rc=$?; rm -f -- "$1"; exit $rc`
