package transfer

import (
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

func TestMultipartPipe(t *testing.T) {
	body, ctype := MultipartPipe(func(mw *multipart.Writer) error {
		if err := mw.WriteField("metadata", `{"path":"/x"}`); err != nil {
			return err
		}
		_, err := mw.CreateFormFile("file", "x.bin")
		return err
	}, strings.NewReader("content"))
	defer func() { _ = body.Close() }()
	got := readParts(t, body, ctype)
	if want := `metadata={"path":"/x"}|file=content`; strings.Join(got, "|") != want {
		t.Errorf("parts = %q, want %q", strings.Join(got, "|"), want)
	}
}

func TestMultipartFile(t *testing.T) {
	body, ctype, length := MultipartFile("file", "x.bin", strings.NewReader("content"), 7)
	data, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	if int64(len(data)) != length {
		t.Errorf("body of %d bytes, announced length %d", len(data), length)
	}
	if got, want := strings.Join(readParts(t, strings.NewReader(string(data)), ctype), "|"), "file=content"; got != want {
		t.Errorf("parts = %q, want %q", got, want)
	}
}

func TestMultipartBytes(t *testing.T) {
	body := MultipartBytes(func(mw *multipart.Writer) error {
		if err := mw.WriteField("metadata", "{}"); err != nil {
			return err
		}
		return FormFile("file", "x.bin")(mw)
	}, []byte("content"))
	for i := range 2 { // a fresh body for every attempt
		r, ctype, err := body()
		if err != nil {
			t.Fatalf("body() #%d = %v, want no error", i, err)
		}
		req, err := http.NewRequest(http.MethodPost, "http://x/", r)
		if err != nil {
			t.Fatal(err)
		}
		if req.ContentLength <= 0 {
			t.Errorf("body() #%d: Content-Length %d, want the body's length", i, req.ContentLength)
		}
		if got, want := strings.Join(readParts(t, req.Body, ctype), "|"), "metadata={}|file=content"; got != want {
			t.Errorf("body() #%d: parts = %q, want %q", i, got, want)
		}
	}
}

func TestMultipartStreamSizeMismatch(t *testing.T) {
	for _, tc := range []struct {
		data string
		size int64
	}{{"short", 10}, {"too long", 3}} {
		body, _, _, err := MultipartStream(func(mw *multipart.Writer) error {
			return mw.WriteField("metadata", "{}")
		}, strings.NewReader(tc.data), tc.size)
		if err != nil {
			t.Fatalf("MultipartStream = %v, want no error", err)
		}
		if _, err := io.ReadAll(body); !errors.Is(err, sandbox.ErrSizeMismatch) {
			t.Errorf("reading a body of %q announced as %d bytes = %v, want sandbox.ErrSizeMismatch", tc.data, tc.size, err)
		}
	}
}
