package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// MaxSyncChanges bounds the changes of one SyncMemoryStore call.
const MaxSyncChanges = 10000

// memoryServer serves the SessionMemory service: a session's memory
// stores placed in its sandbox, and what the agent changed there synced
// back against the base (db.Store.MemorySyncApply decides each change).
type memoryServer struct {
	pb.UnimplementedSessionMemoryServer
	s *Server
}

// memoryResource returns the session's live memory_store resource rid, or
// NOT_FOUND.
func (m *memoryServer) memoryResource(ctx context.Context, op, sid, rid string) (*db.Resource, error) {
	if err := requireFields("session_id", sid, "resource_id", rid); err != nil {
		return nil, err
	}
	res, err := m.s.store.ResourceGet(ctx, sid, rid)
	if errors.Is(err, db.ErrNotFound) || (err == nil && res.Type != db.ResourceMemoryStore) {
		return nil, status.Errorf(codes.NotFound, "%s: session %s has no memory_store resource %s", op, sid, rid)
	}
	if err != nil {
		return nil, m.s.fail(ctx, op, err)
	}
	return res, nil
}

// storeFail answers NOT_FOUND for a memory store that was deleted, and
// fails otherwise as s.fail does.
func (m *memoryServer) storeFail(ctx context.Context, op string, res *db.Resource, err error) error {
	if errors.Is(err, db.ErrNotFound) {
		return status.Errorf(codes.NotFound, "%s: memory store %s of resource %s was deleted", op, res.MemoryStoreID, res.ID)
	}
	return m.s.fail(ctx, op, err)
}

func memoryHeader(res *db.Resource) *pb.MemoryStoreHeader {
	return &pb.MemoryStoreHeader{MemoryStoreId: res.MemoryStoreID, Name: res.StoreName, Access: res.Access, MountPath: res.MountPath}
}

// ReadMemoryStore implements pb.SessionMemoryServer: the header, then each
// memory; the memories read become the session's base for the resource.
func (m *memoryServer) ReadMemoryStore(req *pb.ReadMemoryStoreRequest, stream pb.SessionMemory_ReadMemoryStoreServer) error {
	const op = "read memory store"
	ctx := stream.Context()
	res, err := m.memoryResource(ctx, op, req.GetSessionId(), req.GetResourceId())
	if err != nil {
		return err
	}
	files, err := m.s.store.MemoryReadForSession(ctx, res.SessionID, res.ID, res.MemoryStoreID)
	if err != nil {
		return m.storeFail(ctx, op, res, err)
	}
	if err := stream.Send(&pb.ReadMemoryStoreResponse{Header: memoryHeader(res)}); err != nil {
		return err
	}
	for _, f := range files {
		msg := &pb.ReadMemoryStoreResponse{Memory: &pb.MemoryFile{Path: f.Path, Content: f.Content, ContentSha256: f.SHA256}}
		if err := stream.Send(msg); err != nil {
			return err
		}
	}
	return nil
}

// GetMemoryBase implements pb.SessionMemoryServer.
func (m *memoryServer) GetMemoryBase(ctx context.Context, req *pb.GetMemoryBaseRequest) (*pb.GetMemoryBaseResponse, error) {
	const op = "get memory base"
	res, err := m.memoryResource(ctx, op, req.GetSessionId(), req.GetResourceId())
	if err != nil {
		return nil, err
	}
	base, err := m.s.store.MemoryBase(ctx, res.SessionID, res.ID)
	if err != nil {
		return nil, m.storeFail(ctx, op, res, err)
	}
	out := &pb.GetMemoryBaseResponse{Header: memoryHeader(res), Entries: make([]*pb.MemoryBaseEntry, 0, len(base))}
	for p, sha := range base {
		out.Entries = append(out.Entries, &pb.MemoryBaseEntry{Path: p, ContentSha256: sha})
	}
	slices.SortFunc(out.Entries, func(a, b *pb.MemoryBaseEntry) int { return strings.Compare(a.GetPath(), b.GetPath()) })
	return out, nil
}

// SyncMemoryStore implements pb.SessionMemoryServer: the header names the
// resource, each following message is a change; all are decided in one
// call to the store once the stream ends.
func (m *memoryServer) SyncMemoryStore(stream pb.SessionMemory_SyncMemoryStoreServer) error {
	const op = "sync memory store"
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return invalid("header", "the first message must carry the header (session_id, resource_id)")
	}
	if err != nil {
		return err
	}
	if first.GetHeader() == nil || first.GetChange() != nil {
		return invalid("header", "the first message must carry the header and no change")
	}
	res, err := m.memoryResource(ctx, op, first.GetHeader().GetSessionId(), first.GetHeader().GetResourceId())
	if err != nil {
		return err
	}
	changes, err := recvChanges(stream)
	if err != nil {
		return err
	}
	results, err := m.s.store.MemorySyncApply(ctx, res.SessionID, res.ID, res.MemoryStoreID, res.Access == db.AccessReadOnly, changes, m.s.now())
	if err != nil {
		return m.storeFail(ctx, op, res, err)
	}
	out := &pb.SyncMemoryStoreResponse{Results: make([]*pb.MemoryChangeResult, 0, len(results))}
	for _, r := range results {
		out.Results = append(out.Results, &pb.MemoryChangeResult{Path: r.Path, Outcome: outcomeToPB(r.Outcome),
			ConflictPath: r.ConflictPath, Reason: r.Reason})
	}
	return stream.SendAndClose(out)
}

// recvChanges reads the changes that follow the header, checking that
// each names a path and that its content matches its SHA-256.
func recvChanges(stream pb.SessionMemory_SyncMemoryStoreServer) ([]db.MemoryChange, error) {
	var changes []db.MemoryChange
	for i := 0; ; i++ {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return changes, nil
		}
		if err != nil {
			return nil, err
		}
		field := fmt.Sprintf("change[%d]", i)
		c := msg.GetChange()
		switch {
		case msg.GetHeader() != nil || c == nil:
			return nil, invalid(field, "every message after the first must carry one change and no header")
		case i >= MaxSyncChanges:
			return nil, invalid(field, fmt.Sprintf("a sync carries at most %d changes; send the rest in another sync", MaxSyncChanges))
		case c.GetPath() == "":
			return nil, invalid(field+".path", "is required (relative to the store's root)")
		}
		ch := db.MemoryChange{Path: c.GetPath(), Deleted: c.GetDeleted(), BaseSHA256: c.GetBaseSha256()}
		if !ch.Deleted {
			ch.Content, ch.SHA256 = c.GetContent(), db.ContentSHA256(c.GetContent())
			if got := c.GetContentSha256(); got != "" && got != ch.SHA256 {
				return nil, invalid(field+".content_sha256", fmt.Sprintf("%s does not match the content sent (SHA-256 %s)", got, ch.SHA256))
			}
		}
		changes = append(changes, ch)
	}
}

func outcomeToPB(o string) pb.MemoryChangeOutcome {
	switch o {
	case db.MemoryApplied:
		return pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_APPLIED
	case db.MemoryUnchanged:
		return pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_UNCHANGED
	case db.MemoryConflict:
		return pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_CONFLICT
	case db.MemoryRefused:
		return pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_REFUSED
	}
	return pb.MemoryChangeOutcome_MEMORY_CHANGE_OUTCOME_UNSPECIFIED
}
