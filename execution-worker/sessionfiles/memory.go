package sessionfiles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strings"
	"testing/fstest"
	"unicode/utf8"

	"github.com/mangohq/mango/execution-worker/sandbox"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// Memory stores in sandboxes.
//
// A memory_store resource is placed once per turn, at the turn's first use
// of the sandbox: what the mount holds is first synced against the base
// the api-server keeps (a crash or an interrupted turn may have left the
// agent's changes there), then the store's current memories replace the
// mount's contents. At the end of every turn that used the sandbox the
// mount is synced again ([Materializer.SyncMemory]). A sync sends only
// what differs from the base; the api-server decides each change (applied,
// unchanged, conflict, refused) and never overwrites an API edit blindly.
//
// Whether a mount may be synced is recorded in the sandbox itself, by a
// marker file per resource under [MemoryStateDir]: it is removed before a
// placement starts and written once the placement is complete. A mount
// without its marker (a placement cut short, or a sandbox that never
// received the store, such as a new one after the old one vanished) holds
// nothing of the agent's and is never synced: syncing it would report the
// store's memories as deleted.

// Access modes of a memory_store resource.
const (
	MemoryReadWrite = "read_write"
	MemoryReadOnly  = "read_only"
)

// MemoryStoreType is the type of memory_store session resources.
const MemoryStoreType = "memory_store"

// Where memory stores are. In a cloud sandbox the store named <name> is
// mounted at MemoryDir/<name> (the resource's mount path). A self-hosted
// session's stores are synced by the SDK's worker to
// SelfHostedMemoryDir/<name>, relative to its working directory.
const (
	MemoryDir           = sandbox.MemoryDir
	SelfHostedMemoryDir = "memory"
	// MemoryStateDir holds the placement markers of memory mounts (one
	// file per resource id).
	MemoryStateDir = sandbox.SessionDir + "/.memory"
)

// Bounds on what one sync sends and one placement writes: a memory's
// content (the API's own limit), the number of memories and their total
// bytes.
const (
	MaxMemoryBytes            = 102_400
	maxMemoryFiles            = 10_000
	maxMemoryTotalBytes int64 = 256 << 20
	// maxSyncBatch bounds the changes of one SyncMemoryStore call (the
	// api-server accepts up to 10,000); more are sent in several calls.
	maxSyncBatch = 1000
)

// memoryReadWriteMode is the mode of placed memories of a read_write
// store (sandbox.PutReadOnlyTree makes those of a read_only store 0444).
const memoryReadWriteMode fs.FileMode = 0o644

// MemorySyncReport counts what became of a sync's changes.
type MemorySyncReport struct {
	Applied, Unchanged, Conflicts, Refused int
	// Skipped counts files the worker did not send: over MaxMemoryBytes,
	// not UTF-8, or beyond the bounds on files and bytes.
	Skipped int
}

// placeMemory places the memory_store resource r: it syncs what the mount
// holds, then replaces it with the store's current memories.
func (m *Materializer) placeMemory(ctx context.Context, sessionID string, ft sandbox.FileTransfer, r *pb.SessionResource, log *slog.Logger) error {
	if m.Memory == nil {
		return &ResourceError{ResourceID: r.GetId(), Reason: "this worker cannot place memory stores"}
	}
	if _, err := m.syncMount(ctx, sessionID, ft, r, log); err != nil {
		return m.memoryError(r, err)
	}
	return m.memoryError(r, m.replaceMount(ctx, sessionID, ft, r, log))
}

// memoryError turns NOT_FOUND (the store or the resource is gone), a
// mount path the sandbox refuses and a store over the bounds into a
// *ResourceError; other errors are returned as they are.
func (m *Materializer) memoryError(r *pb.SessionResource, err error) error {
	switch {
	case err == nil:
		return nil
	case isNotFound(err):
		return &ResourceError{ResourceID: r.GetId(), Reason: fmt.Sprintf("its memory store no longer exists (%v)", err)}
	case errors.Is(err, sandbox.ErrPathEscape):
		return &ResourceError{ResourceID: r.GetId(), Reason: fmt.Sprintf("this sandbox cannot hold its mount path %s", r.GetMountPath())}
	}
	var tooLarge *memoryTooLargeError
	if errors.As(err, &tooLarge) {
		return &ResourceError{ResourceID: r.GetId(), Reason: "its memory store is too large to place: " + tooLarge.reason}
	}
	return err
}

// SyncMemory syncs every live memory_store mount of the session's sandbox
// sb (resources as the turn listed them; nil lists them) at the end of a
// turn. A mount whose sync reported a conflict is placed again, so the
// sandbox holds what the store kept (the agent's content was saved at the
// conflict path). CONFLICT and REFUSED outcomes are logged, never errors;
// a resource deleted meanwhile is skipped. Any other error (transport)
// is returned: the caller's attempt fails and is retried.
func (m *Materializer) SyncMemory(ctx context.Context, sessionID string, sb sandbox.Sandbox, resources []*pb.SessionResource) error {
	if m.Memory == nil || sb == nil {
		return nil
	}
	if resources == nil {
		list, err := m.Resources.ListSessionResources(ctx, &pb.ListSessionResourcesRequest{SessionId: sessionID})
		if err != nil {
			return fmt.Errorf("list resources of session %s: %w", sessionID, err)
		}
		resources = list.GetResources()
	}
	ft, ok := sb.(sandbox.FileTransfer)
	if !ok {
		return nil
	}
	for _, r := range resources {
		if r.GetType() != MemoryStoreType || r.GetDeleted() {
			continue
		}
		log := m.logger().With("session_id", sessionID, "resource_id", r.GetId(), "mount_path", r.GetMountPath())
		rep, err := m.syncMount(ctx, sessionID, ft, r, log)
		if err == nil && rep.Conflicts > 0 {
			err = m.replaceMount(ctx, sessionID, ft, r, log)
		}
		if isNotFound(err) {
			log.InfoContext(ctx, "memory store resource gone; not synced", "error", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("sync memory store resource %s: %w", r.GetId(), err)
		}
	}
	return nil
}

// markerPath is the placement marker of resource id.
func markerPath(id string) string { return path.Join(MemoryStateDir, id) }

// placed reports whether the mount of r holds a complete placement.
func placed(ctx context.Context, ft sandbox.FileTransfer, r *pb.SessionResource) (bool, error) {
	rc, _, err := ft.GetFile(ctx, markerPath(r.GetId()))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the placement marker of %s: %w", r.GetId(), err)
	}
	_ = rc.Close()
	return true, nil
}

// syncMount sends what the mount of r changed against the base.
func (m *Materializer) syncMount(ctx context.Context, sessionID string, ft sandbox.FileTransfer, r *pb.SessionResource, log *slog.Logger) (MemorySyncReport, error) {
	var rep MemorySyncReport
	if ok, err := placed(ctx, ft, r); err != nil || !ok {
		return rep, err
	}
	base, err := m.Memory.GetMemoryBase(ctx, &pb.GetMemoryBaseRequest{SessionId: sessionID, ResourceId: r.GetId()})
	if err != nil {
		return rep, fmt.Errorf("read the memory base of %s: %w", r.GetId(), err)
	}
	mount := mountOf(r, base.GetHeader())
	changes, skipped, err := diffMount(ctx, ft, mount, base.GetEntries(), log)
	rep.Skipped = skipped
	if err != nil || len(changes) == 0 {
		return rep, err
	}
	var results []*pb.MemoryChangeResult
	for batch := range slices.Chunk(changes, maxSyncBatch) {
		got, err := m.sendChanges(ctx, sessionID, r.GetId(), batch)
		if err != nil {
			return rep, err
		}
		results = append(results, got...)
	}
	for _, res := range results {
		l := log.With("path", res.GetPath())
		switch res.GetOutcome() {
		case pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_APPLIED:
			rep.Applied++
		case pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_UNCHANGED:
			rep.Unchanged++
		case pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_CONFLICT:
			rep.Conflicts++
			l.WarnContext(ctx, "memory CONFLICT: the memory changed through the API since it was placed; the agent's content was saved elsewhere",
				"conflict_path", res.GetConflictPath())
		default:
			rep.Refused++
			l.WarnContext(ctx, "memory change REFUSED", "reason", res.GetReason(), "access", base.GetHeader().GetAccess())
		}
	}
	log.InfoContext(ctx, "synced memory store", "applied", rep.Applied, "unchanged", rep.Unchanged, "conflicts", rep.Conflicts,
		"refused", rep.Refused, "skipped", rep.Skipped)
	return rep, nil
}

// mountOf is the mount path of r: the resource's, else the header's.
func mountOf(r *pb.SessionResource, h *pb.MemoryStoreHeader) string {
	if r.GetMountPath() != "" {
		return r.GetMountPath()
	}
	return h.GetMountPath()
}

// diffMount compares the files under mount with the base: a file whose
// content differs from (or is not in) the base is a change with its
// content, a base path with no file under mount a deletion. Files the
// store cannot hold (over MaxMemoryBytes, not UTF-8) and files beyond the
// bounds are skipped, logged as refused; they are never taken for
// deletions. Files are read in one walk ([sandbox.WalkFiles]) and judged
// in path order, as [sandbox.FileTransfer.ListFiles] sorts them.
func diffMount(ctx context.Context, ft sandbox.FileTransfer, mount string, entries []*pb.MemoryBaseEntry, log *slog.Logger) ([]*pb.MemoryChange, int, error) {
	base := make(map[string]string, len(entries))
	for _, e := range entries {
		base[e.GetPath()] = e.GetContentSha256()
	}
	files, err := readMount(ctx, ft, mount, base)
	if err != nil {
		return nil, 0, err
	}
	var (
		changes []*pb.MemoryChange
		seen    = map[string]bool{}
		skipped int
		total   int64
	)
	for i, f := range files {
		rel, ok := strings.CutPrefix(f.path, strings.TrimSuffix(mount, "/")+"/")
		if !ok || !fs.ValidPath(rel) {
			continue
		}
		seen[rel] = true
		why := ""
		switch {
		case i >= maxMemoryFiles:
			why = fmt.Sprintf("the mount holds more than %d files", maxMemoryFiles)
		case f.size > MaxMemoryBytes:
			why = fmt.Sprintf("%d bytes, over the %d a memory may hold", f.size, MaxMemoryBytes)
		case total+f.size > maxMemoryTotalBytes:
			why = fmt.Sprintf("the changes exceed %d bytes", maxMemoryTotalBytes)
		}
		if why == "" && f.dropped {
			// Its content was not kept during the walk: read it again.
			if f, err = reread(ctx, ft, f, base[rel]); err != nil {
				return nil, 0, err
			}
		}
		if why == "" && !f.utf8 {
			why = "not UTF-8 text"
		}
		if why != "" {
			skipped++
			log.WarnContext(ctx, "memory file REFUSED by the worker: not synced", "path", rel, "reason", why)
			continue
		}
		if b, ok := base[rel]; ok && b == f.sha {
			continue
		}
		total += int64(len(f.content))
		changes = append(changes, &pb.MemoryChange{Path: rel, Content: f.content, ContentSha256: f.sha, BaseSha256: base[rel]})
	}
	for _, e := range entries {
		if !seen[e.GetPath()] {
			changes = append(changes, &pb.MemoryChange{Path: e.GetPath(), Deleted: true, BaseSha256: e.GetContentSha256()})
		}
	}
	return changes, skipped, nil
}

// mountFile is one regular file read under a memory mount.
type mountFile struct {
	path string
	size int64
	// sha and utf8 describe the content when the file was read (size at
	// most MaxMemoryBytes).
	sha  string
	utf8 bool
	// content is kept only when it differs from the base and is UTF-8;
	// dropped reports content that was not kept to bound what a walk
	// holds (maxMemoryTotalBytes).
	content []byte
	dropped bool
}

// readMount reads every regular file under mount in one walk, sorted by
// path. The content of a file larger than MaxMemoryBytes is never read;
// the content of files the base holds unchanged is not kept.
func readMount(ctx context.Context, ft sandbox.FileTransfer, mount string, base map[string]string) ([]mountFile, error) {
	var (
		files []mountFile
		kept  int64
	)
	prefix := strings.TrimSuffix(mount, "/") + "/"
	err := sandbox.WalkFiles(ctx, ft, mount, func(p string, size int64, r io.Reader) error {
		f := mountFile{path: p, size: size}
		if size <= MaxMemoryBytes {
			data, err := io.ReadAll(io.LimitReader(r, MaxMemoryBytes+1))
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
			f.describe(data, base[strings.TrimPrefix(p, prefix)])
			if f.content != nil && kept+int64(len(f.content)) > maxMemoryTotalBytes {
				f.content, f.dropped = nil, true
			}
			kept += int64(len(f.content))
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", mount, err)
	}
	slices.SortFunc(files, func(a, b mountFile) int { return strings.Compare(a.path, b.path) })
	return files, nil
}

// describe sets f's size, hash and UTF-8 validity from data, and keeps
// data when it is UTF-8 and its hash differs from baseSHA.
func (f *mountFile) describe(data []byte, baseSHA string) {
	sum := sha256.Sum256(data)
	f.size, f.sha, f.utf8 = int64(len(data)), hex.EncodeToString(sum[:]), utf8.Valid(data)
	if f.utf8 && f.sha != baseSHA {
		f.content = data
		if data == nil {
			f.content = []byte{}
		}
	}
}

// reread reads again the file f whose content a walk did not keep.
func reread(ctx context.Context, ft sandbox.FileTransfer, f mountFile, baseSHA string) (mountFile, error) {
	data, err := readSmall(ctx, ft, f.path)
	if err != nil {
		return f, err
	}
	f.dropped = false
	f.describe(data, baseSHA)
	return f, nil
}

// readSmall reads the file p of at most MaxMemoryBytes bytes.
func readSmall(ctx context.Context, ft sandbox.FileTransfer, p string) ([]byte, error) {
	rc, _, err := ft.GetFile(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, MaxMemoryBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return data, nil
}

// sendChanges streams changes to SyncMemoryStore and returns one result
// per change.
func (m *Materializer) sendChanges(ctx context.Context, sessionID, resourceID string, changes []*pb.MemoryChange) ([]*pb.MemoryChangeResult, error) {
	ctx, cancel := context.WithCancel(ctx) // ends the stream if we stop early
	defer cancel()
	stream, err := m.Memory.SyncMemoryStore(ctx)
	if err != nil {
		return nil, fmt.Errorf("sync memory of %s: %w", resourceID, err)
	}
	send := func(msg *pb.SyncMemoryStoreRequest) error {
		if err := stream.Send(msg); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("sync memory of %s: %w", resourceID, err)
		}
		return nil // io.EOF: the server ended the stream; CloseAndRecv says why
	}
	if err := send(&pb.SyncMemoryStoreRequest{Header: &pb.ReadMemoryStoreRequest{SessionId: sessionID, ResourceId: resourceID}}); err != nil {
		return nil, err
	}
	for _, c := range changes {
		if err := send(&pb.SyncMemoryStoreRequest{Change: c}); err != nil {
			return nil, err
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, fmt.Errorf("sync memory of %s: %w", resourceID, err)
	}
	if n := len(resp.GetResults()); n != len(changes) {
		return nil, fmt.Errorf("sync memory of %s: %d results for %d changes, want one per change", resourceID, n, len(changes))
	}
	return resp.GetResults(), nil
}

// replaceMount replaces the mount of r with the store's current memories
// (ReadMemoryStore makes them the base): read_only stores' files are 0444,
// read_write ones 0644. The placement marker is removed first and written
// last, so a placement cut short is never synced.
func (m *Materializer) replaceMount(ctx context.Context, sessionID string, ft sandbox.FileTransfer, r *pb.SessionResource, log *slog.Logger) error {
	marker := markerPath(r.GetId())
	if err := ft.RemoveAll(ctx, marker); err != nil {
		return fmt.Errorf("remove the placement marker of %s: %w", r.GetId(), err)
	}
	header, tree, bytesRead, err := m.readMemories(ctx, sessionID, r.GetId())
	if err != nil {
		return err
	}
	mount := mountOf(r, header)
	if mount == "" || !path.IsAbs(mount) {
		return &ResourceError{ResourceID: r.GetId(), Reason: fmt.Sprintf("its mount path %q is not an absolute path", mount)}
	}
	if err := ft.RemoveAll(ctx, mount); err != nil {
		return fmt.Errorf("clear %s: %w", mount, err)
	}
	put := sandbox.PutTree
	if header.GetAccess() == MemoryReadOnly {
		put = sandbox.PutReadOnlyTree
	}
	if err := put(ctx, ft, mount, tree); err != nil {
		return fmt.Errorf("copy memory store %s into the sandbox: %w", header.GetMemoryStoreId(), err)
	}
	if len(tree) == 0 {
		// No file: make the directory exist where PutTree skips empty ones.
		if err := putEmptyDir(ctx, ft, mount); err != nil {
			return err
		}
	}
	done := []byte("placed\n")
	if err := ft.PutFile(ctx, marker, bytes.NewReader(done), int64(len(done)), 0o644); err != nil {
		return fmt.Errorf("write the placement marker of %s: %w", r.GetId(), err)
	}
	log.InfoContext(ctx, "placed memory store", "memory_store_id", header.GetMemoryStoreId(), "access", header.GetAccess(),
		"memories", len(tree), "bytes", bytesRead)
	return nil
}

// putEmptyDir makes dir exist: it writes and removes a file in it.
func putEmptyDir(ctx context.Context, ft sandbox.FileTransfer, dir string) error {
	p := path.Join(dir, ".mango-empty")
	if err := ft.PutFile(ctx, p, bytes.NewReader(nil), 0, memoryReadWriteMode); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := ft.RemoveAll(ctx, p); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}

// readMemories reads the current memories of resource id as a tree,
// checking each path, content hash and the bounds.
func (m *Materializer) readMemories(ctx context.Context, sessionID, id string) (*pb.MemoryStoreHeader, fstest.MapFS, int64, error) {
	ctx, cancel := context.WithCancel(ctx) // ends the stream if we stop early
	defer cancel()
	stream, err := m.Memory.ReadMemoryStore(ctx, &pb.ReadMemoryStoreRequest{SessionId: sessionID, ResourceId: id})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("read memory store of %s: %w", id, err)
	}
	var header *pb.MemoryStoreHeader
	tree, dirs := fstest.MapFS{}, map[string]bool{}
	var total int64
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("read memory store of %s: %w", id, err)
		}
		if header == nil {
			if header = msg.GetHeader(); header == nil {
				return nil, nil, 0, fmt.Errorf("read memory store of %s: the first message has no header, want one", id)
			}
			continue
		}
		f := msg.GetMemory()
		if err := checkMemory(f, tree, dirs, total); err != nil {
			return nil, nil, 0, fmt.Errorf("read memory store of %s: %w", id, err)
		}
		for d := path.Dir(f.GetPath()); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		total += int64(len(f.GetContent()))
		tree[f.GetPath()] = &fstest.MapFile{Data: f.GetContent(), Mode: memoryReadWriteMode}
	}
	if header == nil {
		return nil, nil, 0, fmt.Errorf("read memory store of %s: the stream ended without a header", id)
	}
	return header, tree, total, nil
}

// memoryTooLargeError reports a store over the bounds a placement
// accepts: the client can fix it by removing memories.
type memoryTooLargeError struct{ reason string }

func (e *memoryTooLargeError) Error() string { return e.reason }

// checkMemory checks a memory read from the store against the tree so far
// (its files, their directories and total bytes).
func checkMemory(f *pb.MemoryFile, tree fstest.MapFS, dirs map[string]bool, total int64) error {
	p := f.GetPath()
	switch {
	case f == nil:
		return errors.New("a message after the first has no memory, want one")
	case !fs.ValidPath(p) || p == "." || strings.Contains(p, `\`):
		return fmt.Errorf("memory path %q is not a clean relative path", p)
	case tree[p] != nil || dirs[p]:
		return fmt.Errorf("memory path %q appears twice, or is also a directory", p)
	case len(tree) >= maxMemoryFiles:
		return &memoryTooLargeError{fmt.Sprintf("it holds more than %d memories", maxMemoryFiles)}
	case total+int64(len(f.GetContent())) > maxMemoryTotalBytes:
		return &memoryTooLargeError{fmt.Sprintf("it holds more than %d bytes", maxMemoryTotalBytes)}
	}
	sum := sha256.Sum256(f.GetContent())
	if got := hex.EncodeToString(sum[:]); got != f.GetContentSha256() {
		return fmt.Errorf("memory %q has SHA-256 %s, the server announced %s", p, got, f.GetContentSha256())
	}
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if tree[d] != nil {
			return fmt.Errorf("memory path %q lies under the memory %q", p, d)
		}
	}
	return nil
}
