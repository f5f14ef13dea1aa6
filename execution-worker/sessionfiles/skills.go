package sessionfiles

import (
	"archive/zip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"

	"github.com/mangohq/mango/execution-worker/sandbox"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// Where skills are. In a cloud sandbox the skill named <name> is placed,
// read-only, at SkillsDir/<name> (its instructions at
// SkillsDir/<name>/SKILL.md). A self-hosted session's skills are extracted
// by the SDK's worker to SelfHostedSkillsDir/<name>, relative to its
// working directory.
const (
	SkillsDir           = sandbox.SessionDir + "/skills"
	SelfHostedSkillsDir = "skills"
	// SkillManifest is the file at the root of every skill.
	SkillManifest = "SKILL.md"
)

// Bounds on a skill archive, as the SDK's worker bounds its extraction:
// entries, and bytes once expanded (the archive itself is bounded by the
// same number of bytes).
const (
	maxSkillEntries       = 10_000
	maxSkillBytes   int64 = 1 << 30
)

// putSkill places the skill resource r at its mount path: it streams the
// version's archive to a temporary file, checks it, removes what the mount
// path held (a retry or a new version starts clean) and copies the skill's
// tree there read-only. A version that no longer exists, or an archive
// that is refused, is a *ResourceError naming the skill.
func (m *Materializer) putSkill(ctx context.Context, sessionID string, ft sandbox.FileTransfer, r *pb.SessionResource, log *slog.Logger) error {
	name := r.GetSkillName()
	refuse := func(format string, args ...any) error {
		return &ResourceError{ResourceID: r.GetId(), Subject: fmt.Sprintf("skill %q (%s)", name, r.GetSkillId()), Reason: fmt.Sprintf(format, args...)}
	}
	if !fs.ValidPath(name) || strings.Contains(name, "/") || name == "." {
		return refuse("its name is not a directory name")
	}
	if mount := r.GetMountPath(); path.Dir(mount) != SkillsDir || path.Base(mount) != name {
		return refuse("its mount path %q is not %s/%s", mount, SkillsDir, name)
	}
	archive, err := m.downloadSkill(ctx, sessionID, r)
	var tooLarge *skillTooLargeError
	switch {
	case isNotFound(err):
		return refuse("its version %s no longer exists", r.GetSkillVersionId())
	case errors.As(err, &tooLarge):
		return refuse("%v", tooLarge)
	case err != nil:
		return fmt.Errorf("read skill %s version %s: %w", r.GetSkillId(), r.GetSkillVersionId(), err)
	}
	defer func() { _ = os.Remove(archive) }()
	zr, err := zip.OpenReader(archive)
	if err != nil {
		return refuse("its archive cannot be read: %v", err)
	}
	defer func() { _ = zr.Close() }()
	tree, stats, err := skillTree(&zr.Reader, name)
	if err != nil {
		return refuse("its archive is refused: %v", err)
	}
	if err := ft.RemoveAll(ctx, r.GetMountPath()); err != nil {
		return fmt.Errorf("clear %s: %w", r.GetMountPath(), err)
	}
	if err := sandbox.PutReadOnlyTree(ctx, ft, r.GetMountPath(), tree); err != nil {
		return fmt.Errorf("copy skill %s into the sandbox: %w", r.GetSkillId(), err)
	}
	log.InfoContext(ctx, "mounted skill", "skill_id", r.GetSkillId(), "skill_version_id", r.GetSkillVersionId(),
		"files", stats.files, "bytes", stats.bytes)
	return nil
}

// skillTooLargeError reports an archive over maxSkillBytes.
type skillTooLargeError struct{ size int64 }

func (e *skillTooLargeError) Error() string {
	return fmt.Sprintf("its archive of %d bytes or more is over the %d allowed", e.size, maxSkillBytes)
}

// downloadSkill streams the archive of the skill resource r into a new
// temporary file (in m.TempDir) and returns its name; the caller removes
// it. The archive must have the length its first message announced.
func (m *Materializer) downloadSkill(ctx context.Context, sessionID string, r *pb.SessionResource) (name string, err error) {
	ctx, cancel := context.WithCancel(ctx) // ends the stream if we stop early
	defer cancel()
	stream, err := m.Resources.ReadSkillVersion(ctx, &pb.ReadSkillVersionRequest{SessionId: sessionID, ResourceId: r.GetId()})
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(m.TempDir, "mango-skill-*.zip")
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	var written, announced int64
	for first := true; ; first = false {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
		if first {
			announced = msg.GetSizeBytes()
		}
		written += int64(len(msg.GetData()))
		if size := max(written, announced); size > maxSkillBytes {
			return "", &skillTooLargeError{size: size}
		}
		if _, err := f.Write(msg.GetData()); err != nil {
			return "", err
		}
	}
	if written != announced {
		return "", fmt.Errorf("the archive has %d bytes, %d were announced", written, announced)
	}
	return f.Name(), nil
}

// skillStats counts what a skill archive holds.
type skillStats struct {
	files int
	bytes int64
}

// skillTree returns the tree of the skill called name in zr: what lies
// under name/. It refuses an archive with more than maxSkillEntries
// entries or maxSkillBytes bytes once expanded, an entry outside name/,
// one whose path is absolute, has ".." or is otherwise not clean, one that
// is neither a regular file nor a directory (a symbolic link), two
// entries for one path, and an archive without name/SKILL.md. The sizes
// checked are those the entries declare: zip's reader refuses an entry
// longer than it declares.
func skillTree(zr *zip.Reader, name string) (fs.FS, skillStats, error) {
	var st skillStats
	if len(zr.File) > maxSkillEntries {
		return nil, st, fmt.Errorf("it has %d entries, more than the %d allowed", len(zr.File), maxSkillEntries)
	}
	prefix := name + "/"
	files, dirs := map[string]bool{}, map[string]bool{}
	for _, f := range zr.File {
		rel, ok := strings.CutPrefix(f.Name, prefix)
		if !ok {
			return nil, st, fmt.Errorf("entry %q lies outside %s", f.Name, prefix)
		}
		mode := f.Mode()
		if mode.IsDir() {
			if rel = strings.TrimSuffix(rel, "/"); rel == "" {
				continue
			}
		} else if !mode.IsRegular() {
			return nil, st, fmt.Errorf("entry %q is not a regular file or a directory (%v)", f.Name, mode.Type())
		}
		if !fs.ValidPath(rel) || strings.Contains(rel, `\`) {
			return nil, st, fmt.Errorf("entry %q is not a clean relative path", f.Name)
		}
		if files[rel] {
			return nil, st, fmt.Errorf("entry %q appears twice", f.Name)
		}
		for d := path.Dir(rel); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		if mode.IsDir() {
			dirs[rel] = true
			continue
		}
		files[rel] = true
		st.files++
		if f.UncompressedSize64 > uint64(maxSkillBytes-st.bytes) {
			return nil, st, fmt.Errorf("it holds more than %d bytes once expanded", maxSkillBytes)
		}
		st.bytes += int64(f.UncompressedSize64)
	}
	for d := range dirs {
		if files[d] {
			return nil, st, fmt.Errorf("%s%s is both a file and a directory", prefix, d)
		}
	}
	if !files[SkillManifest] {
		return nil, st, fmt.Errorf("it has no %s%s", prefix, SkillManifest)
	}
	tree, err := fs.Sub(zr, name)
	return tree, st, err
}
