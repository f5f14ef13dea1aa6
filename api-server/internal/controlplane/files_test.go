package controlplane_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mangohq/mango/api-server/internal/controlplane"
	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

const filesMax = 3 << 20

// startFiles is start with a Files client on a server whose file store is
// PostgreSQL and whose file size limit is filesMax.
func startFiles(t *testing.T) (*env, pb.FilesClient, filestore.Blobs) {
	t.Helper()
	e := &env{store: dbtest.Store(t), reg: prometheus.NewRegistry(), clock: newClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	blobs := filestore.Postgres(e.store)
	conn := dial(t, controlplane.Deps{Store: e.store, Token: token, Registry: e.reg, Now: e.clock.now,
		Files: blobs, FilesMaxBytes: filesMax})
	e.client = pb.NewControlPlaneClient(conn)
	return e, pb.NewFilesClient(conn), blobs
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// publishChunks sends a header and data in chunks of chunk bytes.
func publishChunks(ctx context.Context, c pb.FilesClient, h *pb.PublishOutputHeader, data []byte, chunk int) (*pb.PublishOutputResponse, error) {
	stream, err := c.PublishOutput(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&pb.PublishOutputRequest{Part: &pb.PublishOutputRequest_Header{Header: h}}); err != nil {
		return stream.CloseAndRecv()
	}
	for len(data) > 0 {
		n := min(chunk, len(data))
		if err := stream.Send(&pb.PublishOutputRequest{Part: &pb.PublishOutputRequest_Data{Data: data[:n]}}); err != nil {
			return stream.CloseAndRecv() // the server answered early: its status
		}
		data = data[n:]
	}
	return stream.CloseAndRecv()
}

func readAll(t *testing.T, ctx context.Context, c pb.FilesClient, sid, fid string, off int64) ([]byte, int64, error) {
	t.Helper()
	stream, err := c.ReadFile(ctx, &pb.ReadFileRequest{SessionId: sid, FileId: fid, Offset: off})
	if err != nil {
		return nil, 0, err
	}
	var out []byte
	var size int64
	for i := 0; ; i++ {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, size, nil
		}
		if err != nil {
			return out, size, err
		}
		if len(msg.GetData()) > controlplane.ReadChunkBytes {
			t.Errorf("chunk of %d bytes, want at most %d", len(msg.GetData()), controlplane.ReadChunkBytes)
		}
		if i == 0 {
			size = msg.GetSizeBytes()
		}
		out = append(out, msg.GetData()...)
	}
}

// TestFilesPublishAndRead: a published output is read back whole and from
// offsets, in chunks of at most 1 MiB, with its size on the first chunk;
// past the end is OUT_OF_RANGE.
func TestFilesPublishAndRead(t *testing.T) {
	t.Parallel()
	e, files, _ := startFiles(t)
	ctx := authed(context.Background())
	sid, _ := e.session(t, false)
	data := pattern(2<<20 + 12345)
	mod := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	resp, err := publishChunks(ctx, files, &pb.PublishOutputHeader{SessionId: sid, Path: "/mnt/session/outputs/sub/data.bin",
		SizeBytes: int64(len(data)), ModifiedAt: timestamppb.New(mod)}, data, 300<<10)
	if err != nil || !resp.GetCreated() {
		t.Fatalf("publish: %v, %v; want created", resp, err)
	}
	f := resp.GetFile()
	if f.GetFilename() != "data.bin" || f.GetSizeBytes() != int64(len(data)) || f.GetSha256() != hexSHA(data) ||
		f.GetMediaType() != "application/octet-stream" {
		t.Errorf("published %v; want data.bin, %d bytes, its sha256", f, len(data))
	}
	for _, off := range []int64{0, 1, 1 << 20, int64(len(data)) - 1, int64(len(data))} {
		got, size, err := readAll(t, ctx, files, sid, f.GetId(), off)
		if err != nil || size != int64(len(data)) || !bytes.Equal(got, data[off:]) {
			t.Errorf("read from %d: %d bytes, size %d, %v; want %d bytes, size %d", off, len(got), size, err, len(data)-int(off), len(data))
		}
	}
	if _, _, err := readAll(t, ctx, files, sid, f.GetId(), int64(len(data))+1); status.Code(err) != codes.OutOfRange {
		t.Errorf("read past the end: %v, want OUT_OF_RANGE", err)
	}
	if _, _, err := readAll(t, ctx, files, sid, "file_missing", 0); status.Code(err) != codes.NotFound {
		t.Errorf("read of an unknown file: %v, want NOT_FOUND", err)
	}
	got, err := files.GetFile(ctx, &pb.GetFileRequest{SessionId: sid, FileId: f.GetId()})
	if err != nil || got.GetFile().GetSha256() != f.GetSha256() || got.GetDownloadUrl() != "" {
		t.Errorf("GetFile: %v, %v; want the file and no URL (PostgreSQL cannot presign)", got, err)
	}
	list, err := files.ListOutputs(ctx, &pb.ListOutputsRequest{SessionId: sid})
	if err != nil || len(list.GetOutputs()) != 1 || list.GetOutputs()[0].GetPath() != "/mnt/session/outputs/sub/data.bin" ||
		!list.GetOutputs()[0].GetModifiedAt().AsTime().Equal(mod) {
		t.Errorf("ListOutputs: %v, %v; want the output with its modification time", list, err)
	}
}

// TestFilesPublishIdempotentAndReplacing: the same content at a path
// returns the existing file (with a sha256 header, without reading the
// bytes); new content replaces it and frees the old bytes.
func TestFilesPublishIdempotentAndReplacing(t *testing.T) {
	t.Parallel()
	e, files, blobs := startFiles(t)
	ctx := authed(context.Background())
	sid, _ := e.session(t, false)
	const p = "/mnt/session/outputs/report.md"
	v1 := []byte("# report v1\n")
	first, err := publishChunks(ctx, files, &pb.PublishOutputHeader{SessionId: sid, Path: p, SizeBytes: int64(len(v1))}, v1, 4)
	if err != nil || !first.GetCreated() || first.GetFile().GetMediaType() != "text/markdown" {
		t.Fatalf("first publish: %v, %v", first, err)
	}
	again, err := publishChunks(ctx, files, &pb.PublishOutputHeader{SessionId: sid, Path: p, SizeBytes: int64(len(v1))}, v1, 4)
	if err != nil || again.GetCreated() || again.GetFile().GetId() != first.GetFile().GetId() {
		t.Errorf("same content again: %v, %v; want the first file, not created", again, err)
	}
	// With its sha256 in the header, no data need follow.
	known, err := publishChunks(ctx, files, &pb.PublishOutputHeader{SessionId: sid, Path: p, SizeBytes: int64(len(v1)), Sha256: hexSHA(v1)}, nil, 1)
	if err != nil || known.GetCreated() || known.GetFile().GetId() != first.GetFile().GetId() {
		t.Errorf("same sha256, no data: %v, %v; want the first file", known, err)
	}
	oldFile, err := e.store.FileGet(context.Background(), first.GetFile().GetId())
	if err != nil {
		t.Fatal(err)
	}
	v2 := []byte("# report v2, longer\n")
	second, err := publishChunks(ctx, files, &pb.PublishOutputHeader{SessionId: sid, Path: p, SizeBytes: int64(len(v2)), Sha256: hexSHA(v2),
		MediaType: "text/plain; charset=utf-8"}, v2, 100)
	if err != nil || !second.GetCreated() || second.GetFile().GetId() == first.GetFile().GetId() || second.GetFile().GetMediaType() != "text/plain" {
		t.Fatalf("new content: %v, %v; want a new text/plain file", second, err)
	}
	if _, err := e.store.FileGet(context.Background(), first.GetFile().GetId()); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("replaced file: %v, want ErrNotFound", err)
	}
	if _, err := blobs.Stat(context.Background(), oldFile.StorageKey); !errors.Is(err, filestore.ErrNotFound) {
		t.Errorf("bytes of the replaced file: %v, want ErrNotFound", err)
	}
	list, err := files.ListOutputs(ctx, &pb.ListOutputsRequest{SessionId: sid})
	if err != nil || len(list.GetOutputs()) != 1 || list.GetOutputs()[0].GetFile().GetId() != second.GetFile().GetId() {
		t.Errorf("ListOutputs: %v, %v; want only the new file", list, err)
	}
}

// TestFilesPublishRefusals: size and sha256 mismatches, the size limit,
// bad paths and unknown sessions; none leaves a file or bytes behind.
func TestFilesPublishRefusals(t *testing.T) {
	t.Parallel()
	e, files, _ := startFiles(t)
	ctx := authed(context.Background())
	sid, _ := e.session(t, false)
	data := []byte("0123456789")
	const p = "/mnt/session/outputs/x.txt"
	for _, tc := range []struct {
		name string
		h    *pb.PublishOutputHeader
		data []byte
		want codes.Code
	}{
		{"fewer bytes than size", &pb.PublishOutputHeader{SessionId: sid, Path: p, SizeBytes: 11}, data, codes.InvalidArgument},
		{"more bytes than size", &pb.PublishOutputHeader{SessionId: sid, Path: p, SizeBytes: 9}, data, codes.InvalidArgument},
		{"sha256 mismatch", &pb.PublishOutputHeader{SessionId: sid, Path: p, SizeBytes: 10, Sha256: hexSHA([]byte("other"))}, data, codes.InvalidArgument},
		{"malformed sha256", &pb.PublishOutputHeader{SessionId: sid, Path: p, SizeBytes: 10, Sha256: "xyz"}, data, codes.InvalidArgument},
		{"over the limit", &pb.PublishOutputHeader{SessionId: sid, Path: p, SizeBytes: filesMax + 1}, data, codes.ResourceExhausted},
		{"outside outputs", &pb.PublishOutputHeader{SessionId: sid, Path: "/etc/passwd", SizeBytes: 10}, data, codes.InvalidArgument},
		{"not clean", &pb.PublishOutputHeader{SessionId: sid, Path: "/mnt/session/outputs/../x", SizeBytes: 10}, data, codes.InvalidArgument},
		{"unknown session", &pb.PublishOutputHeader{SessionId: "sesn_missing", Path: p, SizeBytes: 10}, data, codes.NotFound},
	} {
		_, err := publishChunks(ctx, files, tc.h, tc.data, 3)
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if n := e.count(t, `SELECT count(*) FROM files`); n != 0 {
		t.Errorf("%d files after refused publishes, want 0", n)
	}
	if n := e.count(t, `SELECT count(*) FROM file_blob_heads`); n != 0 {
		t.Errorf("%d blobs after refused publishes, want 0", n)
	}
}
