// Package sessionfiles moves a session's files between the api-server and
// its sandbox: [Materializer] puts the session's resources (files the
// client attached, repositories, the agent's skills) into the sandbox
// before the turn that first needs them, and [Publisher] publishes what
// the agent left under /mnt/session/outputs as Files before the session
// goes idle.
//
// Both are idempotent across activity retries and worker restarts: what a
// sandbox holds is recorded by the api-server (a resource's materialized
// version), and outputs are published by (path, content).
package sessionfiles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"testing/fstest"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mangohq/mango/execution-worker/sandbox"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// FileOpener reads a File's bytes (the ControlPlane Files client).
type FileOpener interface {
	// Open returns a reader of the file's content and its metadata.
	Open(ctx context.Context, sessionID, fileID string) (io.ReadCloser, *pb.FileMeta, error)
}

// Clone is a repository clone: it fills dir (absent or empty) with the
// repository checked out as asked and returns the commit checked out.
// Errors must never contain the token.
type Clone func(ctx context.Context, repo Repository, dir string) (commit string, err error)

// Repository is what a repository resource asks for.
type Repository struct {
	URL    string
	Branch string
	Commit string
	Token  string
}

// Materializer puts session resources into sandboxes.
type Materializer struct {
	// Resources lists resources and records what sandboxes hold.
	Resources pb.SessionResourcesClient
	// Files reads file resources' bytes.
	Files FileOpener
	// Memory reads and syncs memory_store resources; nil refuses them.
	Memory pb.SessionMemoryClient
	// Clone clones repository resources; nil refuses them.
	Clone Clone
	// TempDir holds clones and skill archives while they are copied ("" :
	// os.TempDir()).
	TempDir string
	// Logger receives progress; nil discards it.
	Logger *slog.Logger

	// prepared remembers the sessions whose sandbox this worker has given
	// its session directories (bounded: forgotten in bulk when it grows).
	prepared  sync.Map
	nPrepared atomic.Int64
}

// maxPrepared bounds the sessions Materializer remembers as prepared.
const maxPrepared = 10_000

// sessionDirs is the tree of the session directories every sandbox has:
// /mnt/session/uploads and /mnt/session/outputs, empty.
var sessionDirs = fstest.MapFS{
	"uploads": &fstest.MapFile{Mode: fs.ModeDir | 0o755},
	"outputs": &fstest.MapFile{Mode: fs.ModeDir | 0o755},
}

// prepare creates the session directories in sb, once per session and
// worker process (again after a restart: it is idempotent).
func (m *Materializer) prepare(ctx context.Context, sessionID string, sb sandbox.Sandbox) error {
	if _, done := m.prepared.Load(sessionID); done {
		return nil
	}
	ft, ok := sb.(sandbox.FileTransfer)
	if !ok {
		return nil
	}
	if err := sandbox.PutTree(ctx, ft, sandbox.SessionDir, sessionDirs); err != nil {
		return fmt.Errorf("create the session directories of %s: %w", sessionID, err)
	}
	if m.nPrepared.Add(1) > maxPrepared {
		m.prepared.Clear()
		m.nPrepared.Store(0)
	}
	m.prepared.Store(sessionID, true)
	return nil
}

// ResourceError reports a resource that cannot be materialized for a
// reason the client can fix (a file gone, a repository or branch that
// does not exist, a token refused, a skill version deleted or its archive
// refused). The turn ends with a session.error
// naming the resource; the session stays usable.
type ResourceError struct {
	ResourceID string
	// Subject names the resource in the message when the client knows it
	// by something else than its id (a skill: its name and skill id); ""
	// names it by ResourceID.
	Subject string
	Reason  string
}

func (e *ResourceError) Error() string {
	subject := e.Subject
	if subject == "" {
		subject = "resource " + e.ResourceID
	}
	return fmt.Sprintf("%s cannot be mounted: %s", subject, e.Reason)
}

// ErrUnusable marks a clone failure the client can fix: Clone
// implementations wrap such errors with it (or return a *ResourceError).
var ErrUnusable = errors.New("repository unusable")

// Materialize brings the sandbox of sessionID up to date with the
// session's resources: it mounts what is new or changed and removes what
// the client deleted, recording each step with the api-server. A
// resource already in the sandbox costs nothing but the listing, except a
// memory_store resource: it is synced and placed again on every call (see
// memory.go), so call Materialize once per turn.
func (m *Materializer) Materialize(ctx context.Context, sessionID string, sb sandbox.Sandbox) error {
	list, err := m.Resources.ListSessionResources(ctx, &pb.ListSessionResourcesRequest{SessionId: sessionID})
	if err != nil {
		return fmt.Errorf("list resources of session %s: %w", sessionID, err)
	}
	return m.MaterializeListed(ctx, sessionID, sb, list.GetResources())
}

// MaterializeListed is Materialize with the session's resources as a
// listing read in this turn returned them (pb.TurnContext), saving the
// call.
func (m *Materializer) MaterializeListed(ctx context.Context, sessionID string, sb sandbox.Sandbox, resources []*pb.SessionResource) error {
	if err := m.prepare(ctx, sessionID, sb); err != nil {
		return err
	}
	var ft sandbox.FileTransfer
	for _, r := range resources {
		current := !r.GetDeleted() && r.GetMaterializedVersion() >= r.GetVersion()
		memory := r.GetType() == MemoryStoreType && !r.GetDeleted()
		if current && !memory {
			continue
		}
		if ft == nil {
			var ok bool
			if ft, ok = sb.(sandbox.FileTransfer); !ok {
				return &ResourceError{ResourceID: r.GetId(), Reason: fmt.Sprintf("the %s sandbox cannot receive files", sb.Ref().Provider)}
			}
		}
		if err := m.one(ctx, sessionID, ft, r); err != nil {
			return err
		}
		if current {
			continue
		}
		if _, err := m.Resources.MarkResourceMaterialized(ctx, &pb.MarkResourceMaterializedRequest{
			SessionId: sessionID, ResourceId: r.GetId(), Version: r.GetVersion()}); err != nil {
			return fmt.Errorf("record resource %s: %w", r.GetId(), err)
		}
	}
	return nil
}

func (m *Materializer) one(ctx context.Context, sessionID string, ft sandbox.FileTransfer, r *pb.SessionResource) error {
	log := m.logger().With("session_id", sessionID, "resource_id", r.GetId(), "mount_path", r.GetMountPath())
	if r.GetDeleted() {
		log.InfoContext(ctx, "removing deleted resource from the sandbox")
		if err := ft.RemoveAll(ctx, r.GetMountPath()); err != nil {
			return fmt.Errorf("remove resource %s: %w", r.GetId(), err)
		}
		if r.GetType() == MemoryStoreType {
			if err := ft.RemoveAll(ctx, markerPath(r.GetId())); err != nil {
				return fmt.Errorf("remove the placement marker of %s: %w", r.GetId(), err)
			}
		}
		return nil
	}
	switch r.GetType() {
	case "file":
		return m.putFile(ctx, sessionID, ft, r, log)
	case "github_repository":
		return m.putRepository(ctx, sessionID, ft, r, log)
	case "skill":
		return m.putSkill(ctx, sessionID, ft, r, log)
	case MemoryStoreType:
		return m.placeMemory(ctx, sessionID, ft, r, log)
	}
	return &ResourceError{ResourceID: r.GetId(), Reason: fmt.Sprintf("resource type %q is not supported by this worker", r.GetType())}
}

// Mode of mounted files: read-only for everyone.
const mountedFileMode fs.FileMode = 0o444

func (m *Materializer) putFile(ctx context.Context, sessionID string, ft sandbox.FileTransfer, r *pb.SessionResource, log *slog.Logger) error {
	rc, meta, err := m.Files.Open(ctx, sessionID, r.GetFileId())
	if err != nil {
		if isNotFound(err) {
			return &ResourceError{ResourceID: r.GetId(), Reason: fmt.Sprintf("its file %s no longer exists", r.GetFileId())}
		}
		return fmt.Errorf("read file %s: %w", r.GetFileId(), err)
	}
	defer func() { _ = rc.Close() }()
	if err := ft.PutFile(ctx, r.GetMountPath(), rc, meta.GetSizeBytes(), mountedFileMode); err != nil {
		return fmt.Errorf("mount file %s at %s: %w", r.GetFileId(), r.GetMountPath(), err)
	}
	log.InfoContext(ctx, "mounted file", "file_id", r.GetFileId(), "bytes", meta.GetSizeBytes())
	return nil
}

func (m *Materializer) putRepository(ctx context.Context, sessionID string, ft sandbox.FileTransfer, r *pb.SessionResource, log *slog.Logger) error {
	if m.Clone == nil {
		return &ResourceError{ResourceID: r.GetId(), Reason: "this worker cannot clone repositories"}
	}
	repo := Repository{URL: r.GetUrl()}
	switch r.GetCheckoutType() {
	case "branch":
		repo.Branch = r.GetCheckoutRef()
	case "commit":
		repo.Commit = r.GetCheckoutRef()
	}
	if r.GetHasToken() {
		tok, err := m.Resources.GetResourceToken(ctx, &pb.GetResourceTokenRequest{SessionId: sessionID, ResourceId: r.GetId()})
		if err != nil {
			return fmt.Errorf("load token of resource %s: %w", r.GetId(), err)
		}
		repo.Token = tok.GetAuthorizationToken()
	}
	dir, err := os.MkdirTemp(m.TempDir, "mango-clone-*")
	if err != nil {
		return fmt.Errorf("clone %s: %w", r.GetId(), err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	commit, err := m.Clone(ctx, repo, dir)
	if err != nil {
		var re *ResourceError
		if errors.As(err, &re) {
			return re
		}
		if errors.Is(err, ErrUnusable) {
			return &ResourceError{ResourceID: r.GetId(), Reason: err.Error()}
		}
		return fmt.Errorf("clone resource %s: %w", r.GetId(), err)
	}
	// A retry after a partial copy starts from an empty mount.
	if err := ft.RemoveAll(ctx, r.GetMountPath()); err != nil {
		return fmt.Errorf("clear %s: %w", r.GetMountPath(), err)
	}
	if err := sandbox.PutTree(ctx, ft, r.GetMountPath(), os.DirFS(dir)); err != nil {
		return fmt.Errorf("copy repository of resource %s into the sandbox: %w", r.GetId(), err)
	}
	log.InfoContext(ctx, "mounted repository", "url", r.GetUrl(), "commit", commit)
	return nil
}

func (m *Materializer) logger() *slog.Logger {
	if m.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Logger
}

// Once wraps a sandbox acquisition so that the session's resources are
// materialized the first time a turn needs its sandbox, and not again in
// that turn. [Once.Start] begins the acquisition as the turn starts, so
// that provisioning overlaps the turn's first model call.
type Once struct {
	mu   sync.Mutex      // held through an acquisition
	sb   sandbox.Sandbox // handed out by Acquire
	done bool            // materialized
	// emu guards early on its own: an Acquire must find the acquisition
	// Start began, and wait for it only as long as its context allows,
	// while that acquisition holds mu.
	emu   sync.Mutex
	early *early // begun by Start, not yet taken by an Acquire
}

// early is an acquisition begun by Start.
type early struct {
	done chan struct{} // closed when it ended
	sb   sandbox.Sandbox
	err  error
	cut  bool // err came with Start's context done: no outcome
}

// Start begins acquiring the sandbox (and materializing the session's
// resources into it) in the background, so that it is ready, or on its
// way, when the turn first needs it. The first Acquire waits for it and
// takes its outcome as if it had acquired itself: an error surfaces
// there, and nowhere if the turn never needs the sandbox. An acquisition
// cut short by ctx is no outcome: that Acquire then acquires itself,
// under its own context (a tool call may outlive the attempt that
// started it).
//
// The returned stop cancels the acquisition if it still runs and waits
// for it to end; call it (it may be called more than once) before the
// turn ends. Start is called at most once, before any Acquire.
func (o *Once) Start(ctx context.Context, acquire func(context.Context) (sandbox.Sandbox, error), materialize func(context.Context, sandbox.Sandbox) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	e := &early{done: make(chan struct{})}
	o.emu.Lock()
	o.early = e
	o.emu.Unlock()
	go func() {
		defer close(e.done)
		o.mu.Lock()
		defer o.mu.Unlock()
		e.sb, e.err = o.get(ctx, acquire, materialize)
		e.cut = e.err != nil && ctx.Err() != nil
	}()
	return func() {
		cancel()
		<-e.done
	}
}

// Acquire returns acquire's sandbox after materialize succeeded on it
// once; a failure is retried on the next call. After Start, the first
// call waits (as long as ctx allows) for the acquisition Start began.
func (o *Once) Acquire(ctx context.Context, acquire func(context.Context) (sandbox.Sandbox, error), materialize func(context.Context, sandbox.Sandbox) error) (sandbox.Sandbox, error) {
	o.emu.Lock()
	e := o.early
	o.emu.Unlock()
	if e != nil {
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the sandbox: %w", context.Cause(ctx))
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.emu.Lock()
	taken := e != nil && o.early == e
	if taken {
		o.early = nil
	}
	o.emu.Unlock()
	if taken {
		if e.err == nil {
			o.sb = e.sb
			return e.sb, nil
		}
		if !e.cut {
			return nil, e.err
		}
	}
	sb, err := o.get(ctx, acquire, materialize)
	if err != nil {
		return nil, err
	}
	o.sb = sb
	return sb, nil
}

// get acquires and, the first time, materializes; o.mu is held.
func (o *Once) get(ctx context.Context, acquire func(context.Context) (sandbox.Sandbox, error), materialize func(context.Context, sandbox.Sandbox) error) (sandbox.Sandbox, error) {
	sb, err := acquire(ctx)
	if err != nil {
		return nil, err
	}
	if !o.done && materialize != nil {
		if err := materialize(ctx, sb); err != nil {
			return nil, err
		}
	}
	o.done = true
	return sb, nil
}

// Sandbox returns the sandbox Acquire handed out, or nil when none was
// (one Start acquired but the turn never asked for is not).
func (o *Once) Sandbox() sandbox.Sandbox {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sb
}

// mediaType guesses a media type from a file name.
func mediaType(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

func timestamp(f sandbox.FileInfo) *timestamppb.Timestamp {
	if f.ModTime.IsZero() {
		return nil
	}
	return timestamppb.New(f.ModTime)
}
