package skillbundle

import (
	"archive/zip"
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseFolderForms(t *testing.T) {
	t.Parallel()
	manifest := "\xef\xbb\xbf---\r\nname: pdf\r\ndescription: \"Read PDFs.\"\r\n---\r\nbody"
	for name, files := range map[string][]File{
		"wrapped": {{Path: "pdf/SKILL.md", Data: []byte(manifest)}, {Path: "pdf/a/b.py", Data: []byte("x")}},
		"flat":    {{Path: "a/b.py", Data: []byte("x")}, {Path: "SKILL.md", Data: []byte(manifest)}},
	} {
		b, err := Parse(files)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b.Name != "pdf" || b.Description != "Read PDFs." || len(b.Files) != 2 || b.Files[0].Path != "SKILL.md" || b.Files[1].Path != "a/b.py" {
			t.Errorf("%s: bundle = %+v; want pdf, its description, files SKILL.md and a/b.py", name, b)
		}
	}
}

func TestParseNameFromFolder(t *testing.T) {
	t.Parallel()
	b, err := Parse([]File{{Path: "my-skill/SKILL.md", Data: []byte("---\ndescription: d\n---\n")}})
	if err != nil || b.Name != "my-skill" {
		t.Fatalf("Parse = %+v, %v; want the folder's name when the front matter has none", b, err)
	}
	if _, err := Parse([]File{{Path: "SKILL.md", Data: []byte("---\ndescription: d\n---\n")}}); err == nil || !strings.Contains(err.Error(), "no name") {
		t.Fatalf("flat upload without a name: err = %v; want no name", err)
	}
}

func TestWriteZip(t *testing.T) {
	t.Parallel()
	b := &Bundle{Name: "pdf", Files: []File{{Path: "SKILL.md", Data: []byte("m")}, {Path: "run.sh", Data: []byte("#!/bin/sh\n")}}}
	var buf bytes.Buffer
	if err := b.WriteZip(&buf, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if len(zr.File) != 2 || zr.File[0].Name != "pdf/SKILL.md" || zr.File[1].Name != "pdf/run.sh" {
		t.Fatalf("archive members = %v; want pdf/SKILL.md, pdf/run.sh", zr.File)
	}
	if zr.File[0].Mode().Perm() != 0o644 || zr.File[1].Mode().Perm() != 0o755 {
		t.Errorf("modes = %v, %v; want 0644 and 0755", zr.File[0].Mode(), zr.File[1].Mode())
	}
}

// FuzzParse: Parse never panics, and a bundle it accepts has a valid name
// and only clean relative paths, SKILL.md among them, that the archive
// holds under the name's directory.
func FuzzParse(f *testing.F) {
	f.Add("pdf/SKILL.md", "---\nname: pdf\ndescription: d\n---\n", "pdf/x/../y")
	f.Add("SKILL.md", "---\nname: a-b\ndescription: d\n---", "x/y")
	f.Add("/SKILL.md", "---\n---\n", "SKILL.md")
	f.Fuzz(func(t *testing.T, p1, manifest, p2 string) {
		b, err := Parse([]File{{Path: p1, Data: []byte(manifest)}, {Path: p2, Data: []byte("#!x")}})
		if err != nil {
			return
		}
		if CheckName(b.Name) != nil || b.Description == "" {
			t.Fatalf("accepted name %q, description %q", b.Name, b.Description)
		}
		hasManifest := false
		for _, file := range b.Files {
			if checkPath(file.Path) != nil || strings.HasPrefix(file.Path, "/") {
				t.Fatalf("accepted path %q", file.Path)
			}
			hasManifest = hasManifest || file.Path == Manifest
		}
		if !hasManifest {
			t.Fatalf("accepted %v without %s at the root", b.Files, Manifest)
		}
		var buf bytes.Buffer
		if err := b.WriteZip(&buf, time.Time{}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestContentSHA256: the hash depends on the files (paths, bytes, the
// executable bit) and on nothing else: not the upload's form or order.
func TestContentSHA256(t *testing.T) {
	t.Parallel()
	manifest := []byte("---\nname: pdf\ndescription: d\n---\n")
	parse := func(files ...File) string {
		t.Helper()
		b, err := Parse(files)
		if err != nil {
			t.Fatal(err)
		}
		return b.ContentSHA256()
	}
	base := parse(File{Path: "pdf/SKILL.md", Data: manifest}, File{Path: "pdf/run.sh", Data: []byte("echo")})
	if got := parse(File{Path: "run.sh", Data: []byte("echo")}, File{Path: "SKILL.md", Data: manifest}); got != base {
		t.Errorf("the same files, flat and in another order: hash %s; want %s", got, base)
	}
	for name, files := range map[string][]File{
		"other bytes":     {{Path: "SKILL.md", Data: manifest}, {Path: "run.sh", Data: []byte("echo!")}},
		"other path":      {{Path: "SKILL.md", Data: manifest}, {Path: "run2.sh", Data: []byte("echo")}},
		"bytes moved":     {{Path: "SKILL.md", Data: manifest}, {Path: "run.she", Data: []byte("cho")}},
		"one file fewer":  {{Path: "SKILL.md", Data: manifest}},
		"executable file": {{Path: "SKILL.md", Data: manifest}, {Path: "run.sh", Data: []byte("#!echo")}},
	} {
		if got := parse(files...); got == base || len(got) != 64 {
			t.Errorf("%s: hash %s; want 64 hex digits other than %s", name, got, base)
		}
	}
}
