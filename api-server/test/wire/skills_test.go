package wire

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/tools/agenttoolset"
	"github.com/jackc/pgx/v5"

	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/testserver"
)

const skillMD = `---
name: csv-tools
description: Summarise CSV files. Use when the user gives you a .csv file.
---

# CSV tools

Run scripts/count.sh <file> to count the rows.
`

const countScript = "#!/bin/sh\nwc -l < \"$1\"\n"

// skillFiles returns upload parts: path -> content, in order.
func skillFiles(pairs ...string) []io.Reader {
	var out []io.Reader
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, anthropic.File(strings.NewReader(pairs[i+1]), pairs[i], "text/plain"))
	}
	return out
}

// readZip returns the regular files of a zip archive: name -> content,
// and each file's mode bits.
func readZip(t *testing.T, data []byte) (map[string]string, map[string]os.FileMode) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("content is not a zip archive: %v", err)
	}
	files, modes := map[string]string{}, map[string]os.FileMode{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name], modes[f.Name] = string(b), f.Mode()
	}
	return files, modes
}

// TestSkillsLifecycle drives the Skills API through the SDK, on PostgreSQL
// and on S3: create from a folder upload, get, list, a second version that
// becomes the latest, versions list/get (and "latest"), the content
// archive as the SDK's agenttoolset extracts it, version delete (not of
// the only one), skill delete with its versions, and 404s after.
func TestSkillsLifecycle(t *testing.T) {
	t.Parallel()
	for name, backend := range map[string]fileBackend{"postgres": postgresBackend, "s3": s3Backend} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, blobs := backend(t)
			testSkillsLifecycle(t, srv, blobs)
		})
	}
}

func testSkillsLifecycle(t *testing.T, srv *testserver.Server, blobs filestore.Blobs) {
	ctx := context.Background()
	client := newClient(t, srv)
	sk, err := client.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{
		Files: skillFiles("csv-tools/SKILL.md", skillMD, "csv-tools/scripts/count.sh", countScript)})
	if err != nil {
		t.Fatalf("create skill: %v", err)
	}
	if !strings.HasPrefix(sk.ID, "skill_") || sk.Source.Type != anthropic.BetaSkillSourceTypeCustom ||
		sk.DisplayName != "csv-tools" || sk.LatestVersionID == "" || sk.Type != "skill" {
		t.Fatalf("created skill = %s; want a skill_ id, source custom, display_name csv-tools, a latest_version_id", sk.RawJSON())
	}
	first := sk.LatestVersionID

	got, err := client.Beta.Skills.Get(ctx, sk.ID, anthropic.BetaSkillGetParams{})
	if err != nil || got.ID != sk.ID || got.LatestVersionID != first {
		t.Fatalf("get skill = %v, %v; want %s with latest %s", got, err, sk.ID, first)
	}
	v1, err := client.Beta.Skills.Versions.Get(ctx, first, anthropic.BetaSkillVersionGetParams{SkillID: sk.ID})
	if err != nil {
		t.Fatalf("get version: %v", err)
	}
	if v1.Name != "csv-tools" || !strings.HasPrefix(v1.Description, "Summarise CSV") || v1.SkillID != sk.ID || v1.Type != "skill_version" {
		t.Fatalf("version = %s; want name csv-tools, the SKILL.md description, skill_id %s", v1.RawJSON(), sk.ID)
	}

	// A second version, uploaded flat (paths relative to the folder), with
	// a display name set only at creation of the skill.
	v2, err := client.Beta.Skills.Versions.New(ctx, sk.ID, anthropic.BetaSkillVersionNewParams{
		Files: skillFiles("SKILL.md", strings.Replace(skillMD, "Summarise", "Summarize", 1), "scripts/count.sh", countScript,
			"reference/notes.md", "notes")})
	if err != nil {
		t.Fatalf("create version: %v", err)
	}
	if v2.ID == first || !strings.HasPrefix(v2.Description, "Summarize") {
		t.Fatalf("second version = %s; want a new id and the new description", v2.RawJSON())
	}
	got, err = client.Beta.Skills.Get(ctx, sk.ID, anthropic.BetaSkillGetParams{})
	if err != nil || got.LatestVersionID != v2.ID || got.UpdatedAt.Before(got.CreatedAt) {
		t.Fatalf("after a new version, skill = %v, %v; want latest_version_id %s", got, err, v2.ID)
	}
	latest, err := client.Beta.Skills.Versions.Get(ctx, "latest", anthropic.BetaSkillVersionGetParams{SkillID: sk.ID})
	if err != nil || latest.ID != v2.ID {
		t.Fatalf("get version latest = %v, %v; want %s", latest, err, v2.ID)
	}
	checkSkillVersionList(t, client, sk.ID, []string{v2.ID, first})
	checkSkillDownload(t, client, sk.ID, first, map[string]string{
		"csv-tools/SKILL.md": skillMD, "csv-tools/scripts/count.sh": countScript})
	checkSkillExtract(t, client, sk.ID, v2.ID)

	// Versions are immutable: the first still reads as uploaded.
	v1again, err := client.Beta.Skills.Versions.Get(ctx, first, anthropic.BetaSkillVersionGetParams{SkillID: sk.ID})
	if err != nil || v1again.Description != v1.Description {
		t.Fatalf("first version after a second = %v, %v; want it unchanged", v1again, err)
	}
	stored := skillStorageKeys(t, srv, sk.ID)
	if len(stored) != 2 {
		t.Fatalf("storage keys of the skill's versions = %v; want 2", stored)
	}
	for _, k := range stored {
		if _, err := blobs.Stat(ctx, k); err != nil {
			t.Fatalf("bytes of a version (%s): %v; want them in the file store", k, err)
		}
	}
	checkSkillDeletes(t, client, sk.ID, first, v2.ID)
	for _, k := range stored {
		if _, err := blobs.Stat(ctx, k); !errors.Is(err, filestore.ErrNotFound) {
			t.Errorf("bytes of a deleted version (%s): err = %v; want them gone from the file store", k, err)
		}
	}
}

// skillStorageKeys reads where the api-server keeps the bytes of a
// skill's versions.
func skillStorageKeys(t *testing.T, srv *testserver.Server, skillID string) []string {
	t.Helper()
	_, pool := blobsOf(t, srv)
	rows, err := pool.Query(context.Background(), "SELECT storage_key FROM skill_versions WHERE skill_id = $1", skillID)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func checkSkillVersionList(t *testing.T, client anthropic.Client, skillID string, want []string) {
	t.Helper()
	ctx := context.Background()
	page, err := client.Beta.Skills.Versions.List(ctx, skillID, anthropic.BetaSkillVersionListParams{Limit: anthropic.Int(1)})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != want[0] {
		t.Fatalf("versions page 1 = %v, %v; want [%s]", page, err, want[0])
	}
	var all []string
	for it := client.Beta.Skills.Versions.ListAutoPaging(ctx, skillID, anthropic.BetaSkillVersionListParams{Limit: anthropic.Int(1)}); it.Next(); {
		all = append(all, it.Current().ID)
	}
	if strings.Join(all, ",") != strings.Join(want, ",") {
		t.Fatalf("versions, paged one by one = %v; want %v (newest first)", all, want)
	}
	var skills []string
	for it := client.Beta.Skills.ListAutoPaging(ctx, anthropic.BetaSkillListParams{Limit: anthropic.Int(1)}); it.Next(); {
		skills = append(skills, it.Current().ID)
	}
	if len(skills) != 1 || skills[0] != skillID {
		t.Fatalf("skills listed = %v; want [%s]", skills, skillID)
	}
	anth, err := client.Beta.Skills.List(ctx, anthropic.BetaSkillListParams{Source: anthropic.String("anthropic")})
	if err != nil || len(anth.Data) != 0 {
		t.Fatalf("skills of source anthropic = %v, %v; want none", anth, err)
	}
}

func checkSkillDownload(t *testing.T, client anthropic.Client, skillID, version string, want map[string]string) {
	t.Helper()
	resp, err := client.Beta.Skills.Versions.Download(context.Background(), version, anthropic.BetaSkillVersionDownloadParams{SkillID: skillID})
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/zip" {
		t.Errorf("download Content-Type = %q, want application/zip", ct)
	}
	files, modes := readZip(t, data)
	if len(files) != len(want) {
		t.Errorf("archive holds %v; want exactly %v", keys(files), keys(want))
	}
	for name, content := range want {
		if files[name] != content {
			t.Errorf("archive %s = %q, want %q", name, files[name], content)
		}
	}
	if m := modes["csv-tools/scripts/count.sh"]; m&0o111 == 0 {
		t.Errorf("script mode = %v, want executable (it begins with #!)", m)
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkSkillExtract has the SDK's own skill download (agenttoolset, as its
// self-hosted worker runs it) fetch and extract a version.
func checkSkillExtract(t *testing.T, client anthropic.Client, skillID, version string) {
	t.Helper()
	dir := t.TempDir()
	env := &agenttoolset.AgentToolContext{Workdir: dir}
	session := &anthropic.BetaManagedAgentsSession{ID: "sesn_extract"}
	session.Agent.Skills = []anthropic.BetaManagedAgentsSessionAgentSkillUnion{{SkillID: skillID, Type: "custom", Version: version}}
	if err := env.SetupSkillsFromSession(context.Background(), client, session); err != nil {
		t.Fatalf("SetupSkillsFromSession: %v", err)
	}
	for name, want := range map[string]string{"SKILL.md": strings.Replace(skillMD, "Summarise", "Summarize", 1),
		"scripts/count.sh": countScript, "reference/notes.md": "notes"} {
		b, err := os.ReadFile(filepath.Join(dir, "skills", "csv-tools", name))
		if err != nil || string(b) != want {
			t.Errorf("extracted skills/csv-tools/%s = %q, %v; want %q", name, b, err, want)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "skills", "csv-tools", "scripts", "count.sh"))
	if err != nil || st.Mode()&0o100 == 0 {
		t.Errorf("extracted script = %v, %v; want it executable", st, err)
	}
}

func checkSkillDeletes(t *testing.T, client anthropic.Client, skillID, first, second string) {
	t.Helper()
	ctx := context.Background()
	del, err := client.Beta.Skills.Versions.Delete(ctx, second, anthropic.BetaSkillVersionDeleteParams{SkillID: skillID})
	if err != nil || del.ID != second || del.Type != "skill_version_deleted" {
		t.Fatalf("delete version = %v, %v", del, err)
	}
	got, err := client.Beta.Skills.Get(ctx, skillID, anthropic.BetaSkillGetParams{})
	if err != nil || got.LatestVersionID != first {
		t.Fatalf("after deleting the latest version, skill = %v, %v; want latest_version_id back to %s", got, err, first)
	}
	_, err = client.Beta.Skills.Versions.Get(ctx, second, anthropic.BetaSkillVersionGetParams{SkillID: skillID})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.Versions.Delete(ctx, first, anthropic.BetaSkillVersionDeleteParams{SkillID: skillID})
	if e := apiErrorWithStatus(t, err, 409); !strings.Contains(e.RawJSON(), "only version") {
		t.Errorf("deleting the only version: %s; want it to say it is the only version", e.RawJSON())
	}
	sd, err := client.Beta.Skills.Delete(ctx, skillID, anthropic.BetaSkillDeleteParams{})
	if err != nil || sd.ID != skillID || sd.Type != "skill_deleted" {
		t.Fatalf("delete skill = %v, %v", sd, err)
	}
	_, err = client.Beta.Skills.Get(ctx, skillID, anthropic.BetaSkillGetParams{})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.Versions.Get(ctx, first, anthropic.BetaSkillVersionGetParams{SkillID: skillID})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.Versions.Download(ctx, first, anthropic.BetaSkillVersionDownloadParams{SkillID: skillID})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.Delete(ctx, skillID, anthropic.BetaSkillDeleteParams{})
	wantAPIError(t, err, 404)
}

// TestSkillsBadInput checks that each bad upload answers 400 naming the
// problem, and that unknown ids answer 404.
func TestSkillsBadInput(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SKILLS_MAX_FILES", "3"), testserver.WithEnv("MANGO_SKILLS_MAX_BYTES", "2000"))
	client := newClient(t, srv)
	ctx := context.Background()
	manifest := func(front string) string { return "---\n" + front + "\n---\nbody\n" }
	cases := []struct {
		name  string
		files []io.Reader
		want  string
	}{
		{"no files", nil, "at least one file"},
		{"missing SKILL.md", skillFiles("s/README.md", "x"), "SKILL.md is missing"},
		{"SKILL.md not at the root", skillFiles("s/docs/SKILL.md", skillMD), "SKILL.md is missing"},
		{"no front matter", skillFiles("s/SKILL.md", "# just markdown\n"), "front matter"},
		{"front matter not closed", skillFiles("s/SKILL.md", "---\nname: s\n"), "not closed"},
		{"bad YAML", skillFiles("s/SKILL.md", manifest("name: [unclosed")), "not valid YAML"},
		{"name not kebab-case", skillFiles("s/SKILL.md", manifest("name: My_Skill\ndescription: d")), "kebab-case"},
		{"name too long", skillFiles("s/SKILL.md", manifest("name: "+strings.Repeat("a", 65)+"\ndescription: d")), "at most 64"},
		{"no description", skillFiles("s/SKILL.md", manifest("name: s")), "no description"},
		{"description not a string", skillFiles("s/SKILL.md", manifest("name: s\ndescription: [1, 2]")), "must be a string"},
		{"path traversal", skillFiles("s/SKILL.md", skillMD, "s/../../etc/passwd", "x"), "leaves the skill folder"},
		{"absolute path", skillFiles("/s/SKILL.md", skillMD), "absolute"},
		{"windows absolute path", skillFiles(`C:/s/SKILL.md`, skillMD), "absolute"},
		{"backslash", skillFiles(`s\SKILL.md`, skillMD), "backslash"},
		{"empty segment", skillFiles("s//SKILL.md", skillMD), "not a clean relative path"},
		{"empty path", skillFiles("", skillMD), "has no path"},
		{"duplicate paths", skillFiles("s/SKILL.md", skillMD, "s/SKILL.md", skillMD), "duplicate path"},
		{"two top-level directories", skillFiles("a/SKILL.md", skillMD, "b/x.md", "x"), "one top-level directory"},
		{"too many files", skillFiles("s/SKILL.md", skillMD, "s/1", "1", "s/2", "2", "s/3", "3"), "too many files"},
		{"too large", skillFiles("s/SKILL.md", skillMD, "s/big", strings.Repeat("x", 2000)), "maximum total size of 2000 bytes"},
		{"far too large", skillFiles("s/SKILL.md", skillMD, "s/big", strings.Repeat("x", 8<<20)), "maximum total size of 2000 bytes"},
	}
	for _, tc := range cases {
		_, err := client.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{Files: tc.files})
		if e := apiErrorWithStatus(t, err, 400); !strings.Contains(e.RawJSON(), tc.want) {
			t.Errorf("%s: error %s; want it to say %q", tc.name, e.RawJSON(), tc.want)
		}
	}
	page, err := client.Beta.Skills.List(ctx, anthropic.BetaSkillListParams{})
	if err != nil || len(page.Data) != 0 {
		t.Fatalf("after refused uploads, skills = %v, %v; want none", page, err)
	}
	checkSkillBadVersions(t, client)
}

func checkSkillBadVersions(t *testing.T, client anthropic.Client) {
	t.Helper()
	ctx := context.Background()
	sk, err := client.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{Files: skillFiles("csv-tools/SKILL.md", skillMD),
		DisplayName: anthropic.String("CSV tools")})
	if err != nil || sk.DisplayName != "CSV tools" {
		t.Fatalf("create skill with a display name = %v, %v", sk, err)
	}
	renamed := strings.Replace(skillMD, "name: csv-tools", "name: other-tools", 1)
	_, err = client.Beta.Skills.Versions.New(ctx, sk.ID, anthropic.BetaSkillVersionNewParams{Files: skillFiles("SKILL.md", renamed)})
	if e := apiErrorWithStatus(t, err, 400); !strings.Contains(e.RawJSON(), "differs from the skill's name") {
		t.Errorf("a version with another name: %s; want it refused naming the difference", e.RawJSON())
	}
	_, err = client.Beta.Skills.Versions.New(ctx, sk.ID, anthropic.BetaSkillVersionNewParams{Files: skillFiles("x/SKILL.md", "no front matter")})
	wantAPIError(t, err, 400)
	_, err = client.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{Files: skillFiles("csv-tools/SKILL.md", skillMD),
		DisplayName: anthropic.String(strings.Repeat("d", 256))})
	wantAPIError(t, err, 400)

	missing := "skill_" + strings.Repeat("0", 24)
	_, err = client.Beta.Skills.Get(ctx, missing, anthropic.BetaSkillGetParams{})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.Get(ctx, "not-an-id", anthropic.BetaSkillGetParams{})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.Versions.New(ctx, missing, anthropic.BetaSkillVersionNewParams{Files: skillFiles("SKILL.md", skillMD)})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.Versions.List(ctx, missing, anthropic.BetaSkillVersionListParams{})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.Versions.Get(ctx, "skillver_"+strings.Repeat("0", 24), anthropic.BetaSkillVersionGetParams{SkillID: sk.ID})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.Versions.Get(ctx, sk.LatestVersionID, anthropic.BetaSkillVersionGetParams{SkillID: missing})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.Versions.Delete(ctx, "latest", anthropic.BetaSkillVersionDeleteParams{SkillID: sk.ID})
	wantAPIError(t, err, 404)
	_, err = client.Beta.Skills.List(ctx, anthropic.BetaSkillListParams{Source: anthropic.String("plugin")})
	wantAPIError(t, err, 400)
	_, err = client.Beta.Skills.List(ctx, anthropic.BetaSkillListParams{Page: anthropic.String("garbage!")})
	wantAPIError(t, err, 400)
}
