package filestore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"
)

// KeyPrefix begins every key NewKey makes.
const KeyPrefix = "files/"

// NewKey returns a fresh opaque key for a blob of a File.
func NewKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return KeyPrefix + hex.EncodeToString(b)
}

// IsKey reports whether key has the form NewKey gives: a blob of
// Mango's, not something else kept in the same bucket.
func IsKey(key string) bool {
	hexPart, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok || len(hexPart) != 32 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil && strings.ToLower(hexPart) == hexPart
}

// MaxFilenameBytes bounds the name of a File.
const MaxFilenameBytes = 255

// CheckFilename returns an error, whose message may be shown to a client,
// unless name is a valid File name: 1 to MaxFilenameBytes bytes of UTF-8
// without path separators ('/', '\\'), NUL or other control characters,
// and neither "." nor "..".
func CheckFilename(name string) error {
	switch {
	case name == "":
		return errors.New("filename is empty")
	case len(name) > MaxFilenameBytes:
		return fmt.Errorf("filename is %d bytes long; at most %d are allowed", len(name), MaxFilenameBytes)
	case !utf8.ValidString(name):
		return errors.New("filename is not valid UTF-8")
	case strings.ContainsAny(name, `/\`):
		return fmt.Errorf("filename %q must not contain a path separator ('/' or '\\')", name)
	case name == "." || name == "..":
		return fmt.Errorf("filename %q is not a file name", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("filename %q must not contain control characters", name)
		}
	}
	return nil
}

// UploadName is the name a client upload is stored under, as the hosted
// API does it: only the final path component of the name sent is kept
// ('/' and '\\' both separate), and an absent or empty name becomes
// "unnamed" plus the extension of the file's media type, when known.
func UploadName(sent, mediaType string) string {
	name := sent
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	if name != "" && name != "." && name != ".." {
		return name
	}
	for ext, t := range extensionTypes {
		if t == mediaType && preferredExtension(ext, t) {
			return "unnamed" + ext
		}
	}
	if exts, _ := mime.ExtensionsByType(mediaType); len(exts) > 0 {
		return "unnamed" + exts[0]
	}
	return "unnamed"
}

// preferredExtension picks one extension for media types several map to.
func preferredExtension(ext, mediaType string) bool {
	switch mediaType {
	case "text/html":
		return ext == ".html"
	case "image/jpeg":
		return ext == ".jpg"
	case "application/yaml":
		return ext == ".yaml"
	}
	return true
}

// extensionTypes are the media types of common extensions, consulted
// before the platform's table so the result does not depend on the host's
// mime.types.
var extensionTypes = map[string]string{
	".csv": "text/csv", ".tsv": "text/tab-separated-values", ".txt": "text/plain", ".md": "text/markdown",
	".json": "application/json", ".jsonl": "application/jsonl", ".xml": "application/xml", ".yaml": "application/yaml",
	".yml": "application/yaml", ".html": "text/html", ".htm": "text/html", ".css": "text/css", ".js": "text/javascript",
	".py": "text/x-python", ".go": "text/x-go", ".sh": "application/x-sh", ".pdf": "application/pdf",
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
	".svg": "image/svg+xml", ".zip": "application/zip", ".gz": "application/gzip", ".tar": "application/x-tar",
	".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
	".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
	".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}

// MediaType returns the media type a File is stored with: declared when it
// is a valid media type other than application/octet-stream, else the one
// of the name's extension, else application/octet-stream. Parameters (such
// as charset) are dropped.
func MediaType(declared, name string) string {
	if declared != "" {
		if mt, _, err := mime.ParseMediaType(declared); err == nil && mt != "application/octet-stream" && strings.Contains(mt, "/") {
			return mt
		}
	}
	ext := strings.ToLower(filepath.Ext(name))
	if t, ok := extensionTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		if mt, _, err := mime.ParseMediaType(t); err == nil {
			return mt
		}
	}
	return "application/octet-stream"
}
