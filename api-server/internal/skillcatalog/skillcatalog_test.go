package skillcatalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/skillcatalog"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

func skillMD(name, desc string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n---\n\n# " + name + "\n"
}

// write writes files (path -> content) under dir.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type fixture struct {
	store *db.Store
	blobs filestore.Blobs
	im    *skillcatalog.Importer
	dir   string
}

func newFixture(t *testing.T) *fixture {
	store := dbtest.Store(t)
	blobs := filestore.Postgres(store)
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	im := &skillcatalog.Importer{Store: store, Files: blobs, MaxBytes: 1 << 20, MaxFiles: 10,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { now = now.Add(time.Second); return now }}
	return &fixture{store: store, blobs: blobs, im: im, dir: t.TempDir()}
}

func (f *fixture) skill(t *testing.T, id string) *db.Skill {
	t.Helper()
	sk, err := f.store.SkillGet(context.Background(), id)
	if err != nil {
		t.Fatalf("skill %s: %v", id, err)
	}
	return sk
}

// TestImport: the catalog's skill folders become anthropic skills; an
// unchanged folder gets no new version, a changed one does; a skill gone
// from the catalog is deleted (with its archives) unless an agent uses it.
func TestImport(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	write(t, f.dir, map[string]string{
		"README.md":           "not a skill",
		"notes/todo.txt":      "a folder without SKILL.md",
		"pdf/SKILL.md":        skillMD("pdf", "Read PDF files."),
		"pdf/scripts/run.sh":  "#!/bin/sh\necho pdf\n",
		"xlsx/SKILL.md":       skillMD("xlsx", "Edit spreadsheets."),
		"xlsx/reference.md":   "cells",
		"xlsx/more/deep.json": "{}",
	})
	res, err := f.im.Import(ctx, skillcatalog.Dir(f.dir))
	if err != nil || strings.Join(res.Added, ",") != "pdf,xlsx" {
		t.Fatalf("first import = %+v, %v; want pdf and xlsx added", res, err)
	}
	pdf := f.skill(t, "pdf")
	if pdf.Source != db.SkillAnthropic || pdf.Name != "pdf" {
		t.Fatalf("pdf = %+v; want an anthropic skill named pdf", pdf)
	}
	v1, err := f.store.SkillVersionGet(ctx, "pdf", "latest")
	if err != nil || v1.FileCount != 2 || v1.Description != "Read PDF files." || v1.ContentSHA256 == "" {
		t.Fatalf("pdf's version = %+v, %v; want 2 files with the SKILL.md description and a content hash", v1, err)
	}
	if n, err := f.blobs.Stat(ctx, v1.StorageKey); err != nil || n != v1.SizeBytes {
		t.Fatalf("pdf's archive: %d bytes, %v; want %d", n, err, v1.SizeBytes)
	}

	res, err = f.im.Import(ctx, skillcatalog.Dir(f.dir))
	if err != nil || len(res.Added)+len(res.Removed)+len(res.UnusedKeys) != 0 || f.skill(t, "pdf").LatestVersionID != v1.ID {
		t.Fatalf("unchanged import = %+v, %v; want nothing done", res, err)
	}

	write(t, f.dir, map[string]string{"pdf/scripts/run.sh": "#!/bin/sh\necho pdf v2\n"})
	res, err = f.im.Import(ctx, skillcatalog.Dir(f.dir))
	if err != nil || strings.Join(res.Added, ",") != "pdf" || f.skill(t, "pdf").LatestVersionID == v1.ID {
		t.Fatalf("import of a changed pdf = %+v, %v; want a new pdf version", res, err)
	}

	xlsx, _ := f.store.SkillVersionGet(ctx, "xlsx", "latest")
	if _, err := f.store.AgentCreate(ctx, "agent_1", json.RawMessage(`{}`), []db.SkillRef{{SkillID: "xlsx", VersionID: xlsx.ID}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"pdf", "xlsx"} {
		if err := os.RemoveAll(filepath.Join(f.dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	res, err = f.im.Import(ctx, skillcatalog.Dir(f.dir))
	if err != nil || strings.Join(res.Removed, ",") != "pdf" || len(res.Kept) != 1 || res.Kept[0].SkillID != "xlsx" ||
		!slices.Equal(res.Kept[0].Agents, []string{"agent_1"}) {
		t.Fatalf("import without pdf and xlsx = %+v, %v; want pdf removed, xlsx kept for agent_1", res, err)
	}
	if _, err := f.store.SkillGet(ctx, "pdf"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("removed pdf: err = %v; want ErrNotFound", err)
	}
	if _, err := f.blobs.Stat(ctx, v1.StorageKey); !errors.Is(err, filestore.ErrNotFound) {
		t.Fatalf("removed pdf's archive: err = %v; want it deleted", err)
	}
	if _, err := f.store.AgentArchive(ctx, "agent_1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if res, err = f.im.Import(ctx, skillcatalog.Dir(f.dir)); err != nil || strings.Join(res.Removed, ",") != "xlsx" {
		t.Fatalf("import once the agent is archived = %+v, %v; want xlsx removed", res, err)
	}
}

// TestImportRefusesInvalidFolders: a folder that is not a valid skill
// fails the import, naming it, and changes nothing.
func TestImportRefusesInvalidFolders(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		files map[string]string
		want  string
	}{
		"name differs":   {map[string]string{"pdf/SKILL.md": skillMD("pdf-tools", "d")}, "folder pdf"},
		"not kebab-case": {map[string]string{"My_Skill/SKILL.md": skillMD("my-skill", "d")}, "folder My_Skill"},
		"no description": {map[string]string{"pdf/SKILL.md": "---\nname: pdf\n---\n"}, "folder pdf"},
		"too many files": {map[string]string{"pdf/SKILL.md": skillMD("pdf", "d"), "pdf/1": "", "pdf/2": "", "pdf/3": ""}, "more than 3 files"},
		"too many bytes": {map[string]string{"pdf/SKILL.md": skillMD("pdf", "d"), "pdf/big": strings.Repeat("x", 200)}, "exceed 100 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.im.MaxFiles, f.im.MaxBytes = 3, 100
			write(t, f.dir, tc.files)
			_, err := f.im.Import(context.Background(), skillcatalog.Dir(f.dir))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("import: err = %v; want an error containing %q", err, tc.want)
			}
			if got, _, _ := f.store.SkillList(context.Background(), "", nil, 10); len(got) != 0 {
				t.Fatalf("a refused import stored skills: %+v", got)
			}
		})
	}
}

// TestOpen: the catalog values Open accepts and refuses.
func TestOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if src, err := skillcatalog.Open(dir, nil); err != nil || src.String() != dir {
		t.Fatalf("Open(dir) = %v, %v", src, err)
	}
	file := filepath.Join(dir, "f")
	write(t, dir, map[string]string{"f": ""})
	for value, want := range map[string]string{
		file:                          "not a directory",
		filepath.Join(dir, "missing"): "no such file",
		"s3://":                       "want s3://bucket/prefix",
		"s3://bucket/skills":          "MANGO_FILES_S3_ENDPOINT is not set",
	} {
		if _, err := skillcatalog.Open(value, nil); err == nil || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), skillcatalog.EnvCatalog) {
			t.Errorf("Open(%q): err = %v; want one naming %s and containing %q", value, err, skillcatalog.EnvCatalog, want)
		}
	}
}
