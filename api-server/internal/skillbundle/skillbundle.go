// Package skillbundle checks the files of an uploaded skill folder and
// packs them into the archive a skill version's content is.
//
// A skill folder holds SKILL.md, whose YAML front matter names the skill
// (name, kebab-case) and says what it does (description), and any other
// files it refers to. Uploads send each file with its path relative to
// the folder's parent (my-skill/SKILL.md, my-skill/scripts/run.sh) or to
// the folder itself (SKILL.md, scripts/run.sh). Parse validates the set;
// WriteZip writes the zip archive that the SDK's agenttoolset extracts:
// every file under one top-level directory named after the skill.
//
// Errors returned by Parse are meant for clients: they name the problem
// and the offending path.
package skillbundle

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Manifest is the file at the root of every skill folder.
const Manifest = "SKILL.md"

// Limits on the fields of SKILL.md and on paths.
const (
	MaxNameLen        = 64
	MaxDescriptionLen = 1024
	MaxPathLen        = 1024
)

// File is one uploaded file: its path as sent and its bytes.
type File struct {
	Path string
	Data []byte
}

// Bundle is a validated skill folder.
type Bundle struct {
	// Name is the skill's kebab-case name from SKILL.md.
	Name string
	// Description is SKILL.md's description.
	Description string
	// Files are the folder's files, their paths relative to the folder,
	// sorted by path; SKILL.md is among them.
	Files []File
}

var kebab = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// CheckName returns an error unless name is a valid skill name: kebab-case
// (lowercase letters, digits, single hyphens between them), at most
// MaxNameLen characters.
func CheckName(name string) error {
	if len(name) > MaxNameLen {
		return fmt.Errorf("name %q is %d characters long; at most %d are allowed", name, len(name), MaxNameLen)
	}
	if !kebab.MatchString(name) {
		return fmt.Errorf("name %q must be kebab-case: lowercase letters, digits and single hyphens between them (for example my-skill)", name)
	}
	return nil
}

// Parse validates an uploaded skill folder: clean relative paths, no
// duplicates, one folder with SKILL.md at its root, and front matter with
// a kebab-case name and a description.
func Parse(files []File) (*Bundle, error) {
	if len(files) == 0 {
		return nil, errors.New("files: at least one file is required, SKILL.md among them")
	}
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		if err := checkPath(f.Path); err != nil {
			return nil, err
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("files: duplicate path %q", f.Path)
		}
		seen[f.Path] = true
	}
	top, err := folderRoot(files, seen)
	if err != nil {
		return nil, err
	}
	b := &Bundle{Files: make([]File, 0, len(files))}
	for _, f := range files {
		rel := strings.TrimPrefix(f.Path, top)
		b.Files = append(b.Files, File{Path: rel, Data: f.Data})
	}
	sort.Slice(b.Files, func(i, j int) bool { return b.Files[i].Path < b.Files[j].Path })
	for _, f := range b.Files {
		if f.Path == Manifest {
			b.Name, b.Description, err = parseManifest(f.Data, strings.TrimSuffix(top, "/"))
			if err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

// folderRoot returns the prefix ("" or "dir/") of the skill folder in the
// uploaded paths.
func folderRoot(files []File, paths map[string]bool) (string, error) {
	if paths[Manifest] {
		return "", nil
	}
	top, _, _ := strings.Cut(files[0].Path, "/")
	for _, f := range files {
		dir, _, nested := strings.Cut(f.Path, "/")
		if !nested || dir != top {
			if paths[dir+"/"+Manifest] || paths[top+"/"+Manifest] {
				return "", fmt.Errorf("files: all files must be in one top-level directory; %q and %q are not", files[0].Path, f.Path)
			}
			return "", fmt.Errorf("files: %s is missing at the root of the skill folder", Manifest)
		}
	}
	if !paths[top+"/"+Manifest] {
		return "", fmt.Errorf("files: %s is missing at the root of the skill folder (expected %s/%s)", Manifest, top, Manifest)
	}
	return top + "/", nil
}

// checkPath returns an error unless p is a clean relative slash path.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("files: a file has no path (the filename of its multipart part is empty)")
	case len(p) > MaxPathLen:
		return fmt.Errorf("files: path %q is longer than %d bytes", p[:64]+"...", MaxPathLen)
	case !utf8.ValidString(p):
		return fmt.Errorf("files: path %q is not valid UTF-8", p)
	case strings.HasPrefix(p, "/") || (len(p) >= 2 && p[1] == ':'):
		return fmt.Errorf("files: path %q is absolute; paths must be relative to the skill folder", p)
	case strings.Contains(p, `\`):
		return fmt.Errorf("files: path %q contains a backslash; separate directories with /", p)
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return fmt.Errorf("files: path %q contains a control character", p)
		}
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "..":
			return fmt.Errorf("files: path %q leaves the skill folder (..)", p)
		case "", ".":
			return fmt.Errorf("files: path %q is not a clean relative path (empty or . segment)", p)
		}
	}
	return nil
}

// parseManifest reads the front matter of SKILL.md. dir is the folder's
// name in the upload ("" when flat), the name's fallback.
func parseManifest(data []byte, dir string) (name, description string, err error) {
	body := bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	body = bytes.ReplaceAll(body, []byte("\r\n"), []byte("\n"))
	rest, ok := bytes.CutPrefix(body, []byte("---\n"))
	if !ok {
		return "", "", fmt.Errorf("%s: must begin with YAML front matter between --- lines, holding name and description", Manifest)
	}
	front, _, ok := bytes.Cut(rest, []byte("\n---"))
	if !ok {
		// Empty front matter: the closing line follows the opening one.
		if !bytes.HasPrefix(rest, []byte("---")) {
			return "", "", fmt.Errorf("%s: the front matter is not closed by a --- line", Manifest)
		}
		front = nil
	}
	var fm map[string]any
	if err := yaml.Unmarshal(front, &fm); err != nil {
		return "", "", fmt.Errorf("%s: the front matter is not valid YAML: %v", Manifest, err)
	}
	name, err = stringField(fm, "name")
	if err != nil {
		return "", "", err
	}
	if name == "" {
		name = dir
	}
	if name == "" {
		return "", "", fmt.Errorf("%s: the front matter has no name", Manifest)
	}
	if err := CheckName(name); err != nil {
		return "", "", fmt.Errorf("%s: %w", Manifest, err)
	}
	description, err = stringField(fm, "description")
	switch {
	case err != nil:
		return "", "", err
	case strings.TrimSpace(description) == "":
		return "", "", fmt.Errorf("%s: the front matter has no description", Manifest)
	case utf8.RuneCountInString(description) > MaxDescriptionLen:
		return "", "", fmt.Errorf("%s: description is longer than %d characters", Manifest, MaxDescriptionLen)
	}
	return name, description, nil
}

func stringField(fm map[string]any, key string) (string, error) {
	v, ok := fm[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: front matter field %s must be a string", Manifest, key)
	}
	return strings.TrimSpace(s), nil
}

// WriteZip writes the bundle as a zip archive with every file under the
// directory Name/, dated at. A file that begins with "#!" is executable
// (0755), any other 0644: the SDK's extractor keeps that bit.
func (b *Bundle) WriteZip(w io.Writer, at time.Time) error {
	zw := zip.NewWriter(w)
	for _, f := range b.Files {
		h := &zip.FileHeader{Name: b.Name + "/" + f.Path, Method: zip.Deflate, Modified: at.UTC()}
		h.SetMode(0o644)
		if bytes.HasPrefix(f.Data, []byte("#!")) {
			h.SetMode(0o755)
		}
		fw, err := zw.CreateHeader(h)
		if err != nil {
			return fmt.Errorf("write skill archive: %w", err)
		}
		if _, err := fw.Write(f.Data); err != nil {
			return fmt.Errorf("write skill archive: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write skill archive: %w", err)
	}
	return nil
}

// ContentSHA256 is the hex sha256 of the bundle's files (paths, modes as
// WriteZip sets them, and bytes), independent of the archive's dates: two
// uploads of the same folder have the same hash.
func (b *Bundle) ContentSHA256() string {
	h := sha256.New()
	for _, f := range b.Files {
		exec := byte(0)
		if bytes.HasPrefix(f.Data, []byte("#!")) {
			exec = 1
		}
		// Length-prefixed fields: no two file sets encode alike.
		_ = binary.Write(h, binary.BigEndian, uint64(len(f.Path)))
		h.Write([]byte(f.Path))
		h.Write([]byte{exec})
		_ = binary.Write(h, binary.BigEndian, uint64(len(f.Data)))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Putter stores bytes under a key (filestore.Blobs.Put).
type Putter interface {
	Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error)
}

// Put writes the bundle's archive (WriteZip, dated at) to blobs under key
// and returns its size. maxBytes is the limit the bundle's files were read
// with: the archive may exceed it by the zip format's overhead.
func (b *Bundle) Put(ctx context.Context, blobs Putter, key string, at time.Time, maxBytes int64) (int64, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(b.WriteZip(pw, at))
	}()
	// Deflate grows data by a small fraction at worst; the slack covers
	// the zip headers.
	n, err := blobs.Put(ctx, key, pr, 2*maxBytes+int64(len(b.Files)+1)*4096)
	_ = pr.CloseWithError(io.ErrClosedPipe) // ends the writer if Put stopped early
	<-done
	if err != nil {
		return 0, fmt.Errorf("store skill archive: %w", err)
	}
	return n, nil
}
