package e2bproto

import (
	"archive/tar"
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

func TestMultipartPipe(t *testing.T) {
	body, ctype := MultipartPipe(func(mw *multipart.Writer) error {
		if err := mw.WriteField("metadata", `{"path":"/x"}`); err != nil {
			return err
		}
		_, err := mw.CreateFormFile("file", "x.bin")
		return err
	}, strings.NewReader("content"))
	defer func() { _ = body.Close() }()
	_, params, err := mime.ParseMediaType(ctype)
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(body, params["boundary"])
	var got []string
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the body: %v", err)
		}
		data, _ := io.ReadAll(p)
		got = append(got, p.FormName()+"="+string(data))
	}
	if want := `metadata={"path":"/x"}|file=content`; strings.Join(got, "|") != want {
		t.Errorf("parts = %q, want %q", strings.Join(got, "|"), want)
	}
}
