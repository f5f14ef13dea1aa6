package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/skillbundle"
	"github.com/mangohq/mango/db"
)

// The Skills API. A skill version is uploaded as multipart files[] parts
// whose filenames are paths in the skill folder; the upload is read into
// memory up to SkillsMaxBytes and SkillsMaxFiles (never further: the body
// is not read past the limit), validated (package skillbundle), then
// stored as one zip archive in the file store under a filestore.NewKey
// key. The version's row is written only once its bytes are stored; the
// content endpoint streams that archive as stored.

// Defaults of Deps.SkillsMaxBytes and Deps.SkillsMaxFiles.
const (
	DefaultSkillsMaxBytes = 30 << 20
	DefaultSkillsMaxFiles = 500
)

// maxDisplayName bounds a skill's display_name, in characters.
const maxDisplayName = 255

// skillResponse is the wire form of a Skill (BetaSkill).
type skillResponse struct {
	Type            string      `json:"type"`
	ID              string      `json:"id"`
	DisplayName     string      `json:"display_name"`
	LatestVersionID string      `json:"latest_version_id"`
	Source          skillSource `json:"source"`
	CreatedAt       time.Time   `json:"created_at"`
	UpdatedAt       time.Time   `json:"updated_at"`
}

// skillSource is where a skill comes from (BetaSkillSource).
type skillSource struct {
	Type string `json:"type"`
}

// skillVersionResponse is the wire form of a Skill Version
// (BetaSkillVersion).
type skillVersionResponse struct {
	Type        string    `json:"type"`
	ID          string    `json:"id"`
	SkillID     string    `json:"skill_id"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
}

func toSkillResponse(s *db.Skill) *skillResponse {
	return &skillResponse{Type: "skill", ID: s.ID, DisplayName: s.DisplayName, LatestVersionID: s.LatestVersionID,
		Source: skillSource{Type: s.Source}, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

func toSkillVersionResponse(v *db.SkillVersion) *skillVersionResponse {
	return &skillVersionResponse{Type: "skill_version", ID: v.ID, SkillID: v.SkillID, Name: v.Name,
		Description: v.Description, CreatedAt: v.CreatedAt}
}

func skillNotFound(id string) error { return apierror.NotFoundf("skill %q not found", id) }

func skillVersionNotFound(skillID, version string) error {
	return apierror.NotFoundf("version %q of skill %q not found", version, skillID)
}

// skillID is the skill id of the path: an uploaded skill's (skill_...)
// or an Anthropic catalog skill's (its kebab-case name).
func skillID(c echo.Context) (string, error) {
	id := c.Param("id")
	if !ids.Valid(ids.Skill, id) && skillbundle.CheckName(id) != nil {
		return "", skillNotFound(id)
	}
	return id, nil
}

// skillReadOnly answers a change to an Anthropic skill.
func skillReadOnly(id string) error {
	return apierror.Forbidden("skill %q comes from the Anthropic skills catalog (MANGO_SKILLS_CATALOG) and is read-only; "+
		"change the catalog and restart the api-server instead", id)
}

// skillInUse answers the deletion of a skill or version agents use.
func skillInUse(err error) error {
	var inUse *db.SkillInUseError
	if !errors.As(err, &inUse) {
		return err
	}
	what := fmt.Sprintf("skill %q", inUse.SkillID)
	if inUse.VersionID != "" {
		what = fmt.Sprintf("version %q of skill %q", inUse.VersionID, inUse.SkillID)
	}
	return apierror.Conflictf("%s is used by the current version of agents %s; update or archive them first",
		what, strings.Join(inUse.Agents, ", "))
}

// loadCustomSkill returns a skill the API may change: ErrNotFound as a
// 404, an Anthropic skill as a 403.
func (a *API) loadCustomSkill(ctx context.Context, id string) (*db.Skill, error) {
	sk, err := a.deps.Store.SkillGet(ctx, id)
	if err != nil {
		return nil, notFoundAs(err, skillNotFound(id))
	}
	if sk.Source != db.SkillCustom {
		return nil, skillReadOnly(id)
	}
	return sk, nil
}

// skillUpload is a parsed upload: the files and, for a new skill, its
// display_name.
type skillUpload struct {
	files       []skillbundle.File
	displayName string
}

func (a *API) skillLimits() (int64, int) {
	maxBytes, maxFiles := a.deps.SkillsMaxBytes, a.deps.SkillsMaxFiles
	if maxBytes <= 0 {
		maxBytes = DefaultSkillsMaxBytes
	}
	if maxFiles <= 0 {
		maxFiles = DefaultSkillsMaxFiles
	}
	return maxBytes, maxFiles
}

// readSkillUpload reads the multipart body of a skill or version create.
// withDisplayName accepts the display_name field (skill create only). A
// refused upload's body is drained (up to a bound) so that the client
// reads the answer rather than a reset.
func (a *API) readSkillUpload(c echo.Context, withDisplayName bool) (*skillUpload, error) {
	r := c.Request()
	maxBytes, maxFiles := a.skillLimits()
	// Each part carries headers (a path of up to skillbundle.MaxPathLen
	// bytes) besides its bytes.
	if r.ContentLength > maxBytes+int64(maxFiles+1)*2*skillbundle.MaxPathLen+multipartSlack {
		drain(r.Body)
		return nil, skillTooLarge(maxBytes)
	}
	up, err := readSkillParts(r, maxBytes, maxFiles, withDisplayName)
	if err != nil {
		drain(r.Body)
		return nil, err
	}
	return up, nil
}

// readSkillParts reads the parts of an upload, within the limits.
func readSkillParts(r *http.Request, maxBytes int64, maxFiles int, withDisplayName bool) (*skillUpload, error) {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, apierror.Invalid("Content-Type must be multipart/form-data with a boundary, got %q", ct)
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	up := &skillUpload{}
	left := maxBytes
	expected := "files[] parts"
	if withDisplayName {
		expected += " and display_name"
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, apierror.Invalid("malformed multipart/form-data body: %v", err)
		}
		switch name := part.FormName(); {
		case name == "files[]" || name == "files":
			if len(up.files) == maxFiles {
				return nil, apierror.Invalid("files: too many files; a skill version holds at most %d", maxFiles)
			}
			f, err := readSkillFile(part, left, maxBytes)
			if err != nil {
				return nil, err
			}
			left -= int64(len(f.Data))
			up.files = append(up.files, f)
		case name == "display_name" && withDisplayName:
			if up.displayName, err = readDisplayName(part); err != nil {
				return nil, err
			}
		default:
			return nil, apierror.Invalid("unknown form field %q; expected %s", name, expected)
		}
	}
	return up, nil
}

// readSkillFile reads one files[] part, failing once the upload's bytes
// pass left.
func readSkillFile(part *multipart.Part, left, maxBytes int64) (skillbundle.File, error) {
	// part.FileName() keeps only the last path element; the path is
	// validated as sent.
	_, disp, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return skillbundle.File{}, apierror.Invalid("files: malformed Content-Disposition header of a part")
	}
	data, err := io.ReadAll(filestore.LimitReader(part, left))
	switch {
	case errors.Is(err, filestore.ErrTooLarge):
		return skillbundle.File{}, skillTooLarge(maxBytes)
	case err != nil:
		return skillbundle.File{}, apierror.Invalid("could not read the uploaded files: the request body ended early or is malformed")
	}
	return skillbundle.File{Path: disp["filename"], Data: data}, nil
}

func readDisplayName(part *multipart.Part) (string, error) {
	b, err := io.ReadAll(io.LimitReader(part, 4*maxDisplayName+1))
	if err != nil {
		return "", apierror.Invalid("display_name: could not read the field")
	}
	s := strings.TrimSpace(string(b))
	switch {
	case !utf8.ValidString(s) || utf8.RuneCountInString(s) > maxDisplayName:
		return "", apierror.Invalid("display_name: must be valid UTF-8 of at most %d characters", maxDisplayName)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return "", apierror.Invalid("display_name: must be a single line without control characters")
	}
	return s, nil
}

func skillTooLarge(limit int64) error {
	return apierror.Invalid("files: the skill's files exceed the maximum total size of %d bytes", limit)
}

// parseSkill validates an upload as a skill folder.
func parseSkill(files []skillbundle.File) (*skillbundle.Bundle, error) {
	b, err := skillbundle.Parse(files)
	if err != nil {
		return nil, apierror.Invalid("%v", err)
	}
	return b, nil
}

// storeSkillVersion stores a skill folder's archive and returns its
// version (not yet inserted). On error nothing is stored.
func (a *API) storeSkillVersion(ctx context.Context, b *skillbundle.Bundle) (*db.SkillVersion, error) {
	v := &db.SkillVersion{ID: ids.New(ids.SkillVersion), Name: b.Name, Description: b.Description,
		StorageKey: filestore.NewKey(), FileCount: len(b.Files), ContentSHA256: b.ContentSHA256(), CreatedAt: a.now()}
	maxBytes, _ := a.skillLimits()
	n, err := b.Put(ctx, a.deps.Files, v.StorageKey, v.CreatedAt, maxBytes)
	if err != nil {
		return nil, err
	}
	v.SizeBytes = n
	return v, nil
}

func (a *API) skillCreate(c echo.Context) error {
	ctx := c.Request().Context()
	up, err := a.readSkillUpload(c, true)
	if err != nil {
		return err
	}
	b, err := parseSkill(up.files)
	if err != nil {
		return err
	}
	v, err := a.storeSkillVersion(ctx, b)
	if err != nil {
		return err
	}
	sk := &db.Skill{ID: ids.New(ids.Skill), Name: b.Name, DisplayName: up.displayName, CreatedAt: v.CreatedAt}
	if sk.DisplayName == "" {
		sk.DisplayName = b.Name
	}
	if err := a.deps.Store.SkillCreate(ctx, sk, v); err != nil {
		a.deleteBlob(ctx, v.StorageKey)
		return err
	}
	return c.JSON(http.StatusOK, toSkillResponse(sk))
}

func (a *API) skillGet(c echo.Context) error {
	id, err := skillID(c)
	if err != nil {
		return err
	}
	sk, err := a.deps.Store.SkillGet(c.Request().Context(), id)
	if err != nil {
		return notFoundAs(err, skillNotFound(id))
	}
	return c.JSON(http.StatusOK, toSkillResponse(sk))
}

func (a *API) skillList(c echo.Context) error {
	page, err := parsePage(c, maxFilePageLimit)
	if err != nil {
		return err
	}
	src := c.QueryParam("source")
	if src != "" && src != db.SkillCustom && src != db.SkillAnthropic {
		return apierror.Invalid("source: must be custom or anthropic, got %q", src)
	}
	after, err := pageAfter(page.cursor)
	if err != nil {
		return err
	}
	skills, more, err := a.deps.Store.SkillList(c.Request().Context(), src, after, page.limit)
	if err != nil {
		return err
	}
	return writeList(c, skills, more, func(s db.Skill) *skillResponse { return toSkillResponse(&s) },
		func(s db.Skill) string { return timeCursor(s.CreatedAt, s.ID) })
}

func (a *API) skillDelete(c echo.Context) error {
	id, err := skillID(c)
	if err != nil {
		return err
	}
	if _, err := a.loadCustomSkill(c.Request().Context(), id); err != nil {
		return err
	}
	keys, err := a.deps.Store.SkillDelete(c.Request().Context(), id)
	if err != nil {
		return notFoundAs(skillInUse(err), skillNotFound(id))
	}
	for _, k := range keys {
		a.deleteBlob(c.Request().Context(), k)
	}
	return c.JSON(http.StatusOK, map[string]string{"id": id, "type": "skill_deleted"})
}

func (a *API) skillVersionCreate(c echo.Context) error {
	ctx := c.Request().Context()
	id, err := skillID(c)
	if err != nil {
		return err
	}
	sk, err := a.loadCustomSkill(ctx, id)
	if err != nil {
		drain(c.Request().Body)
		return err
	}
	up, err := a.readSkillUpload(c, false)
	if err != nil {
		return err
	}
	b, err := parseSkill(up.files)
	if err != nil {
		return err
	}
	if b.Name != sk.Name {
		return apierror.Invalid("%s: name %q differs from the skill's name %q; every version of a skill has the same name",
			skillbundle.Manifest, b.Name, sk.Name)
	}
	v, err := a.storeSkillVersion(ctx, b)
	if err != nil {
		return err
	}
	v.SkillID = id
	if err := a.deps.Store.SkillVersionCreate(ctx, v); err != nil {
		a.deleteBlob(ctx, v.StorageKey)
		return notFoundAs(err, skillNotFound(id))
	}
	return c.JSON(http.StatusOK, toSkillVersionResponse(v))
}

func (a *API) skillVersionList(c echo.Context) error {
	ctx := c.Request().Context()
	id, err := skillID(c)
	if err != nil {
		return err
	}
	page, after, err := parseKeysetPage(c, maxFilePageLimit)
	if err != nil {
		return err
	}
	if _, err := a.deps.Store.SkillGet(ctx, id); err != nil {
		return notFoundAs(err, skillNotFound(id))
	}
	versions, more, err := a.deps.Store.SkillVersionList(ctx, id, after, page.limit)
	if err != nil {
		return err
	}
	return writeList(c, versions, more, func(v db.SkillVersion) *skillVersionResponse { return toSkillVersionResponse(&v) },
		func(v db.SkillVersion) string { return timeCursor(v.CreatedAt, v.ID) })
}

// skillVersionLoad returns the version the path names; "latest" is the
// skill's newest when allowLatest.
func (a *API) skillVersionLoad(c echo.Context, allowLatest bool) (*db.SkillVersion, error) {
	id, err := skillID(c)
	if err != nil {
		return nil, err
	}
	version := c.Param("version")
	if !ids.Valid(ids.SkillVersion, version) && (!allowLatest || version != "latest") {
		return nil, skillVersionNotFound(id, version)
	}
	v, err := a.deps.Store.SkillVersionGet(c.Request().Context(), id, version)
	if err != nil {
		return nil, notFoundAs(err, skillVersionNotFound(id, version))
	}
	return v, nil
}

func (a *API) skillVersionGet(c echo.Context) error {
	v, err := a.skillVersionLoad(c, true)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toSkillVersionResponse(v))
}

func (a *API) skillVersionDelete(c echo.Context) error {
	id, err := skillID(c)
	if err != nil {
		return err
	}
	version := c.Param("version")
	if !ids.Valid(ids.SkillVersion, version) {
		return skillVersionNotFound(id, version)
	}
	if _, err := a.loadCustomSkill(c.Request().Context(), id); err != nil {
		return err
	}
	key, err := a.deps.Store.SkillVersionDelete(c.Request().Context(), id, version, a.now())
	switch {
	case errors.Is(err, db.ErrLastSkillVersion):
		return apierror.Conflictf("version %q is the only version of skill %q; a skill always has one: delete the skill instead", version, id)
	case err != nil:
		return notFoundAs(skillInUse(err), skillVersionNotFound(id, version))
	}
	a.deleteBlob(c.Request().Context(), key)
	return c.JSON(http.StatusOK, map[string]string{"id": version, "type": "skill_version_deleted"})
}

func (a *API) skillVersionContent(c echo.Context) error {
	v, err := a.skillVersionLoad(c, true)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	rc, err := a.deps.Files.Open(ctx, v.StorageKey, 0)
	if err != nil {
		return fmt.Errorf("open archive of skill version %s: %w", v.ID, err)
	}
	defer func() { _ = rc.Close() }()
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/zip")
	h.Set(echo.HeaderContentLength, strconv.FormatInt(v.SizeBytes, 10))
	h.Set(echo.HeaderContentDisposition, contentDisposition(v.Name+".zip"))
	h.Set("X-Content-Type-Options", "nosniff")
	c.Response().WriteHeader(http.StatusOK)
	n, err := io.Copy(c.Response(), io.LimitReader(rc, v.SizeBytes))
	if err != nil || n != v.SizeBytes {
		a.deps.Logger.WarnContext(ctx, "skill download cut short", "skill_version_id", v.ID, "sent", n, "size", v.SizeBytes, "err", err,
			"request_id", requestIDOf(c))
	}
	return nil
}
