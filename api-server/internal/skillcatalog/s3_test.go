package skillcatalog_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/mangohq/mango/api-server/internal/filestore/filestores3"
	"github.com/mangohq/mango/api-server/internal/skillcatalog"
	"github.com/mangohq/mango/db"
)

// TestImportFromS3: a catalog under an S3 prefix, read with the file
// store's S3 settings (endpoint, credentials) and the catalog's own bucket
// and prefix.
func TestImportFromS3(t *testing.T) {
	t.Parallel()
	backend := s3mem.New()
	for _, b := range []string{"files", "catalog"} {
		if err := backend.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	for key, content := range map[string]string{
		"skills/pdf/SKILL.md":      skillMD("pdf", "Read PDF files."),
		"skills/pdf/scripts/a.sh":  "#!/bin/sh\n",
		"skills/README.md":         "beside the skills",
		"elsewhere/xlsx/SKILL.md":  skillMD("xlsx", "not under the prefix"),
		"skills-old/docx/SKILL.md": skillMD("docx", "a sibling prefix"),
	} {
		// The HTTP front sets Last-Modified on a PUT; a direct put must.
		meta := map[string]string{"Last-Modified": time.Now().UTC().Format(http.TimeFormat)}
		if _, err := backend.PutObject("catalog", key, meta, strings.NewReader(content), int64(len(content)), nil); err != nil {
			t.Fatal(err)
		}
	}
	fake := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(fake.Close)
	files := &filestores3.Config{Endpoint: fake.URL, Bucket: "files", Region: "us-east-1", AccessKeyID: "k", SecretAccessKey: "s", PathStyle: true}
	src, err := skillcatalog.Open("s3://catalog/skills", files)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	res, err := f.im.Import(context.Background(), src)
	if err != nil || strings.Join(res.Added, ",") != "pdf" {
		t.Fatalf("import from %s = %+v, %v; want pdf alone", src, res, err)
	}
	v, err := f.store.SkillVersionGet(context.Background(), "pdf", "latest")
	if err != nil || v.FileCount != 2 || f.skill(t, "pdf").Source != db.SkillAnthropic {
		t.Fatalf("pdf's version = %+v, %v; want 2 files", v, err)
	}
}
