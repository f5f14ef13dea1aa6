package sandboxdocker

import (
	"archive/tar"
	"bytes"
	"io"
	"maps"
	"testing"
)

// TestWalkArchiveSkipsWhatIsNotAFileUnderDir checks that an archive of a
// directory is mapped back under the name it was asked by, and that
// entries other than regular files, names leaving the directory, names of
// another directory and PutFile's temporary files are skipped.
func TestWalkArchiveSkipsWhatIsNotAFileUnderDir(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, data string) {
		t.Helper()
		h.Size = int64(len(data))
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, data[:h.Size]); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Name: "notes/", Typeflag: tar.TypeDir}, "")
	add(&tar.Header{Name: "notes/a.md", Typeflag: tar.TypeReg}, "alpha")
	add(&tar.Header{Name: "notes/sub/with space.md", Typeflag: tar.TypeReg}, "spaced")
	add(&tar.Header{Name: "notes/empty", Typeflag: tar.TypeReg}, "")
	add(&tar.Header{Name: "notes/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "")
	add(&tar.Header{Name: "notes/hard", Typeflag: tar.TypeLink, Linkname: "notes/a.md"}, "")
	add(&tar.Header{Name: "notes/dev", Typeflag: tar.TypeChar}, "")
	add(&tar.Header{Name: "notes/../escape", Typeflag: tar.TypeReg}, "out")
	add(&tar.Header{Name: "notes//double", Typeflag: tar.TypeReg}, "odd")
	add(&tar.Header{Name: "other/b.md", Typeflag: tar.TypeReg}, "beside")
	add(&tar.Header{Name: "notesx/c.md", Typeflag: tar.TypeReg}, "beside")
	add(&tar.Header{Name: "notes/" + tempPrefix + "1", Typeflag: tar.TypeReg}, "partial")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}

	got := map[string]string{}
	err := walkArchive(tar.NewReader(&buf), "notes", "/mnt/memory/notes", func(p string, size int64, r io.Reader) error {
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if int64(len(data)) != size {
			t.Errorf("%s: announced %d bytes, read %d", p, size, len(data))
		}
		got[p] = string(data)
		return nil
	})
	if err != nil {
		t.Fatalf("walkArchive = %v, want no error", err)
	}
	want := map[string]string{
		"/mnt/memory/notes/a.md":              "alpha",
		"/mnt/memory/notes/sub/with space.md": "spaced",
		"/mnt/memory/notes/empty":             "",
	}
	if !maps.Equal(got, want) {
		t.Errorf("walkArchive reported %q, want the regular files under notes/ alone %q", got, want)
	}
}
