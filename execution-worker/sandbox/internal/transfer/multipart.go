package transfer

import (
	"bytes"
	"io"
	"mime/multipart"
	"slices"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// FormFile returns a begin function for [MultipartStream],
// [MultipartPipe] and [TarUpload] that opens one file part (form field
// field, file name name) and writes nothing before it.
func FormFile(field, name string) func(*multipart.Writer) error {
	return func(mw *multipart.Writer) error {
		_, err := mw.CreateFormFile(field, name)
		return err
	}
}

// MultipartBytes returns a request body function for a multipart/form-data
// body held in memory: begin writes the leading parts and opens the last
// part, which holds data. Every call builds the body afresh, so a retried
// request can send it again; the reader tells its length.
func MultipartBytes(begin func(*multipart.Writer) error, data []byte) func() (io.Reader, string, error) {
	return func() (io.Reader, string, error) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		if err := begin(mw); err != nil {
			return nil, "", err
		}
		buf.Write(data) // the content of the part begin opened
		if err := mw.Close(); err != nil {
			return nil, "", err
		}
		return &buf, mw.FormDataContentType(), nil
	}
}

// MultipartFile returns a streaming multipart/form-data body holding one
// file part (field name, file name), its content type and its exact
// length: the part's content is read from r (exactly size bytes) as the
// body is sent, never held in memory.
func MultipartFile(field, name string, r io.Reader, size int64) (io.Reader, string, int64) {
	body, ctype, length, _ := MultipartStream(FormFile(field, name), r, size)
	return body, ctype, length
}

// MultipartStream returns a streaming multipart/form-data body, its
// content type and its exact length. begin writes the leading parts and
// opens the last part, whose content is then read from r (exactly size
// bytes, else an error matching [sandbox.ErrSizeMismatch]) as the body is
// sent; the closing boundary follows. Only the leading parts are held in
// memory.
func MultipartStream(begin func(*multipart.Writer) error, r io.Reader, size int64) (io.Reader, string, int64, error) {
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	if err := begin(mw); err != nil {
		return nil, "", 0, err
	}
	pre := slices.Clone(head.Bytes())
	head.Reset()
	if err := mw.Close(); err != nil {
		return nil, "", 0, err
	}
	post := head.Bytes()
	body := io.MultiReader(bytes.NewReader(pre), sandbox.ExactReader(r, size), bytes.NewReader(post))
	return body, mw.FormDataContentType(), int64(len(pre)) + size + int64(len(post)), nil
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
