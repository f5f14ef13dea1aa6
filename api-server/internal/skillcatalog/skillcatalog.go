// Package skillcatalog imports the Anthropic skills catalog
// (MANGO_SKILLS_CATALOG) into the skills table, with source "anthropic".
//
// A catalog is a directory, or an S3 prefix, whose immediate subfolders
// holding a SKILL.md are one skill each: the folder's name is the skill's
// id and must be kebab-case and equal the front matter's name. Folders are
// validated like uploads (package skillbundle, the same limits). Import
// runs at api-server start: a skill whose content (its files' sha256,
// skillbundle.Bundle.ContentSHA256) differs from its latest version gets
// a new version, a new skill is created, and an imported skill the
// catalog no longer holds is deleted unless an agent uses it (then kept
// and logged). Replicas starting together serialize on the database
// (db.Store.SkillCatalogApply).
package skillcatalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/skillbundle"
	"github.com/mangohq/mango/db"
)

// EnvCatalog is the variable naming the catalog.
const EnvCatalog = "MANGO_SKILLS_CATALOG"

// Importer imports a catalog.
type Importer struct {
	Store *db.Store
	// Files holds the versions' archives (the api-server's file store).
	Files filestore.Blobs
	// MaxBytes and MaxFiles bound one skill folder, as uploads are
	// (MANGO_SKILLS_MAX_BYTES, MANGO_SKILLS_MAX_FILES).
	MaxBytes int64
	MaxFiles int
	Log      *slog.Logger
	Now      func() time.Time
}

// Import reads the catalog and applies it. A folder that is not a valid
// skill fails the import, naming it; nothing is changed then.
func (im *Importer) Import(ctx context.Context, src Source) (*db.CatalogResult, error) {
	bundles, err := im.read(ctx, src)
	if err != nil {
		return nil, err
	}
	state, err := im.Store.SkillCatalog(ctx)
	if err != nil {
		return nil, err
	}
	now := im.Now().UTC().Truncate(time.Microsecond)
	skills := make([]db.CatalogSkill, 0, len(bundles))
	var stored []string
	cleanup := func(keys []string) {
		for _, k := range keys {
			if err := im.Files.Delete(context.WithoutCancel(ctx), k); err != nil {
				im.Log.ErrorContext(ctx, "skills catalog: archive left in the file store", "storage_key", k, "err", err)
			}
		}
	}
	for _, b := range bundles {
		c := db.CatalogSkill{ID: b.Name, Name: b.Name, DisplayName: b.Name}
		if sha := b.ContentSHA256(); state[b.Name] != sha {
			v := &db.SkillVersion{ID: ids.New(ids.SkillVersion), Name: b.Name, Description: b.Description,
				StorageKey: filestore.NewKey(), FileCount: len(b.Files), ContentSHA256: sha, CreatedAt: now}
			if v.SizeBytes, err = b.Put(ctx, im.Files, v.StorageKey, now, im.MaxBytes); err != nil {
				cleanup(stored)
				return nil, fmt.Errorf("skills catalog %s: skill %s: %w", src, b.Name, err)
			}
			stored = append(stored, v.StorageKey)
			c.Version = v
		}
		skills = append(skills, c)
	}
	res, err := im.Store.SkillCatalogApply(ctx, skills, now)
	if err != nil {
		cleanup(stored)
		return nil, fmt.Errorf("skills catalog %s: %w", src, err)
	}
	cleanup(res.UnusedKeys)
	im.report(src, len(bundles), res)
	return res, nil
}

func (im *Importer) report(src Source, n int, res *db.CatalogResult) {
	for _, k := range res.Kept {
		im.Log.Warn("skills catalog: a skill gone from the catalog is kept: agents use it", "catalog", src.String(),
			"skill_id", k.SkillID, "agents", k.Agents)
	}
	im.Log.Info("skills catalog imported", "catalog", src.String(), "skills", n, "updated", res.Added, "removed", res.Removed)
}

// folder is one catalog folder being read.
type folder struct {
	files []skillbundle.File
	bytes int64
}

// read returns the catalog's skills, sorted by name.
func (im *Importer) read(ctx context.Context, src Source) ([]*skillbundle.Bundle, error) {
	folders := map[string]*folder{}
	err := src.Walk(ctx, func(p string, size int64, open func() (io.ReadCloser, error)) error {
		dir, _, nested := strings.Cut(p, "/")
		if !nested {
			return nil // a file beside the skill folders
		}
		f := folders[dir]
		if f == nil {
			f = &folder{}
			folders[dir] = f
		}
		if len(f.files) == im.MaxFiles {
			return fmt.Errorf("folder %s: more than %d files (MANGO_SKILLS_MAX_FILES)", dir, im.MaxFiles)
		}
		if f.bytes+size > im.MaxBytes {
			return fmt.Errorf("folder %s: its files exceed %d bytes (MANGO_SKILLS_MAX_BYTES)", dir, im.MaxBytes)
		}
		data, err := readAll(open, size)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		f.files = append(f.files, skillbundle.File{Path: p, Data: data})
		f.bytes += int64(len(data))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("skills catalog %s: %w", src, err)
	}
	var out []*skillbundle.Bundle
	for dir, f := range folders {
		if !hasManifest(dir, f.files) {
			continue // not a skill folder
		}
		b, err := bundleOf(dir, f.files)
		if err != nil {
			return nil, fmt.Errorf("skills catalog %s: folder %s: %w", src, dir, err)
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func hasManifest(dir string, files []skillbundle.File) bool {
	for _, f := range files {
		if f.Path == path.Join(dir, skillbundle.Manifest) {
			return true
		}
	}
	return false
}

// bundleOf validates one skill folder.
func bundleOf(dir string, files []skillbundle.File) (*skillbundle.Bundle, error) {
	if err := skillbundle.CheckName(dir); err != nil {
		return nil, fmt.Errorf("the folder's name is the skill's id: %w", err)
	}
	b, err := skillbundle.Parse(files)
	if err != nil {
		return nil, err
	}
	if b.Name != dir {
		return nil, fmt.Errorf("%s names the skill %q; the folder's name must equal it", skillbundle.Manifest, b.Name)
	}
	return b, nil
}

// readAll reads a file of the given size, refusing more bytes than that.
func readAll(open func() (io.ReadCloser, error), size int64) ([]byte, error) {
	rc, err := open()
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != size {
		return nil, errors.New("the file changed while it was read")
	}
	return data, nil
}
