package wire

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/filestore/filestores3"
	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/internal/testbin"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

const csvBody = "city,population\nLyon,522250\nNantes,320732\n"

func uploadCSV(t *testing.T, client anthropic.Client, name string) *anthropic.BetaFileMetadata {
	t.Helper()
	f, err := client.Beta.Files.Upload(context.Background(), anthropic.BetaFileUploadParams{
		File: anthropic.File(strings.NewReader(csvBody), name, "text/csv")})
	if err != nil {
		t.Fatalf("upload %s: %v", name, err)
	}
	return f
}

// filesClient is a ControlPlane Files client with the worker token.
func filesClient(t *testing.T, srv *testserver.Server) (pb.FilesClient, context.Context) {
	t.Helper()
	conn, ctx := workerConn(t, srv)
	return pb.NewFilesClient(conn), ctx
}

// workerConn connects to srv's ControlPlane as a worker does: the
// connection (closed when t ends) and a context carrying the worker token.
func workerConn(t *testing.T, srv *testserver.Server) (*grpc.ClientConn, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+srv.WorkerToken)
}

// publish stores an output of a session through the ControlPlane.
func publish(t *testing.T, files pb.FilesClient, ctx context.Context, sid, path string, data []byte) *pb.PublishOutputResponse {
	t.Helper()
	stream, err := files.PublishOutput(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.PublishOutputRequest{Part: &pb.PublishOutputRequest_Header{Header: &pb.PublishOutputHeader{
		SessionId: sid, Path: path, SizeBytes: int64(len(data))}}}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.PublishOutputRequest{Part: &pb.PublishOutputRequest_Data{Data: data}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		t.Fatalf("publish %s: %v", path, err)
	}
	return resp
}

func blobsOf(t *testing.T, srv *testserver.Server) (filestore.Blobs, *pgxpool.Pool) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), srv.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return filestore.Postgres(db.NewStore(pool)), pool
}

// fileBackend starts a test server on one file store and returns it with
// a Blobs reading that store directly.
type fileBackend func(t *testing.T) (*testserver.Server, filestore.Blobs)

func postgresBackend(t *testing.T) (*testserver.Server, filestore.Blobs) {
	srv := testserver.Start(t)
	blobs, _ := blobsOf(t, srv)
	return srv, blobs
}

// s3Backend serves an S3 bucket in-process (gofakes3) and points the
// server's MANGO_FILES_S3_* at it.
func s3Backend(t *testing.T) (*testserver.Server, filestore.Blobs) {
	backend := s3mem.New()
	if err := backend.CreateBucket("mango-files"); err != nil {
		t.Fatal(err)
	}
	fake := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(fake.Close)
	cfg := filestores3.Config{Endpoint: fake.URL, Bucket: "mango-files", Region: "us-east-1", AccessKeyID: "wire-key",
		SecretAccessKey: "wire-secret", PathStyle: true, Prefix: "wire/"}
	srv := testserver.Start(t, testserver.WithEnv(filestores3.EnvEndpoint, cfg.Endpoint), testserver.WithEnv(filestores3.EnvBucket, cfg.Bucket),
		testserver.WithEnv(filestores3.EnvRegion, cfg.Region), testserver.WithEnv(filestores3.EnvAccessKeyID, cfg.AccessKeyID),
		testserver.WithEnv(filestores3.EnvSecretAccessKey, cfg.SecretAccessKey), testserver.WithEnv(filestores3.EnvPathStyle, "true"),
		testserver.WithEnv(filestores3.EnvPrefix, cfg.Prefix))
	blobs, err := filestores3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv, blobs
}

// TestFilesLifecycle drives the Files API through the SDK, on PostgreSQL
// and on S3: upload, metadata, list with paging and scope_id, download of
// an output and the refusal of an upload's, delete with its bytes gone,
// and 404s.
func TestFilesLifecycle(t *testing.T) {
	t.Parallel()
	for name, backend := range map[string]fileBackend{"postgresql": postgresBackend, "s3": s3Backend} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testFilesLifecycle(t, backend)
		})
	}
}

func testFilesLifecycle(t *testing.T, backend fileBackend) {
	srv, blobs := backend(t)
	client := newClient(t, srv)

	up, md := filesUploads(t, client)

	// A session's output: scoped, downloadable, listed by scope_id.
	sid := newSession(t, srv)
	files, wctx := filesClient(t, srv)
	report := []byte("total,842982\n")
	pub := publish(t, files, wctx, sid, "/mnt/session/outputs/report.csv", report)
	out := checkSessionOutput(t, client, sid, pub.GetFile().GetId(), report)

	filesPaging(t, client, up, md, out)
	workerReadsOutput(t, files, wctx, blobs, sid, out.ID, report)
	filesDelete(t, srv, client, blobs, up)
}

// filesUploads uploads a CSV and a markdown file sent as octet-stream,
// and checks their metadata and that an upload's content is refused.
func filesUploads(t *testing.T, client anthropic.Client) (*anthropic.BetaFileMetadata, *anthropic.BetaFileMetadata) {
	t.Helper()
	ctx := context.Background()
	up := uploadCSV(t, client, "cities.csv")
	if !strings.HasPrefix(up.ID, "file_") || up.Filename != "cities.csv" || up.MimeType != "text/csv" ||
		up.SizeBytes != int64(len(csvBody)) || up.Downloadable || up.Type != "file" || up.CreatedAt.IsZero() {
		t.Errorf("uploaded = %s; want file_..., cities.csv, text/csv, %d bytes, not downloadable", up.RawJSON(), len(csvBody))
	}
	if up.Scope.ID != "" || !up.ExpiresAt.IsZero() {
		t.Errorf("upload has scope %+v / expires_at %v, want null", up.Scope, up.ExpiresAt)
	}
	got, err := client.Beta.Files.GetMetadata(ctx, up.ID, anthropic.BetaFileGetMetadataParams{})
	if err != nil {
		t.Fatalf("get metadata: %v", err)
	}
	if got.RawJSON() != up.RawJSON() {
		t.Errorf("metadata differs from the upload:\n got %s\nwant %s", got.RawJSON(), up.RawJSON())
	}
	// Media type from the extension when the part says octet-stream.
	md, err := client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(strings.NewReader("# notes\n"), "notes.md", "application/octet-stream")})
	if err != nil || md.MimeType != "text/markdown" {
		t.Errorf("upload notes.md as octet-stream: %v, mime_type %q; want text/markdown", err, md.MimeType)
	}

	// An upload's content is refused with a clear 400.
	_, err = client.Beta.Files.Download(ctx, up.ID, anthropic.BetaFileDownloadParams{})
	apiErr := apiErrorWithStatus(t, err, http.StatusBadRequest)
	if msg := apiErr.RawJSON(); !strings.Contains(msg, "only files produced by a session can be downloaded") ||
		strings.Contains(msg, "MANGO_") {
		t.Errorf("download of an upload: %s; want a message saying only session files are downloadable, naming no setting", msg)
	}
	return up, md
}

// checkSessionOutput checks the published output's metadata, its download
// and that a scope_id list finds only it.
func checkSessionOutput(t *testing.T, client anthropic.Client, sid, fileID string, report []byte) *anthropic.BetaFileMetadata {
	t.Helper()
	ctx := context.Background()
	out, err := client.Beta.Files.GetMetadata(ctx, fileID, anthropic.BetaFileGetMetadataParams{})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Downloadable || out.Scope.ID != sid || out.Scope.Type != "session" || out.Filename != "report.csv" || out.MimeType != "text/csv" {
		t.Errorf("output metadata = %s; want downloadable report.csv scoped to %s", out.RawJSON(), sid)
	}
	resp, err := client.Beta.Files.Download(ctx, out.ID, anthropic.BetaFileDownloadParams{})
	if err != nil {
		t.Fatalf("download output: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || !bytes.Equal(body, report) {
		t.Errorf("downloaded %q, %v; want %q", body, err, report)
	}
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); ct != "text/csv" ||
		!strings.Contains(cd, `attachment; filename="report.csv"`) || !strings.Contains(cd, "filename*=UTF-8''report.csv") {
		t.Errorf("download headers: Content-Type %q, Content-Disposition %q", ct, cd)
	}
	scoped, err := client.Beta.Files.List(ctx, anthropic.BetaFileListParams{ScopeID: anthropic.String(sid)})
	if err != nil || len(scoped.Data) != 1 || scoped.Data[0].ID != out.ID {
		t.Fatalf("list scope_id=%s: %v, %+v; want only the output", sid, err, scoped)
	}
	return out
}

// filesPaging: four files, pages of three, newest first; ids[] and an
// out-of-range limit.
func filesPaging(t *testing.T, client anthropic.Client, up, md, out *anthropic.BetaFileMetadata) {
	t.Helper()
	ctx := context.Background()
	var all []string
	page, err := client.Beta.Files.List(ctx, anthropic.BetaFileListParams{Limit: anthropic.Int(3)})
	for err == nil && page != nil {
		for _, f := range page.Data {
			all = append(all, f.ID)
		}
		page, err = page.GetNextPage()
	}
	if err != nil {
		t.Fatalf("list pages: %v", err)
	}
	if want := fmt.Sprint([]string{out.ID, md.ID, up.ID}); fmt.Sprint(all) != want {
		t.Errorf("paged list = %v, want %s", all, want)
	}
	byID, err := client.Beta.Files.List(ctx, anthropic.BetaFileListParams{IDs: []string{up.ID, out.ID}})
	if err != nil || len(byID.Data) != 2 {
		t.Errorf("list ids[]: %v, %d files, want 2", err, len(byID.Data))
	}
	_, err = client.Beta.Files.List(ctx, anthropic.BetaFileListParams{Limit: anthropic.Int(1001)})
	wantAPIError(t, err, http.StatusBadRequest)
}

// workerReadsOutput: the worker reads the output, from a pre-signed URL
// when the store is S3.
func workerReadsOutput(t *testing.T, files pb.FilesClient, wctx context.Context, blobs filestore.Blobs, sid, outID string, report []byte) {
	t.Helper()
	wf, err := files.GetFile(wctx, &pb.GetFileRequest{SessionId: sid, FileId: outID})
	if err != nil {
		t.Fatal(err)
	}
	if _, presigns := blobs.(filestore.Presigner); presigns != (wf.GetDownloadUrl() != "") {
		t.Errorf("GetFile download_url %q; want one exactly when the store presigns (%v)", wf.GetDownloadUrl(), presigns)
	} else if presigns {
		r, err := http.Get(wf.GetDownloadUrl())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if r.StatusCode != http.StatusOK || !bytes.Equal(b, report) {
			t.Errorf("GET download_url: %d %q, want 200 and the output", r.StatusCode, b)
		}
	}
}

// filesDelete: delete answers 200 file_deleted, then 404, and the bytes
// are gone; unknown ids are 404s.
func filesDelete(t *testing.T, srv *testserver.Server, client anthropic.Client, blobs filestore.Blobs, up *anthropic.BetaFileMetadata) {
	t.Helper()
	ctx := context.Background()
	_, pool := blobsOf(t, srv)
	var key string
	if err := pool.QueryRow(ctx, `SELECT storage_key FROM files WHERE id = $1`, up.ID).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if n, err := blobs.Stat(ctx, key); err != nil || n != int64(len(csvBody)) {
		t.Fatalf("stored bytes of the upload: %d, %v; want %d", n, err, len(csvBody))
	}
	del, err := client.Beta.Files.Delete(ctx, up.ID, anthropic.BetaFileDeleteParams{})
	if err != nil || del.ID != up.ID || del.Type != "file_deleted" {
		t.Fatalf("delete: %v, %+v", err, del)
	}
	if _, err := blobs.Stat(ctx, key); !errors.Is(err, filestore.ErrNotFound) {
		t.Errorf("bytes of a deleted file: Stat = %v, want ErrNotFound", err)
	}
	_, err = client.Beta.Files.GetMetadata(ctx, up.ID, anthropic.BetaFileGetMetadataParams{})
	if e := apiErrorWithStatus(t, err, http.StatusNotFound); !strings.Contains(e.RawJSON(), "not_found_error") {
		t.Errorf("get deleted: %s, want not_found_error", e.RawJSON())
	}
	_, err = client.Beta.Files.Delete(ctx, up.ID, anthropic.BetaFileDeleteParams{})
	wantAPIError(t, err, http.StatusNotFound)
	for _, id := range []string{"file_nope", "file_000000000000000000000000", "agent_x"} {
		_, err = client.Beta.Files.GetMetadata(ctx, id, anthropic.BetaFileGetMetadataParams{})
		wantAPIError(t, err, http.StatusNotFound)
		_, err = client.Beta.Files.Download(ctx, id, anthropic.BetaFileDownloadParams{})
		wantAPIError(t, err, http.StatusNotFound)
	}
}

// TestFilesDownloadUploads: MANGO_FILES_DOWNLOAD_UPLOADS=1 lets clients
// download their uploads.
func TestFilesDownloadUploads(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_FILES_DOWNLOAD_UPLOADS", "1"))
	client := newClient(t, srv)
	up := uploadCSV(t, client, "ünïcode cities.csv")
	resp, err := client.Beta.Files.Download(context.Background(), up.ID, anthropic.BetaFileDownloadParams{})
	if err != nil {
		t.Fatalf("download with MANGO_FILES_DOWNLOAD_UPLOADS=1: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(body) != csvBody {
		t.Errorf("downloaded %q, %v; want the upload", body, err)
	}
	if cl := resp.Header.Get("Content-Length"); cl != fmt.Sprint(len(csvBody)) {
		t.Errorf("Content-Length %q, want %d", cl, len(csvBody))
	}
	if cd := resp.Header.Get("Content-Disposition"); !strings.Contains(cd, "filename*=UTF-8''%C3%BCn%C3%AFcode%20cities.csv") {
		t.Errorf("Content-Disposition %q, want the UTF-8 name in filename*", cd)
	}
}

// TestFilesUploadLimitsAndNames: 413 beyond MANGO_FILES_MAX_BYTES (also
// when the body is streamed without a Content-Length), 400 for bad names.
func TestFilesUploadLimitsAndNames(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_FILES_MAX_BYTES", "1000"))
	client := newClient(t, srv)
	ctx := context.Background()

	ok, err := client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(bytes.NewReader(make([]byte, 1000)), "exact.bin", "")})
	if err != nil || ok.SizeBytes != 1000 || ok.MimeType != "application/octet-stream" {
		t.Fatalf("upload of exactly the limit: %v, %+v", err, ok)
	}
	_, err = client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(bytes.NewReader(make([]byte, 1001)), "big.bin", "")})
	if e := apiErrorWithStatus(t, err, http.StatusRequestEntityTooLarge); !strings.Contains(e.RawJSON(), "request_too_large") {
		t.Errorf("over the limit: %s, want request_too_large", e.RawJSON())
	}
	// The early Content-Length check does not apply to a chunked body.
	status, body := rawUpload(t, srv, "big.bin", bytes.Repeat([]byte("x"), 5000), false)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "request_too_large") {
		t.Errorf("chunked upload over the limit: %d %s, want 413 request_too_large", status, body)
	}

	// As on the hosted API, only the final path component is kept, and an
	// empty name becomes "unnamed" with the media type's extension.
	for sent, want := range map[string]string{"dir/b.csv": "b.csv", `c:\\dir\\c.csv`: "c.csv", "": "unnamed.txt"} {
		status, body := rawUpload(t, srv, sent, []byte("x"), true)
		var meta struct {
			Filename string `json:"filename"`
		}
		if status != http.StatusOK || json.Unmarshal([]byte(body), &meta) != nil || meta.Filename != want {
			t.Errorf("upload named %q: %d %s; want 200 stored as %q", sent, status, body, want)
		}
	}
	for name, want := range map[string]string{
		"bad\tname.txt":          "control characters",
		strings.Repeat("n", 256): "at most 255",
	} {
		status, body := rawUpload(t, srv, name, []byte("x"), true)
		if status != http.StatusBadRequest || !strings.Contains(body, want) || !strings.Contains(body, "invalid_request_error") {
			t.Errorf("upload named %q: %d %s; want 400 mentioning %q", name, status, body, want)
		}
	}
	// The SDK decodes these errors too.
	_, err = client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader("x"), "bad\x01.csv", "text/csv")})
	wantAPIError(t, err, http.StatusBadRequest)
	var n int
	pager := client.Beta.Files.ListAutoPaging(ctx, anthropic.BetaFileListParams{})
	for pager.Next() {
		n++
	}
	if err := pager.Err(); err != nil || n != 4 {
		t.Errorf("%d files listed (%v), want only the 4 accepted ones", n, err)
	}
	// That a refused upload left no bytes behind is seen only in the store.
	pool, err := pgxpool.New(ctx, srv.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM file_blob_heads`).Scan(&n); err == nil && n != 4 {
		t.Errorf("%d blobs stored, want only the 4 accepted files'", n)
	}
}

// rawUpload posts a multipart body by hand (a name the SDK would not send
// as is, or a body without Content-Length) and returns status and body.
func rawUpload(t *testing.T, srv *testserver.Server, name string, data []byte, withLength bool) (int, string) {
	t.Helper()
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\nContent-Type: text/plain\r\n\r\n", name)
	buf.Write(data)
	buf.WriteString("\r\n--b0undary--\r\n")
	var body io.Reader = &buf
	if !withLength {
		body = io.MultiReader(&buf) // hides the length: sent chunked
	}
	req, err := http.NewRequest(http.MethodPost, srv.BaseURL+"/v1/files", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "multipart/form-data; boundary=b0undary")
	req.Header.Set("x-api-key", srv.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("raw upload: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestFilesThroughput200MiB measures an upload and a download of a 200 MiB
// file through HTTP (a streaming client, so the heap measured, which this
// in-process server shares with the client, is the server's) and the heap
// growth during each. Skipped with -short and under the race detector.
func TestFilesThroughput200MiB(t *testing.T) {
	if testing.Short() || testbin.Race {
		t.Skip("200 MiB throughput: skipped with -short and -race")
	}
	const size = 200 << 20
	srv := testserver.Start(t, testserver.WithEnv("MANGO_FILES_DOWNLOAD_UPLOADS", "1"))

	heap := startHeapWatch()
	start := time.Now()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		part, err := mw.CreateFormFile("file", "big.bin")
		if err == nil {
			_, err = io.Copy(part, io.LimitReader(newPatternReader(), size))
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequest(http.MethodPost, srv.BaseURL+"/v1/files", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("x-api-key", srv.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		ID        string `json:"id"`
		SizeBytes int64  `json:"size_bytes"`
	}
	err = json.NewDecoder(resp.Body).Decode(&meta)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || meta.SizeBytes != size {
		t.Fatalf("upload: status %d, %+v, %v", resp.StatusCode, meta, err)
	}
	upTime, upHeap := time.Since(start), heap.stop()

	heap = startHeapWatch()
	start = time.Now()
	req, _ = http.NewRequest(http.MethodGet, srv.BaseURL+"/v1/files/"+meta.ID+"/content", nil)
	req.Header.Set("x-api-key", srv.APIKey)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	_ = resp.Body.Close()
	downTime, downHeap := time.Since(start), heap.stop()
	want := sha256.New()
	_, _ = io.Copy(want, io.LimitReader(newPatternReader(), size))
	if err != nil || n != size || !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Fatalf("download: %d bytes, %v; want the %d bytes uploaded", n, err, size)
	}
	mib := float64(size) / (1 << 20)
	t.Logf("upload 200 MiB: %.1f MiB/s (%v), heap growth %.1f MiB", mib/upTime.Seconds(), upTime.Round(time.Millisecond), float64(upHeap)/(1<<20))
	t.Logf("download 200 MiB: %.1f MiB/s (%v), heap growth %.1f MiB", mib/downTime.Seconds(), downTime.Round(time.Millisecond), float64(downHeap)/(1<<20))
	if upHeap > 64<<20 || downHeap > 64<<20 {
		t.Errorf("heap grew by %d MiB (upload) / %d MiB (download); want well under the file's 200 MiB (streaming)", upHeap>>20, downHeap>>20)
	}
}

// heapWatch samples the heap in use and keeps the peak above its start.
type heapWatch struct {
	base uint64
	peak atomic.Uint64
	done chan struct{}
	wg   sync.WaitGroup
}

func startHeapWatch() *heapWatch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w := &heapWatch{base: ms.HeapInuse, done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > w.peak.Load() {
				w.peak.Store(ms.HeapInuse)
			}
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop returns the peak growth of the heap in use.
func (w *heapWatch) stop() uint64 {
	close(w.done)
	w.wg.Wait()
	if p := w.peak.Load(); p > w.base {
		return p - w.base
	}
	return 0
}

// patternReader yields a non-repeating-looking byte stream cheaply.
type patternReader struct{ x uint64 }

func newPatternReader() *patternReader { return &patternReader{x: 88172645463325252} }

func (r *patternReader) Read(p []byte) (int, error) {
	for i := range p {
		r.x ^= r.x << 13
		r.x ^= r.x >> 7
		r.x ^= r.x << 17
		p[i] = byte(r.x)
	}
	return len(p), nil
}

// TestFilesExpiry: expires_in_seconds sets expires_at (one hour to ninety
// days, as on the hosted API); a session copy of the file expires with it.
func TestFilesExpiry(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	before := time.Now()
	f, err := client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader(csvBody), "t.csv", "text/csv"),
		ExpiresInSeconds: anthropic.Int(7200)})
	if err != nil {
		t.Fatal(err)
	}
	if d := f.ExpiresAt.Sub(before); d < 2*time.Hour-time.Minute || d > 2*time.Hour+time.Minute {
		t.Fatalf("expires_at = %v, want about two hours after the upload (%v)", f.ExpiresAt, before)
	}
	got, err := client.Beta.Files.GetMetadata(ctx, f.ID, anthropic.BetaFileGetMetadataParams{})
	if err != nil || !got.ExpiresAt.Equal(f.ExpiresAt) {
		t.Fatalf("metadata expires_at = %v (%v), want %v", got.ExpiresAt, err, f.ExpiresAt)
	}
	for _, secs := range []int64{60, 7776001} {
		_, err := client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader("x"), "x.txt", "text/plain"),
			ExpiresInSeconds: anthropic.Int(secs)})
		if e := apiErrorWithStatus(t, err, http.StatusBadRequest); !strings.Contains(e.RawJSON(), "expires_in_seconds") {
			t.Errorf("expires_in_seconds=%d: %s, want an error naming the field", secs, e.RawJSON())
		}
	}
	sess, err := newSessionWith(t, client, []anthropic.BetaSessionNewParamsResourceUnion{
		{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: f.ID}}})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := client.Beta.Files.GetMetadata(ctx, sess.Resources[0].FileID, anthropic.BetaFileGetMetadataParams{})
	if err != nil || !cp.ExpiresAt.Equal(f.ExpiresAt) {
		t.Fatalf("session copy expires_at = %v (%v), want the source's %v", cp.ExpiresAt, err, f.ExpiresAt)
	}
}
