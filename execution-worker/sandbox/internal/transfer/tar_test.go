package transfer

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"strings"
	"testing"
	"testing/fstest"
)

func TestTarTree(t *testing.T) {
	src := fstest.MapFS{
		"a/run.sh":  {Data: []byte("#!/bin/sh\n"), Mode: 0o700},
		"a/b/x.txt": {Data: []byte("x"), Mode: 0o600},
		"link":      {Data: []byte("a/run.sh"), Mode: fs.ModeSymlink | 0o777},
	}
	tr := tar.NewReader(TarTree(src))
	var got []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the archive: %v", err)
		}
		data, _ := io.ReadAll(tr)
		got = append(got, h.Name+" "+fs.FileMode(h.Mode).String()+" "+h.Linkname+" "+string(data))
	}
	want := []string{
		"a/ -rwxr-xr-x  ",
		"a/b/ -rwxr-xr-x  ",
		"a/b/x.txt -rw-r--r--  x",
		"a/run.sh -rwxr-xr-x  #!/bin/sh\n",
		"link -rwxrwxrwx a/run.sh ",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("archive entries =\n%q\nwant\n%q", got, want)
	}
}

// readParts reads a multipart body of content type ctype as
// "name=content" strings.
func readParts(t *testing.T, body io.Reader, ctype string) []string {
	t.Helper()
	_, params, err := mime.ParseMediaType(ctype)
	if err != nil {
		t.Fatalf("content type %q: %v", ctype, err)
	}
	mr := multipart.NewReader(body, params["boundary"])
	var got []string
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatalf("reading the body: %v", err)
		}
		data, err := io.ReadAll(p)
		if err != nil {
			t.Fatalf("reading part %q: %v", p.FormName(), err)
		}
		got = append(got, p.FormName()+"="+string(data))
	}
}

func TestTarUpload(t *testing.T) {
	src := fstest.MapFS{"d/x.txt": {Data: []byte("x"), Mode: 0o644}}
	body, ctype := TarUpload(src, FormFile("file", "tree.tar"))
	defer func() { _ = body.Close() }()
	parts := readParts(t, body, ctype)
	if len(parts) != 1 || !strings.HasPrefix(parts[0], "file=") {
		t.Fatalf("parts = %q, want one part named file", parts)
	}
	tr := tar.NewReader(strings.NewReader(strings.TrimPrefix(parts[0], "file=")))
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the archive in the part: %v", err)
		}
		names = append(names, h.Name)
	}
	if want := "d/ d/x.txt"; strings.Join(names, " ") != want {
		t.Errorf("archive entries = %q, want %q", strings.Join(names, " "), want)
	}
}

// TestTarUploadCloseEarly checks that closing the body before reading it
// all makes a read fail instead of hanging, and stops the writers.
func TestTarUploadCloseEarly(t *testing.T) {
	src := fstest.MapFS{"big": {Data: bytes.Repeat([]byte("x"), 1<<20), Mode: 0o644}}
	body, _ := TarUpload(src, FormFile("file", "tree.tar"))
	if _, err := io.ReadFull(body, make([]byte, 1024)); err != nil {
		t.Fatalf("reading the start of the body: %v", err)
	}
	if err := body.Close(); err != nil {
		t.Errorf("Close = %v, want nil", err)
	}
	if n, err := body.Read(make([]byte, 1024)); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Read after Close = %d, %v; want io.ErrClosedPipe", n, err)
	}
}
