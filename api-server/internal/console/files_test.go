package console_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/mangohq/mango/api-server/internal/testserver"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// postUpload submits the console's upload form as a browser does: the
// CSRF field, then the file part (none when filename is ""). It returns
// the status, the Location and the body.
func (v *visitor) postUpload(filename, contentType string, content []byte) (int, string, string) {
	v.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("csrf", v.csrf)
	if filename != "" {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, filename))
		h.Set("Content-Type", contentType)
		part, err := mw.CreatePart(h)
		if err != nil {
			v.t.Fatal(err)
		}
		_, _ = part.Write(content)
	}
	_ = mw.Close()
	req, err := http.NewRequest(http.MethodPost, v.srv.BaseURL+"/console/files", &body)
	if err != nil {
		v.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := v.http.Do(req)
	if err != nil {
		v.t.Fatalf("upload %q: %v", filename, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

func fileSDK(srv *testserver.Server) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(srv.BaseURL), option.WithAPIKey(srv.APIKey), option.WithMaxRetries(0))
}

var fileLocation = regexp.MustCompile(`^/console/files/(file_[A-Za-z0-9]+)$`)

// TestFilesUploadShowDelete: a file uploaded through the console's form
// reaches the API as sent, opens on its own page and is listed with its
// size, type and age; its name (HTML) is shown escaped; it says why it
// cannot be downloaded; deleting it removes it from the API.
func TestFilesUploadShowDelete(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	client := fileSDK(srv)
	ctx := context.Background()

	if status, body := v.get("/console/files"); status != http.StatusOK || !strings.Contains(body, "No files") {
		t.Fatalf("empty files page: %d, want 200 saying No files:\n%s", status, body)
	}
	const name = `<img src=x onerror=alert(1)>.txt`
	content := []byte("hello files\n")
	status, loc, body := v.postUpload(name, "text/plain", content)
	m := fileLocation.FindStringSubmatch(loc)
	if status != http.StatusSeeOther || m == nil {
		t.Fatalf("upload: %d → %q, want 303 to the file's page:\n%s", status, loc, body)
	}
	id := m[1]
	meta, err := client.Beta.Files.GetMetadata(ctx, id, anthropic.BetaFileGetMetadataParams{})
	if err != nil {
		t.Fatalf("the uploaded file through the SDK: %v", err)
	}
	if meta.Filename != name || meta.SizeBytes != int64(len(content)) || meta.MimeType != "text/plain" {
		t.Errorf("uploaded file = %s; want %q, %d bytes, text/plain", meta.RawJSON(), name, len(content))
	}

	status, page := v.get(loc)
	if status != http.StatusOK {
		t.Fatalf("file page: %d", status)
	}
	for _, want := range []string{id, "&lt;img src=x onerror=alert(1)&gt;.txt", "12 bytes", "text/plain", "uploaded by a client", "Not downloadable"} {
		if !strings.Contains(page, want) {
			t.Errorf("file page lacks %q", want)
		}
	}
	if strings.Contains(page, "<img src=x") || strings.Contains(page, "/console/files/"+id+"/download") {
		t.Errorf("file page shows the name unescaped or a download link for an upload:\n%s", page)
	}

	_, list := v.get("/console/files")
	for _, want := range []string{`href="/console/files/` + id + `"`, "&lt;img src=x onerror=alert(1)&gt;.txt", "12 bytes", "text/plain", "none (uploaded)", "ago"} {
		if !strings.Contains(list, want) {
			t.Errorf("files list lacks %q", want)
		}
	}

	status, loc, _ = v.post("/console/files/"+id+"/delete", nil)
	if status != http.StatusSeeOther || loc != "/console/files" {
		t.Fatalf("delete: %d → %q, want 303 to /console/files", status, loc)
	}
	if _, err := client.Beta.Files.GetMetadata(ctx, id, anthropic.BetaFileGetMetadataParams{}); !sdkNotFound(err) {
		t.Errorf("the deleted file through the SDK: %v, want 404", err)
	}
	if _, list = v.get("/console/files"); strings.Contains(list, id) {
		t.Errorf("the files list still shows the deleted file %s", id)
	}
	if status, page = v.get("/console/files/" + id); status != http.StatusNotFound || !strings.Contains(page, "not found") {
		t.Errorf("the deleted file's page: %d, want 404 saying not found", status)
	}
}

func sdkNotFound(err error) bool {
	var ae *anthropic.Error
	return err != nil && errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound
}

// TestFilesUploadRefused: an upload without a file, one over the
// server's limit (refused by the console before reading it, or by the
// API) and a malformed session filter each say what was wrong.
func TestFilesUploadRefused(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_FILES_MAX_BYTES", "1024"))
	v := signedIn(t, srv)
	cases := []struct {
		name     string
		filename string
		size     int
		status   int
		want     string
	}{
		{"no file", "", 0, http.StatusBadRequest, "choose a file to upload"},
		{"over the limit, said by the API", "big.bin", 4096, http.StatusRequestEntityTooLarge, "exceeds the maximum size of 1024 bytes"},
		{"over the limit, said by its length", "huge.bin", 200 << 10, http.StatusRequestEntityTooLarge, "this server takes files of at most 1.0 KiB"},
	}
	for _, tc := range cases {
		status, _, body := v.postUpload(tc.filename, "application/octet-stream", bytes.Repeat([]byte("x"), tc.size))
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d, want %d saying %q:\n%s", tc.name, status, tc.status, tc.want, body)
		}
	}
	client := fileSDK(srv)
	l, err := client.Beta.Files.List(context.Background(), anthropic.BetaFileListParams{})
	if err != nil || len(l.Data) != 0 {
		t.Errorf("files after refused uploads: %v, %d files; want none", err, len(l.Data))
	}
	status, body := v.get("/console/files?scope_id=" + url.QueryEscape("not-a-session"))
	if status != http.StatusBadRequest || !strings.Contains(body, "scope_id: must be a session id") {
		t.Errorf("files of a malformed session id: %d, want 400 naming scope_id:\n%s", status, body)
	}
}

// TestFilesOfASession: filtered by session, the list shows the session's
// copy of a file resource (not downloadable, and says why) and its output
// (with a download link that serves its bytes), and not the original
// upload; the list pages.
func TestFilesOfASession(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	v := signedIn(t, srv)
	client := fileSDK(srv)
	ctx := context.Background()
	up, err := client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader("a,b\n1,2\n"), "data.csv", "text/csv")})
	if err != nil {
		t.Fatal(err)
	}
	sid := sessionWithFile(t, client, up.ID)
	report := []byte("the report\n")
	out := publishSessionOutput(t, srv, sid, "/mnt/session/outputs/report.txt", report)

	status, body := v.get("/console/files?scope_id=" + sid)
	if status != http.StatusOK {
		t.Fatalf("files of %s: %d", sid, status)
	}
	for _, want := range []string{out, "report.txt", `href="/console/files/` + out + `/download"`, "data.csv", "a session&#39;s copy of another file",
		`href="/console/sessions/` + sid + `"`} {
		if !strings.Contains(body, want) {
			t.Errorf("files of the session lack %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, up.ID) {
		t.Errorf("files of the session show the original upload %s", up.ID)
	}
	resp := v.do("GET", "/console/files/"+out+"/download", nil)
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, report) {
		t.Errorf("download of the output: %d %q, want 200 %q", resp.StatusCode, got, report)
	}

	for i := range 25 {
		if _, err := client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
			File: anthropic.File(strings.NewReader("x"), fmt.Sprintf("page-%02d.txt", i), "text/plain")}); err != nil {
			t.Fatal(err)
		}
	}
	_, first := v.get("/console/files")
	next := regexp.MustCompile(`href="/console/files\?(page=[^"]+)"`).FindStringSubmatch(first)
	if next == nil || strings.Contains(first, "data.csv") {
		t.Fatalf("first page of 28 files: next link %v, shows the oldest (data.csv) %v; want a next page without it", next, strings.Contains(first, "data.csv"))
	}
	_, second := v.get("/console/files?" + strings.ReplaceAll(next[1], "&amp;", "&"))
	if !strings.Contains(second, up.ID) || strings.Contains(second, "page-24.txt") {
		t.Errorf("second page: want the oldest file %s and not the newest upload", up.ID)
	}
}

// publishSessionOutput stores an output of session sid as its worker does,
// through the ControlPlane, and returns the file's id.
func publishSessionOutput(t *testing.T, srv *testserver.Server, sid, path string, data []byte) string {
	t.Helper()
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+srv.WorkerToken)
	stream, err := pb.NewFilesClient(conn).PublishOutput(ctx)
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
	return resp.GetFile().GetId()
}
