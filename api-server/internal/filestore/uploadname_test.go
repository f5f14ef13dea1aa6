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
