package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mangohq/mango/api-server/internal/preview"
	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// AppendTranscript implements pb.ControlPlaneServer.
func (s *Server) AppendTranscript(ctx context.Context, req *pb.AppendTranscriptRequest) (*pb.AppendTranscriptResponse, error) {
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	if len(req.GetEntries()) == 0 {
		return nil, invalid("entries", "at least one is required")
	}
	entries, err := transcriptEntries("entries", req.GetEntries())
	if err != nil {
		return nil, err
	}
	n, err := s.store.TranscriptAppend(ctx, req.GetSessionId(), entries)
	if err != nil {
		return nil, s.fail(ctx, "append transcript", err)
	}
	return &pb.AppendTranscriptResponse{Inserted: int32(n)}, nil //nolint:gosec // n <= len(entries), bounded by the message size
}

// transcriptEntries validates transcript entries (field names the request
// member in errors).
func transcriptEntries(field string, in []*pb.TranscriptEntry) ([]db.TranscriptEntry, error) {
	entries := make([]db.TranscriptEntry, 0, len(in))
	for i, e := range in {
		f := fmt.Sprintf("%s[%d]", field, i)
		if e.GetKey() == "" {
			return nil, invalid(f+".key", "required")
		}
		body, err := jsonValue(f+".body", e.GetBody())
		if err != nil {
			return nil, err
		}
		entries = append(entries, db.TranscriptEntry{Key: e.GetKey(), Body: body})
	}
	return entries, nil
}

// RecordToolJournal implements pb.ControlPlaneServer.
func (s *Server) RecordToolJournal(ctx context.Context, req *pb.RecordToolJournalRequest) (*pb.RecordToolJournalResponse, error) {
	if err := requireFields("session_id", req.GetSessionId(), "tool_use_id", req.GetToolUseId()); err != nil {
		return nil, err
	}
	body, err := jsonValue("body", req.GetBody())
	if err != nil {
		return nil, err
	}
	e, created, err := s.store.ToolJournalRecord(ctx, req.GetSessionId(), req.GetToolUseId(), body)
	if err != nil {
		return nil, s.fail(ctx, "record tool journal", err)
	}
	return &pb.RecordToolJournalResponse{Entry: journalToPB(e), Created: created}, nil
}

// GetToolJournal implements pb.ControlPlaneServer.
func (s *Server) GetToolJournal(ctx context.Context, req *pb.GetToolJournalRequest) (*pb.GetToolJournalResponse, error) {
	if err := requireFields("session_id", req.GetSessionId(), "tool_use_id", req.GetToolUseId()); err != nil {
		return nil, err
	}
	e, err := s.store.ToolJournalGet(ctx, req.GetSessionId(), req.GetToolUseId())
	if errors.Is(err, db.ErrNotFound) {
		return &pb.GetToolJournalResponse{}, nil
	}
	if err != nil {
		return nil, s.fail(ctx, "get tool journal", err)
	}
	return &pb.GetToolJournalResponse{Entry: journalToPB(e)}, nil
}

func journalToPB(e *db.ToolJournalEntry) *pb.ToolJournalEntry {
	return &pb.ToolJournalEntry{ToolUseId: e.ToolUseID, Body: string(e.Body), CreatedAt: timestamppb.New(e.CreatedAt)}
}

// PutProvisioningIntent implements pb.ControlPlaneServer.
func (s *Server) PutProvisioningIntent(ctx context.Context, req *pb.PutProvisioningIntentRequest) (*pb.PutProvisioningIntentResponse, error) {
	if err := requireFields("session_id", req.GetSessionId(), "provider", req.GetProvider(),
		"spec_hash", req.GetSpecHash(), "task_queue", req.GetTaskQueue()); err != nil {
		return nil, err
	}
	b, err := s.store.SandboxIntentPut(ctx, &db.SandboxBinding{SessionID: req.GetSessionId(), Provider: req.GetProvider(),
		SpecHash: req.GetSpecHash(), TaskQueue: req.GetTaskQueue()}, s.now())
	if err != nil {
		return nil, s.fail(ctx, "put provisioning intent", err)
	}
	return &pb.PutProvisioningIntentResponse{Binding: bindingToPB(b)}, nil
}

// PutBinding implements pb.ControlPlaneServer.
func (s *Server) PutBinding(ctx context.Context, req *pb.PutBindingRequest) (*pb.PutBindingResponse, error) {
	if err := requireFields("session_id", req.GetSessionId(), "provider", req.GetProvider(), "external_id", req.GetExternalId(),
		"spec_hash", req.GetSpecHash(), "task_queue", req.GetTaskQueue()); err != nil {
		return nil, err
	}
	b, err := s.store.SandboxBindingPut(ctx, &db.SandboxBinding{SessionID: req.GetSessionId(), Provider: req.GetProvider(),
		ExternalID: req.GetExternalId(), SpecHash: req.GetSpecHash(), TaskQueue: req.GetTaskQueue()}, s.now())
	if errors.Is(err, db.ErrConflict) {
		return nil, status.Error(codes.AlreadyExists, "put binding: a different sandbox is already bound to the session")
	}
	if err != nil {
		return nil, s.fail(ctx, "put binding", err)
	}
	return &pb.PutBindingResponse{Binding: bindingToPB(b)}, nil
}

// GetBinding implements pb.ControlPlaneServer.
func (s *Server) GetBinding(ctx context.Context, req *pb.GetBindingRequest) (*pb.GetBindingResponse, error) {
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	b, err := s.store.SandboxBindingGet(ctx, req.GetSessionId())
	if errors.Is(err, db.ErrNotFound) {
		return &pb.GetBindingResponse{}, nil
	}
	if err != nil {
		return nil, s.fail(ctx, "get binding", err)
	}
	return &pb.GetBindingResponse{Binding: bindingToPB(b)}, nil
}

// DeleteBinding implements pb.ControlPlaneServer.
func (s *Server) DeleteBinding(ctx context.Context, req *pb.DeleteBindingRequest) (*pb.DeleteBindingResponse, error) {
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	deleted, err := s.store.SandboxBindingDelete(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.fail(ctx, "delete binding", err)
	}
	return &pb.DeleteBindingResponse{Deleted: deleted}, nil
}

// ListBindings implements pb.ControlPlaneServer.
func (s *Server) ListBindings(ctx context.Context, req *pb.ListBindingsRequest) (*pb.ListBindingsResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit < 0 || limit > 1000:
		return nil, invalid("limit", "must be between 0 and 1000")
	case limit == 0:
		limit = 100
	}
	bs, err := s.store.SandboxBindingList(ctx, db.SandboxBindingListParams{Provider: req.GetProvider(), OnlyIntents: req.GetOnlyIntents(),
		AfterSessionID: req.GetAfterSessionId(), Limit: limit})
	if err != nil {
		return nil, s.fail(ctx, "list bindings", err)
	}
	resp := &pb.ListBindingsResponse{}
	for i := range bs {
		resp.Bindings = append(resp.Bindings, bindingToPB(&bs[i]))
	}
	return resp, nil
}

func bindingToPB(b *db.SandboxBinding) *pb.SandboxBinding {
	return &pb.SandboxBinding{SessionId: b.SessionID, Provider: b.Provider, ExternalId: b.ExternalID, SpecHash: b.SpecHash,
		TaskQueue: b.TaskQueue, CreatedAt: timestamppb.New(b.CreatedAt), UpdatedAt: timestamppb.New(b.UpdatedAt)}
}

// RecordWorkerHeartbeat implements pb.ControlPlaneServer.
func (s *Server) RecordWorkerHeartbeat(ctx context.Context, req *pb.RecordWorkerHeartbeatRequest) (*pb.RecordWorkerHeartbeatResponse, error) {
	if err := requireFields("worker_id", req.GetWorkerId(), "provider", req.GetProvider()); err != nil {
		return nil, err
	}
	now := s.now()
	_, err := s.store.WorkerHeartbeat(ctx, &db.Worker{ID: req.GetWorkerId(), Provider: req.GetProvider(), TaskQueues: req.GetTaskQueues(),
		Capabilities: req.GetCapabilities(), Version: req.GetVersion()}, now)
	if err != nil {
		return nil, s.fail(ctx, "record worker heartbeat", err)
	}
	return &pb.RecordWorkerHeartbeatResponse{ServerTime: timestamppb.New(now)}, nil
}

// GetInstallation implements pb.ControlPlaneServer.
func (s *Server) GetInstallation(ctx context.Context, _ *pb.GetInstallationRequest) (*pb.GetInstallationResponse, error) {
	id, err := s.store.InstallationID(ctx)
	if err != nil {
		return nil, s.fail(ctx, "get installation id", err)
	}
	return &pb.GetInstallationResponse{InstallationId: id}, nil
}

// GetTaskQueueHealth implements pb.ControlPlaneServer.
func (s *Server) GetTaskQueueHealth(ctx context.Context, req *pb.GetTaskQueueHealthRequest) (*pb.GetTaskQueueHealthResponse, error) {
	if err := requireFields("task_queue", req.GetTaskQueue()); err != nil {
		return nil, err
	}
	at, ok, err := s.store.WorkerQueueLastSeen(ctx, req.GetTaskQueue())
	if err != nil {
		return nil, s.fail(ctx, "get task queue health", err)
	}
	resp := &pb.GetTaskQueueHealthResponse{ServerTime: timestamppb.New(s.now())}
	if ok {
		resp.LastHeartbeatAt = timestamppb.New(at)
	}
	return resp, nil
}

// StreamPreviews implements pb.ControlPlaneServer. It hands every frame to
// the preview hub, which never blocks, so a worker's stream is drained as
// fast as it sends; frames are not checked against the database (they are
// ephemeral and only reach subscribers of the named session).
func (s *Server) StreamPreviews(stream pb.ControlPlane_StreamPreviewsServer) error {
	// Recv runs apart so that a drain can end the stream between messages.
	msgs, recvErr := make(chan *pb.StreamPreviewsRequest), make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- msg:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	var n int64
	var frames []preview.Frame
	for {
		var msg *pb.StreamPreviewsRequest
		select {
		case msg = <-msgs:
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&pb.StreamPreviewsResponse{FramesReceived: n})
			}
			return err
		case <-s.drain:
			return status.Error(codes.Unavailable, "stream previews: api-server is shutting down, reconnect")
		}
		n += int64(len(msg.GetFrames()))
		if s.previews == nil {
			continue
		}
		frames = frames[:0]
		for _, f := range msg.GetFrames() {
			fr := preview.Frame{SessionID: f.GetSessionId(), EventID: f.GetEventId(), EventType: f.GetEventType(),
				Text: f.GetText(), Index: f.GetIndex()}
			switch f.GetKind() {
			case pb.PreviewFrameKind_PREVIEW_FRAME_KIND_START:
				fr.Kind = preview.KindStart
			case pb.PreviewFrameKind_PREVIEW_FRAME_KIND_DELTA:
				fr.Kind = preview.KindDelta
			}
			if f.GetProducedAt() != nil {
				fr.ProducedAt = f.GetProducedAt().AsTime()
			}
			frames = append(frames, fr)
		}
		s.previews.Publish(frames)
	}
}

// FinalizeSessionDeletion implements pb.ControlPlaneServer.
func (s *Server) FinalizeSessionDeletion(ctx context.Context, req *pb.FinalizeSessionDeletionRequest) (*pb.FinalizeSessionDeletionResponse, error) {
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	deleted, orphaned, err := s.store.SessionFinalizeDeletion(ctx, req.GetSessionId())
	if errors.Is(err, db.ErrNotFenced) {
		return nil, status.Error(codes.FailedPrecondition, "finalize session deletion: "+err.Error())
	}
	if err != nil {
		return nil, s.fail(ctx, "finalize session deletion", err)
	}
	for _, key := range orphaned {
		s.deleteBlob(ctx, key)
	}
	return &pb.FinalizeSessionDeletionResponse{Deleted: deleted}, nil
}
