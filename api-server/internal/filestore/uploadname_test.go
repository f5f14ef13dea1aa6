package filestore_test

import (
	"testing"

	"github.com/mangohq/mango/api-server/internal/filestore"
)

func TestUploadName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ sent, mediaType, want string }{
		{"report.csv", "text/csv", "report.csv"},
		{"a/b/report.csv", "text/csv", "report.csv"},
		{`C:\Users\me\report.csv`, "text/csv", "report.csv"},
		{"", "text/csv", "unnamed.csv"},
		{"", "image/jpeg", "unnamed.jpg"},
		{"dir/", "application/pdf", "unnamed.pdf"},
		{"..", "application/x-unknown-thing", "unnamed"},
	} {
		if got := filestore.UploadName(tc.sent, tc.mediaType); got != tc.want {
			t.Errorf("UploadName(%q, %q) = %q, want %q", tc.sent, tc.mediaType, got, tc.want)
		}
	}
}

// TestIsKey: a key NewKey makes is one; keys of other forms, which a
// shared bucket may hold, are not.
func TestIsKey(t *testing.T) {
	for range 100 {
		if k := filestore.NewKey(); !filestore.IsKey(k) {
			t.Fatalf("IsKey(%q) = false for a key of NewKey", k)
		}
	}
	for _, k := range []string{"", "files/", "files/0123456789abcdef0123456789abcdef0", "files/0123456789abcdef0123456789abcde",
		"files/0123456789ABCDEF0123456789ABCDEF", "files/0123456789abcdef0123456789abcdeg", "other/0123456789abcdef0123456789abcdef",
		"files/0123456789abcdef/123456789abcdef"} {
		if filestore.IsKey(k) {
			t.Errorf("IsKey(%q) = true, want false", k)
		}
	}
}
