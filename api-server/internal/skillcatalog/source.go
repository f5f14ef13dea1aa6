package skillcatalog

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mangohq/mango/api-server/internal/filestore/filestores3"
)

// Source is where a catalog is read.
type Source interface {
	// Walk calls fn for every regular file of the catalog, with its
	// slash-separated path relative to the catalog's root, its size and
	// a function that opens its bytes. An error of fn ends the walk and
	// is returned.
	Walk(ctx context.Context, fn func(path string, size int64, open func() (io.ReadCloser, error)) error) error
	// String names the catalog in logs and errors.
	String() string
}

// Open returns the source a MANGO_SKILLS_CATALOG value names: a directory,
// or s3://bucket/prefix read with the endpoint and credentials of the file
// store's S3 settings s3 (nil: the file store is not on S3, which an S3
// catalog needs).
func Open(catalog string, s3 *filestores3.Config) (Source, error) {
	if rest, ok := strings.CutPrefix(catalog, "s3://"); ok {
		bucket, prefix, _ := strings.Cut(rest, "/")
		if bucket == "" {
			return nil, fmt.Errorf("%s: want s3://bucket/prefix, got %q", EnvCatalog, catalog)
		}
		if s3 == nil {
			return nil, fmt.Errorf("%s: an S3 catalog is read with the file store's S3 settings, and %s is not set",
				EnvCatalog, filestores3.EnvEndpoint)
		}
		if prefix != "" && !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		cfg := *s3
		cfg.Bucket, cfg.Prefix = bucket, prefix
		st, err := filestores3.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvCatalog, err)
		}
		return &s3Source{st: st, url: "s3://" + bucket + "/" + prefix}, nil
	}
	info, err := os.Stat(catalog)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvCatalog, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s: %s is not a directory (want a directory of skill folders or s3://bucket/prefix)", EnvCatalog, catalog)
	}
	return Dir(catalog), nil
}

// Dir is a catalog in a local directory.
type Dir string

// Walk implements Source. Anything but regular files and directories
// (a symbolic link, a device) is an error.
func (d Dir) Walk(ctx context.Context, fn func(path string, size int64, open func() (io.ReadCloser, error)) error) error {
	root := string(d)
	return filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("catalog %s: %s is not a regular file", root, rel)
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), info.Size(), func() (io.ReadCloser, error) { return os.Open(p) })
	})
}

func (d Dir) String() string { return string(d) }

// s3Source is a catalog under a prefix of an S3 bucket.
type s3Source struct {
	st  *filestores3.Store
	url string
}

func (s *s3Source) Walk(ctx context.Context, fn func(path string, size int64, open func() (io.ReadCloser, error)) error) error {
	return s.st.Walk(ctx, func(key string, size int64, open func() (io.ReadCloser, error)) error {
		if strings.HasSuffix(key, "/") && size == 0 {
			return nil // a folder marker
		}
		return fn(key, size, open)
	})
}

func (s *s3Source) String() string { return s.url }

var (
	_ Source = Dir("")
	_ Source = (*s3Source)(nil)
)
