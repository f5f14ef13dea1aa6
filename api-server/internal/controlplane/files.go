package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// Files service limits.
const (
	// ReadChunkBytes is the most data one ReadFile message carries.
	ReadChunkBytes = 1 << 20
	// PresignTTL is how long a GetFile download URL works.
	PresignTTL = 5 * time.Minute
	// OutputsDir is where a session's outputs live in its sandbox.
	OutputsDir = "/mnt/session/outputs"
	// defaultFilesMaxBytes applies when Deps.FilesMaxBytes is not set.
	defaultFilesMaxBytes = 500 << 20
)

// fileServer serves the Files service: File bytes to workers (which hold
// no storage credentials) and the outputs they publish.
type fileServer struct {
	pb.UnimplementedFilesServer
	s        *Server
	files    filestore.Blobs
	maxBytes int64
}

func newFileServer(s *Server, files filestore.Blobs, maxBytes int64) *fileServer {
	if maxBytes <= 0 {
		maxBytes = defaultFilesMaxBytes
	}
	return &fileServer{s: s, files: files, maxBytes: maxBytes}
}

func fileToPB(f *db.File) *pb.FileMeta {
	return &pb.FileMeta{Id: f.ID, Filename: f.Filename, MediaType: f.MimeType, SizeBytes: f.SizeBytes, Sha256: f.SHA256,
		CreatedAt: timestamppb.New(f.CreatedAt)}
}

var errNoFileStore = status.Error(codes.Unimplemented, "files: this api-server has no file store")

// loadFile returns the file a worker may read on behalf of sessionID:
// uploads, files of that session, and outputs (downloadable by clients
// anyway). Anything else is NOT_FOUND.
func (f *fileServer) loadFile(ctx context.Context, op, fileID, sessionID string) (*db.File, error) {
	if f.files == nil {
		return nil, errNoFileStore
	}
	if err := requireFields("file_id", fileID, "session_id", sessionID); err != nil {
		return nil, err
	}
	file, err := f.s.store.FileGet(ctx, fileID)
	if errors.Is(err, db.ErrNotFound) || (err == nil && (file.Expired(f.s.now()) ||
		(file.ScopeSessionID != "" && file.ScopeSessionID != sessionID && !file.Downloadable))) {
		return nil, status.Errorf(codes.NotFound, "%s: file %s not found", op, fileID)
	}
	if err != nil {
		return nil, f.s.fail(ctx, op, err)
	}
	return file, nil
}

// GetFile implements pb.FilesServer.
func (f *fileServer) GetFile(ctx context.Context, req *pb.GetFileRequest) (*pb.GetFileResponse, error) {
	file, err := f.loadFile(ctx, "get file", req.GetFileId(), req.GetSessionId())
	if err != nil {
		return nil, err
	}
	resp := &pb.GetFileResponse{File: fileToPB(file)}
	if p, ok := f.files.(filestore.Presigner); ok {
		u, err := p.PresignGet(ctx, file.StorageKey, PresignTTL)
		if err != nil {
			// The worker reads through ReadFile instead.
			f.s.log.WarnContext(ctx, "controlplane: presign file", "file_id", file.ID, "err", err)
		} else {
			resp.DownloadUrl = u
			resp.DownloadUrlExpiresAt = timestamppb.New(f.s.now().Add(PresignTTL))
		}
	}
	return resp, nil
}

// ReadFile implements pb.FilesServer.
func (f *fileServer) ReadFile(req *pb.ReadFileRequest, stream pb.Files_ReadFileServer) error {
	const op = "read file"
	ctx := stream.Context()
	file, err := f.loadFile(ctx, op, req.GetFileId(), req.GetSessionId())
	if err != nil {
		return err
	}
	off := req.GetOffset()
	switch {
	case off < 0:
		return invalid("offset", "must not be negative")
	case off > file.SizeBytes:
		return status.Errorf(codes.OutOfRange, "%s: offset %d is beyond the file's %d bytes", op, off, file.SizeBytes)
	}
	rc, err := f.files.Open(ctx, file.StorageKey, off)
	if err != nil {
		return f.s.storeFail(ctx, op, "file", file.ID, err)
	}
	defer func() { _ = rc.Close() }()
	return f.s.streamBlob(ctx, op, "file", file.ID, rc, file.SizeBytes-off, func(data []byte, first bool) error {
		msg := &pb.ReadFileResponse{Data: data}
		if first {
			msg.SizeBytes = file.SizeBytes
		}
		return stream.Send(msg)
	})
}

// streamBlob sends the left bytes of rc in messages of at most
// ReadChunkBytes (at least one message, even for no bytes); send is told
// which message is the first. what and id name the blob's owner in
// errors.
func (s *Server) streamBlob(ctx context.Context, op, what, id string, rc io.Reader, left int64, send func(data []byte, first bool) error) error {
	buf := make([]byte, ReadChunkBytes)
	first := true
	for first || left > 0 {
		n, err := io.ReadFull(rc, buf[:min(int64(len(buf)), left)])
		if err != nil && n == 0 && left > 0 {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("blob shorter than its %s's size: %w", what, err)
			}
			return s.storeFail(ctx, op, what, id, err)
		}
		if err := send(buf[:n], first); err != nil {
			return err
		}
		first = false
		left -= int64(n)
	}
	return nil
}

// storeFail answers a file store failure about the bytes of what (a
// "file", a "skill version") id: the cause is logged, the worker sees a
// retryable UNAVAILABLE (or NOT_FOUND for missing bytes).
func (s *Server) storeFail(ctx context.Context, op, what, id string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return s.fail(ctx, op, err)
	}
	if errors.Is(err, filestore.ErrNotFound) {
		s.log.ErrorContext(ctx, "controlplane: blob without bytes", "op", op, "of", what, "id", id, "err", err)
		return status.Errorf(codes.NotFound, "%s: the bytes of %s %s are missing", op, what, id)
	}
	s.log.ErrorContext(ctx, "controlplane: file store", "op", op, "of", what, "id", id, "err", err)
	return status.Errorf(codes.Unavailable, "%s: file store unavailable, retry", op)
}

// ListOutputs implements pb.FilesServer.
func (f *fileServer) ListOutputs(ctx context.Context, req *pb.ListOutputsRequest) (*pb.ListOutputsResponse, error) {
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	outs, err := f.s.store.OutputList(ctx, req.GetSessionId())
	if err != nil {
		return nil, f.s.fail(ctx, "list outputs", err)
	}
	resp := &pb.ListOutputsResponse{Outputs: make([]*pb.Output, 0, len(outs))}
	for i := range outs {
		resp.Outputs = append(resp.Outputs, outputToPB(&outs[i]))
	}
	return resp, nil
}

func outputToPB(f *db.File) *pb.Output {
	o := &pb.Output{Path: f.OutputPath, File: fileToPB(f)}
	if f.OutputModifiedAt != nil {
		o.ModifiedAt = timestamppb.New(*f.OutputModifiedAt)
	}
	return o
}

// checkOutputHeader validates a publish header.
func (f *fileServer) checkOutputHeader(h *pb.PublishOutputHeader) error {
	if err := requireSession(h.GetSessionId()); err != nil {
		return err
	}
	p := h.GetPath()
	rel, under := strings.CutPrefix(p, OutputsDir+"/")
	switch {
	case p == "":
		return invalid("header.path", "required")
	case !under || rel == "" || path.Clean(p) != p:
		return invalid("header.path", fmt.Sprintf("must be a clean absolute path under %s/, got %q", OutputsDir, p))
	case len(p) > 4096:
		return invalid("header.path", "longer than 4096 bytes")
	}
	if err := filestore.CheckFilename(path.Base(p)); err != nil {
		return invalid("header.path", err.Error())
	}
	switch size := h.GetSizeBytes(); {
	case size < 0:
		return invalid("header.size_bytes", "must not be negative")
	case size > f.maxBytes:
		return status.Errorf(codes.ResourceExhausted, "publish output: %d bytes exceed the file size limit of %d bytes", size, f.maxBytes)
	}
	if s := h.GetSha256(); s != "" {
		if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size || strings.ToLower(s) != s {
			return invalid("header.sha256", "must be 64 lowercase hex digits")
		}
	}
	return nil
}

// PublishOutput implements pb.FilesServer.
func (f *fileServer) PublishOutput(stream pb.Files_PublishOutputServer) error {
	const op = "publish output"
	ctx := stream.Context()
	if f.files == nil {
		return errNoFileStore
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return invalid("header", "the first message must carry the header")
	}
	if err := f.checkOutputHeader(h); err != nil {
		return err
	}
	sid, p := h.GetSessionId(), h.GetPath()
	if _, err := f.s.store.SessionGet(ctx, sid); err != nil {
		return f.s.fail(ctx, op, err)
	}
	existing, err := f.s.store.OutputGetByPath(ctx, sid, p)
	switch {
	case errors.Is(err, db.ErrNotFound):
		existing = nil
	case err != nil:
		return f.s.fail(ctx, op, err)
	}
	same := func(sha string) bool {
		return existing != nil && existing.SHA256 == sha && existing.SizeBytes == h.GetSizeBytes()
	}
	if h.GetSha256() != "" && same(h.GetSha256()) {
		return stream.SendAndClose(&pb.PublishOutputResponse{File: fileToPB(existing)})
	}

	key := filestore.NewKey()
	stored := false
	defer func() {
		if stored {
			f.s.deleteBlob(ctx, key)
		}
	}()
	hash := sha256.New()
	body := &publishReader{stream: stream}
	n, err := f.files.Put(ctx, key, io.TeeReader(body, hash), h.GetSizeBytes())
	switch {
	case body.err != nil:
		if errors.Is(body.err, errSecondHeader) {
			return invalid("data", "a header after the first message")
		}
		return body.err
	case errors.Is(err, filestore.ErrTooLarge):
		return invalid("data", fmt.Sprintf("more bytes than the header's size_bytes %d", h.GetSizeBytes()))
	case err != nil:
		return f.s.storeFail(ctx, op, "output", "", err)
	}
	stored = true
	sum := hex.EncodeToString(hash.Sum(nil))
	switch {
	case n != h.GetSizeBytes():
		return invalid("data", fmt.Sprintf("%d bytes received, the header's size_bytes is %d", n, h.GetSizeBytes()))
	case h.GetSha256() != "" && sum != h.GetSha256():
		return invalid("data", fmt.Sprintf("the bytes' sha256 is %s, the header's is %s", sum, h.GetSha256()))
	case same(sum):
		return stream.SendAndClose(&pb.PublishOutputResponse{File: fileToPB(existing)})
	}
	base := path.Base(p)
	out := &db.File{ID: ids.New(ids.File), Filename: base, MimeType: filestore.MediaType(h.GetMediaType(), base), SizeBytes: n,
		SHA256: sum, StorageKey: key, Downloadable: true, ScopeSessionID: sid, Origin: db.FileOriginOutput, OutputPath: p,
		CreatedAt: f.s.now().UTC().Truncate(time.Microsecond)}
	if m := h.GetModifiedAt(); m != nil {
		t := m.AsTime().UTC().Truncate(time.Microsecond)
		out.OutputModifiedAt = &t
	}
	orphan, err := f.s.store.OutputReplace(ctx, out)
	if err != nil {
		return f.s.fail(ctx, op, err)
	}
	stored = false // the row owns the bytes now
	if orphan != "" {
		f.s.deleteBlob(ctx, orphan)
	}
	return stream.SendAndClose(&pb.PublishOutputResponse{File: fileToPB(out), Created: true})
}

// deleteBlob removes bytes no file references; a failure leaves them in
// the store and is logged.
func (s *Server) deleteBlob(ctx context.Context, key string) {
	if s.files == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.files.Delete(ctx, key); err != nil {
		s.log.ErrorContext(ctx, "controlplane: file bytes left in the store", "storage_key", key, "err", err)
	}
}

var errSecondHeader = errors.New("header after the first message")

// publishReader reads the data messages of a PublishOutput stream,
// remembering the stream's error.
type publishReader struct {
	stream pb.Files_PublishOutputServer
	buf    []byte
	err    error
}

func (r *publishReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		msg, err := r.stream.Recv()
		if errors.Is(err, io.EOF) {
			return 0, io.EOF
		}
		if err != nil {
			r.err = err
			return 0, err
		}
		if msg.GetHeader() != nil {
			r.err = errSecondHeader
			return 0, r.err
		}
		r.buf = msg.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

var _ pb.FilesServer = (*fileServer)(nil)
