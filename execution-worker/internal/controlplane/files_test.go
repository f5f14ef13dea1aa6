package controlplane_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	"github.com/mangohq/mango/execution-worker/internal/cptest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// breaker breaks ReadFile streams: every stream fails with UNAVAILABLE
// after its at-th message, until breaks are spent.
type breaker struct {
	at     atomic.Int32
	left   atomic.Int32
	broken atomic.Int32
	opened atomic.Int32
}

func (b *breaker) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/ReadFile") {
		return s, err
	}
	b.opened.Add(1)
	return &breakingStream{ClientStream: s, b: b}, nil
}

type breakingStream struct {
	grpc.ClientStream
	b    *breaker
	recv int
}

func (s *breakingStream) RecvMsg(m any) error {
	if s.recv == int(s.b.at.Load()) && s.b.left.Add(-1) >= 0 {
		s.b.broken.Add(1)
		return status.Error(codes.Unavailable, "injected: connection reset")
	}
	s.recv++
	return s.ClientStream.RecvMsg(m)
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestFilesPublishOpenResume: a published output reads back whole through
// ReadFile streams broken mid-way (re-opened at the offset reached), the
// same content publishes idempotently, and an unknown file is NOT_FOUND.
func TestFilesPublishOpenResume(t *testing.T) {
	t.Parallel()
	srv := cptest.Start(t)
	b := &breaker{}
	c, err := controlplane.Dial(srv.GRPCAddr, srv.WorkerToken, grpc.WithStreamInterceptor(b.intercept))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	files := controlplane.NewFiles(c.FilesClient, nil)
	ctx := context.Background()
	sid := srv.NewSession(t, "")

	data := make([]byte, 5<<20+777)
	for i := range data {
		data[i] = byte(i % 253)
	}
	h := &pb.PublishOutputHeader{SessionId: sid, Path: "/mnt/session/outputs/big.bin", SizeBytes: int64(len(data))}
	resp, err := files.Publish(ctx, h, bytes.NewReader(data))
	if err != nil || !resp.GetCreated() || resp.GetFile().GetSha256() != sum(data) {
		t.Fatalf("publish: %v, %v; want created with the content's sha256", resp, err)
	}
	h.Sha256 = sum(data)
	again, err := files.Publish(ctx, h, bytes.NewReader(data))
	if err != nil || again.GetCreated() || again.GetFile().GetId() != resp.GetFile().GetId() {
		t.Errorf("publish again: %v, %v; want the same file, not created", again, err)
	}
	outs, err := files.ListOutputs(ctx, sid)
	if err != nil || len(outs) != 1 || outs[0].GetFile().GetId() != resp.GetFile().GetId() {
		t.Errorf("ListOutputs: %v, %v; want the one output", outs, err)
	}

	b.at.Store(2)
	b.left.Store(3)
	rc, meta, err := files.Open(ctx, sid, resp.GetFile().GetId())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	got, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || !bytes.Equal(got, data) || meta.GetSizeBytes() != int64(len(data)) {
		t.Errorf("read %d bytes, %v; want the %d bytes published", len(got), err, len(data))
	}
	if b.broken.Load() != 3 || b.opened.Load() != 4 {
		t.Errorf("%d breaks over %d streams, want 3 breaks and 4 streams", b.broken.Load(), b.opened.Load())
	}

	// Streams that break before any byte, more times in a row than the
	// attempts allow: the reader fails.
	b.at.Store(0)
	b.left.Store(1000)
	_, _, err = files.Open(ctx, sid, resp.GetFile().GetId())
	if status.Code(err) != codes.Unavailable {
		t.Errorf("open with every stream broken at once: %v, want UNAVAILABLE", err)
	}
	b.left.Store(0)

	if _, _, err := files.Open(ctx, sid, "file_000000000000000000000000"); status.Code(err) != codes.NotFound {
		t.Errorf("open of an unknown file: %v, want NOT_FOUND", err)
	}
	bad := &pb.PublishOutputHeader{SessionId: sid, Path: "/mnt/session/outputs/short.bin", SizeBytes: 10}
	if _, err := files.Publish(ctx, bad, strings.NewReader("123")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("publish of fewer bytes than declared: %v, want INVALID_ARGUMENT", err)
	}
}

// presigning adds a download URL to GetFile answers.
type presigning struct {
	pb.FilesClient
	url   string
	reads atomic.Int32
}

func (p *presigning) GetFile(ctx context.Context, in *pb.GetFileRequest, opts ...grpc.CallOption) (*pb.GetFileResponse, error) {
	resp, err := p.FilesClient.GetFile(ctx, in, opts...)
	if err == nil {
		resp.DownloadUrl = p.url
	}
	return resp, err
}

func (p *presigning) ReadFile(ctx context.Context, in *pb.ReadFileRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.ReadFileResponse], error) {
	p.reads.Add(1)
	return p.FilesClient.ReadFile(ctx, in, opts...)
}

// TestFilesOpenDownloadURL: a pre-signed URL is read directly; one that
// answers the wrong length falls back to ReadFile.
func TestFilesOpenDownloadURL(t *testing.T) {
	t.Parallel()
	srv := cptest.Start(t)
	c, err := controlplane.Dial(srv.GRPCAddr, srv.WorkerToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	sid := srv.NewSession(t, "")
	data := []byte("from the bucket\n")
	resp, err := controlplane.NewFiles(c.FilesClient, nil).Publish(ctx,
		&pb.PublishOutputHeader{SessionId: sid, Path: "/mnt/session/outputs/a.txt", SizeBytes: int64(len(data))}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Value
	served.Store(data)
	bucket := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b := served.Load().([]byte)
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	}))
	t.Cleanup(bucket.Close)
	p := &presigning{FilesClient: c.FilesClient, url: bucket.URL + "/blob?sig=x"}
	files := controlplane.NewFiles(p, bucket.Client())

	rc, _, err := files.Open(ctx, sid, resp.GetFile().GetId())
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || !bytes.Equal(got, data) || p.reads.Load() != 0 {
		t.Errorf("via URL: %q, %v, %d ReadFile calls; want the bytes and no ReadFile", got, err, p.reads.Load())
	}
	served.Store([]byte("truncated"))
	rc, _, err = files.Open(ctx, sid, resp.GetFile().GetId())
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || !bytes.Equal(got, data) || p.reads.Load() != 1 {
		t.Errorf("URL with the wrong length: %q, %v, %d ReadFile calls; want the bytes through ReadFile", got, err, p.reads.Load())
	}
}
