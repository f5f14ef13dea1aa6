package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// PublishChunkBytes is the most data one PublishOutput message carries.
const PublishChunkBytes = 1 << 20

// DefaultReadAttempts bounds how many times in a row a broken ReadFile
// stream is re-opened without receiving a byte in between.
const DefaultReadAttempts = 5

// Files reads and publishes the bytes of Files through the ControlPlane
// Files service (workers hold no storage credentials). Reads use the
// store's pre-signed URL when the api-server hands one out, else ReadFile,
// re-opened at the offset reached when the stream breaks, so callers see
// one continuous reader.
type Files struct {
	client   pb.FilesClient
	http     *http.Client
	attempts int
	backoff  time.Duration
}

// NewFiles returns a Files over client; hc fetches pre-signed URLs (nil:
// a client without an overall timeout, the caller's context bounds it).
func NewFiles(client pb.FilesClient, hc *http.Client) *Files {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Files{client: client, http: hc, attempts: DefaultReadAttempts, backoff: 100 * time.Millisecond}
}

// Open returns a reader of the file's bytes and its metadata; reads use
// ctx, which must outlive them. The reader fails (rather than ending
// early) when fewer or more bytes than the file's size arrive. A missing
// file is a NotFound status error.
func (f *Files) Open(ctx context.Context, sessionID, fileID string) (io.ReadCloser, *pb.FileMeta, error) {
	resp, err := f.client.GetFile(ctx, &pb.GetFileRequest{SessionId: sessionID, FileId: fileID})
	if err != nil {
		return nil, nil, fmt.Errorf("get file %s: %w", fileID, err)
	}
	meta := resp.GetFile()
	if u := resp.GetDownloadUrl(); u != "" {
		rc, err := f.openURL(ctx, u, meta.GetSizeBytes())
		if err == nil {
			return rc, meta, nil
		}
		// The URL may have expired or the store be unreachable from here:
		// read through the api-server instead.
	}
	r := &streamReader{f: f, ctx: ctx, sessionID: sessionID, fileID: fileID, size: meta.GetSizeBytes()}
	if err := r.fill(); err != nil && !errors.Is(err, io.EOF) {
		r.stop()
		return nil, nil, fmt.Errorf("read file %s: %w", fileID, err)
	}
	return r, meta, nil
}

func (f *Files) openURL(ctx context.Context, u string, size int64) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || (resp.ContentLength >= 0 && resp.ContentLength != size) {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("download url: status %d, length %d, want 200 and %d bytes", resp.StatusCode, resp.ContentLength, size)
	}
	return &sizedReader{rc: resp.Body, left: size}, nil
}

// sizedReader fails unless exactly its size arrives.
type sizedReader struct {
	rc   io.ReadCloser
	left int64
}

func (s *sizedReader) Read(p []byte) (int, error) {
	n, err := s.rc.Read(p)
	s.left -= int64(n)
	switch {
	case s.left < 0:
		return n, errors.New("download url: more bytes than the file's size")
	case errors.Is(err, io.EOF) && s.left > 0:
		return n, fmt.Errorf("download url: %d bytes missing: %w", s.left, io.ErrUnexpectedEOF)
	}
	return n, err
}

func (s *sizedReader) Close() error { return s.rc.Close() }

// retryableRead reports whether a broken ReadFile stream is worth
// re-opening: the api-server restarted, was unreachable, or the stream
// was reset.
func retryableRead(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.Internal, codes.ResourceExhausted:
		return true
	}
	return false
}

// streamReader reads a file through ReadFile streams, re-opening one that
// broke at the offset reached.
type streamReader struct {
	f         *Files
	ctx       context.Context
	sessionID string
	fileID    string
	size      int64

	off    int64
	buf    []byte
	stream pb.Files_ReadFileClient
	cancel context.CancelFunc
	fails  int
	err    error
}

func (r *streamReader) stop() {
	if r.cancel != nil {
		r.cancel()
	}
	r.stream, r.cancel = nil, nil
}

// fill receives the next chunk into buf; io.EOF once the whole file has
// arrived.
func (r *streamReader) fill() error {
	for len(r.buf) == 0 {
		if r.stream == nil {
			ctx, cancel := context.WithCancel(r.ctx)
			s, err := r.f.client.ReadFile(ctx, &pb.ReadFileRequest{SessionId: r.sessionID, FileId: r.fileID, Offset: r.off})
			if err != nil {
				cancel()
				if err := r.retry(err); err != nil {
					return err
				}
				continue
			}
			r.stream, r.cancel = s, cancel
		}
		msg, err := r.stream.Recv()
		switch {
		case errors.Is(err, io.EOF) && r.off == r.size:
			r.stop()
			r.fails = 0
			return io.EOF
		case errors.Is(err, io.EOF):
			// The stream ended short of the size: treat it as broken.
			err = status.Error(codes.Unavailable, "read stream ended early")
			fallthrough
		case err != nil:
			r.stop()
			if err := r.retry(err); err != nil {
				return err
			}
			continue
		}
		if n := int64(len(msg.GetData())); r.off+n > r.size {
			r.stop()
			return fmt.Errorf("read file %s: more bytes than its size %d", r.fileID, r.size)
		}
		r.buf = msg.GetData()
		r.off += int64(len(r.buf))
		if len(r.buf) > 0 {
			r.fails = 0
		}
	}
	return nil
}

// retry waits before the next attempt, or returns err when it is not
// retryable or the attempts are spent.
func (r *streamReader) retry(err error) error {
	r.fails++
	if !retryableRead(err) || r.fails > r.f.attempts {
		return err
	}
	t := time.NewTimer(r.f.backoff * time.Duration(r.fails))
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-t.C:
		return nil
	}
}

func (r *streamReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(r.buf) == 0 {
		if err := r.fill(); err != nil {
			r.err = err
			return 0, err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *streamReader) Close() error {
	r.stop()
	if r.err == nil {
		r.err = errors.New("read file: reader closed")
	}
	return nil
}

// Publish stores one output of a session: h, then r's bytes in chunks of
// PublishChunkBytes. When the api-server already holds the content (the
// same sha256 at the path) it answers before reading everything; Publish
// then stops sending and returns that answer.
func (f *Files) Publish(ctx context.Context, h *pb.PublishOutputHeader, r io.Reader) (*pb.PublishOutputResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := f.client.PublishOutput(ctx)
	if err != nil {
		return nil, fmt.Errorf("publish output %s: %w", h.GetPath(), err)
	}
	if err := stream.Send(&pb.PublishOutputRequest{Part: &pb.PublishOutputRequest_Header{Header: h}}); err != nil {
		return f.closePublish(stream, h)
	}
	buf := make([]byte, PublishChunkBytes)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if err := stream.Send(&pb.PublishOutputRequest{Part: &pb.PublishOutputRequest_Data{Data: buf[:n]}}); err != nil {
				// io.EOF: the server answered (or failed); its status tells.
				return f.closePublish(stream, h)
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			return f.closePublish(stream, h)
		}
		if rerr != nil {
			return nil, fmt.Errorf("publish output %s: read: %w", h.GetPath(), rerr)
		}
	}
}

func (f *Files) closePublish(stream pb.Files_PublishOutputClient, h *pb.PublishOutputHeader) (*pb.PublishOutputResponse, error) {
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, fmt.Errorf("publish output %s: %w", h.GetPath(), err)
	}
	return resp, nil
}

// ListOutputs lists the session's published outputs.
func (f *Files) ListOutputs(ctx context.Context, sessionID string) ([]*pb.Output, error) {
	resp, err := f.client.ListOutputs(ctx, &pb.ListOutputsRequest{SessionId: sessionID})
	if err != nil {
		return nil, fmt.Errorf("list outputs: %w", err)
	}
	return resp.GetOutputs(), nil
}
