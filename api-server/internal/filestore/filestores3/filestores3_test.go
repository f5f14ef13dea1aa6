package filestores3_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/filestore/filestores3"
	"github.com/mangohq/mango/api-server/internal/filestore/filestoretest"
)

const (
	bucket = "mango-files"
	prefix = "files/"
	secret = "fake-secret-0123456789"
)

// envServe makes the test binary serve a fake S3 instead of running tests
// (see serveFake): memory is measured without the server in the process.
const envServe = "FILESTORES3_TEST_SERVE_FAKE"

func TestMain(m *testing.M) {
	if os.Getenv(envServe) == "1" {
		serveFake()
		return
	}
	os.Exit(m.Run())
}

// serveFake serves gofakes3 on 127.0.0.1 with the bucket created, prints
// its URL, and returns when stdin closes.
func serveFake() {
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		fmt.Fprintln(os.Stderr, "create bucket:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	go func() { _ = http.Serve(ln, gofakes3.New(backend).Server()) }() //nolint:gosec // a test server
	fmt.Println("http://" + ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func config(endpoint string) filestores3.Config {
	return filestores3.Config{Endpoint: endpoint, Bucket: bucket, Region: "us-east-1", AccessKeyID: "fake-key",
		SecretAccessKey: secret, PathStyle: true, Prefix: prefix}
}

// fake returns a Store on an in-process gofakes3, its backend and its
// URL.
func fake(t *testing.T) (*filestores3.Store, *s3mem.Backend, string) {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	s, err := filestores3.New(config(srv.URL))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return s, backend, srv.URL
}

// fakeProcess returns a Store on gofakes3 served by a child process.
func fakeProcess(t testing.TB) *filestores3.Store {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envServe+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the fake S3 process: %v", err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("fake S3 process: %v", err)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read the fake S3 process's URL: %v", err)
	}
	s, err := filestores3.New(config(strings.TrimSpace(line)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	filestoretest.Run(t, func(t *testing.T) filestore.Blobs {
		s, _, _ := fake(t)
		return s
	})
}

// TestStreaming is not parallel: it measures the process's heap.
func TestStreaming(t *testing.T) {
	filestoretest.Streaming(t, fakeProcess(t), 64<<20, 32<<20)
}

// BenchmarkS3200MiB reports memory and throughput for a 200 MiB blob
// against gofakes3 in a child process (go test -run ^$ -bench S3200MiB
// -benchtime 1x).
func BenchmarkS3200MiB(b *testing.B) {
	s := fakeProcess(b)
	for b.Loop() {
		f := filestoretest.Measure(b, s, "bench/200mib", 200<<20)
		b.Log(f)
		filestoretest.Report(b, f)
	}
}

func TestDeleteRemovesTheObject(t *testing.T) {
	t.Parallel()
	s, backend, _ := fake(t)
	ctx := context.Background()
	if _, err := s.Put(ctx, "a/b", bytes.NewReader(make([]byte, 9<<20)), 1<<30); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if _, err := backend.HeadObject(bucket, prefix+"a/b"); err != nil {
		t.Fatalf("the backend has no object %q after Put: %v", prefix+"a/b", err)
	}
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if obj, err := backend.HeadObject(bucket, prefix+"a/b"); !gofakes3.HasErrorCode(err, gofakes3.ErrNoSuchKey) {
		t.Errorf("backend HeadObject after Delete = %v, %v, want NoSuchKey", obj, err)
	}
	list, err := backend.ListBucket(bucket, nil, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatalf("list the bucket: %v", err)
	}
	if len(list.Contents) != 0 {
		t.Errorf("after Delete the bucket holds %d objects, want none", len(list.Contents))
	}
}

func TestFailedPutLeavesNoUpload(t *testing.T) {
	t.Parallel()
	s, backend, srvURL := fake(t)
	core, err := minio.NewCore(strings.TrimPrefix(srvURL, "http://"),
		&minio.Options{Creds: credentials.NewStaticV4("k", "s", ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	uploads := func() int {
		t.Helper()
		res, err := core.ListMultipartUploads(context.Background(), bucket, prefix, "", "", "", 100)
		if err != nil {
			t.Fatalf("list multipart uploads: %v", err)
		}
		return len(res.Uploads)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errSource := errors.New("source failed")
	// Two parts sent, then the source cancels the Put's context and fails.
	var during int
	src := io.MultiReader(bytes.NewReader(make([]byte, 17<<20)), readerFunc(func([]byte) (int, error) {
		during = uploads()
		cancel()
		return 0, errSource
	}))
	if _, err := s.Put(ctx, "k", src, 1<<30); !errors.Is(err, errSource) {
		t.Fatalf("Put from a failing source: error %v, want one wrapping %v", err, errSource)
	}
	if during != 1 {
		t.Fatalf("while the Put ran %d multipart uploads were listed, want 1", during)
	}
	if _, err := backend.HeadObject(bucket, prefix+"k"); !gofakes3.HasErrorCode(err, gofakes3.ErrNoSuchKey) {
		t.Errorf("backend HeadObject after a failed Put: %v, want NoSuchKey", err)
	}
	if n := uploads(); n != 0 {
		t.Errorf("after a failed Put %d multipart uploads remain holding parts, want none", n)
	}
}

func TestTooLargeReadsAtMostLimitPlusOne(t *testing.T) {
	t.Parallel()
	s, _, _ := fake(t)
	src := iotest.OneByteReader(bytes.NewReader(make([]byte, 20<<20)))
	if _, err := s.Put(context.Background(), "k", src, 10<<20); !errors.Is(err, filestore.ErrTooLarge) {
		t.Fatalf("Put of 20 MiB with a 10 MiB limit: error %v, want ErrTooLarge", err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	base := map[string]string{
		filestores3.EnvEndpoint:        "https://s3.eu-west-1.amazonaws.com",
		filestores3.EnvBucket:          "b",
		filestores3.EnvRegion:          "eu-west-1",
		filestores3.EnvAccessKeyID:     "AKID",
		filestores3.EnvSecretAccessKey: secret,
	}
	with := func(kv ...string) func(string) string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cfg, ok, err := filestores3.ConfigFromEnv(with())
	if err != nil || !ok {
		t.Fatalf("ConfigFromEnv of a complete configuration = %v, %v", ok, err)
	}
	if cfg.PathStyle || cfg.Bucket != "b" || cfg.Region != "eu-west-1" || cfg.SecretAccessKey != secret {
		t.Errorf("ConfigFromEnv = %+v, want bucket b, region eu-west-1, no path style, the secret", cfg)
	}
	for _, s := range []string{cfg.String(), fmt.Sprintf("%v %+v %s", cfg, cfg, cfg), logged(cfg)} {
		if strings.Contains(s, secret) {
			t.Errorf("the configuration's text shows the secret: %s", s)
		}
	}
	if cfg, _, err := filestores3.ConfigFromEnv(with(filestores3.EnvPathStyle, "true")); err != nil || !cfg.PathStyle {
		t.Errorf("%s=true: PathStyle %v, error %v, want true, nil", filestores3.EnvPathStyle, cfg.PathStyle, err)
	}
	if _, ok, err := filestores3.ConfigFromEnv(func(string) string { return "" }); ok || err != nil {
		t.Errorf("ConfigFromEnv with nothing set = %v, %v, want not configured and no error", ok, err)
	}
	for _, tt := range []struct {
		env  func(string) string
		want string // the variable the error must name
	}{
		{with(filestores3.EnvBucket, ""), filestores3.EnvBucket},
		{with(filestores3.EnvEndpoint, ""), filestores3.EnvEndpoint},
		{with(filestores3.EnvEndpoint, "s3.amazonaws.com"), filestores3.EnvEndpoint},
		{with(filestores3.EnvEndpoint, "ftp://host"), filestores3.EnvEndpoint},
		{with(filestores3.EnvEndpoint, "http://host/path"), filestores3.EnvEndpoint},
		{with(filestores3.EnvPathStyle, "sometimes"), filestores3.EnvPathStyle},
		{with(filestores3.EnvAccessKeyID, ""), filestores3.EnvAccessKeyID},
		{with(filestores3.EnvPrefix, "/abs"), filestores3.EnvPrefix},
		{with(filestores3.EnvEndpoint, "", filestores3.EnvBucket, ""), filestores3.EnvEndpoint},
	} {
		_, _, err := filestores3.ConfigFromEnv(tt.env)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ConfigFromEnv: error %v, want one naming %s", err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("ConfigFromEnv error shows the secret: %v", err)
		}
	}
}

func TestPlainHTTPEndpointIsNotTLS(t *testing.T) {
	t.Parallel()
	// Endpoints' schemes decide TLS: the conformance suite reaches its
	// http:// fake; an https:// URL at the same fake fails the handshake.
	_, _, u := fake(t)
	tls, err := filestores3.New(config(strings.Replace(u, "http://", "https://", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := tls.Check(context.Background()); err == nil {
		t.Errorf("Check over https:// against a plain HTTP server succeeded, want a TLS error")
	}
}

func logged(cfg filestores3.Config) string {
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("s3", "config", cfg)
	return buf.String()
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestListKeys: the listing holds the blobs of filestore.NewKey's form,
// in key order, page after page, each dated by its upload; other keys
// under the store's prefix are left out.
func TestListKeys(t *testing.T) {
	t.Parallel()
	s, _, _ := fake(t)
	ctx := context.Background()
	var want []string
	for range 5 {
		k := filestore.NewKey()
		if _, err := s.Put(ctx, k, strings.NewReader("x"), 1<<20); err != nil {
			t.Fatalf("Put: %v", err)
		}
		want = append(want, k)
	}
	if _, err := s.Put(ctx, "other/x", strings.NewReader("x"), 1<<20); err != nil {
		t.Fatalf("Put: %v", err)
	}
	slices.Sort(want)
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more than 3 pages of 2 for 5 blobs: %v", got)
		}
		page, err := s.ListKeys(ctx, after, 2)
		if err != nil {
			t.Fatalf("ListKeys(%q): %v", after, err)
		}
		for _, b := range page {
			if time.Since(b.Modified).Abs() > time.Minute {
				t.Errorf("%s dated %v, want about now", b.Key, b.Modified)
			}
			got = append(got, b.Key)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].Key
	}
	if !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
}
