// Package filestores3 is a [filestore.Blobs] on S3-compatible object
// storage (AWS S3, MinIO, Ceph RGW, R2, ...), configured by the
// MANGO_FILES_S3_* environment variables.
//
// A Put is a streaming multipart upload with parts of PartSize (so memory
// stays at about one part whatever the blob's size); S3 makes an object
// visible only when its upload completes, so a failed or cancelled Put
// leaves no object, and minio-go aborts the upload, so its parts go too
// (even when the Put's context was cancelled). Open at an
// offset is a ranged GET pinned to the object's ETag. Store also hands out
// pre-signed GET URLs ([filestore.Presigner]) so workers can fetch bytes
// without going through the api-server.
package filestores3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/mangohq/mango/api-server/internal/filestore"
)

// PartSize is the size of the parts of a multipart upload, and so about
// the memory one Put holds. minio-go's default for a stream of unknown
// length is several hundred MiB per upload.
const PartSize = 8 << 20

// smallBlob is the size up to which a Put is a single PUT request.
const smallBlob = 1 << 20

// Environment variables read by [ConfigFromEnv].
const (
	EnvEndpoint        = "MANGO_FILES_S3_ENDPOINT"
	EnvBucket          = "MANGO_FILES_S3_BUCKET"
	EnvRegion          = "MANGO_FILES_S3_REGION"
	EnvAccessKeyID     = "MANGO_FILES_S3_ACCESS_KEY_ID"
	EnvSecretAccessKey = "MANGO_FILES_S3_SECRET_ACCESS_KEY"
	EnvPathStyle       = "MANGO_FILES_S3_PATH_STYLE"
	EnvPrefix          = "MANGO_FILES_S3_PREFIX"
)

// Config says where and how to reach the bucket.
type Config struct {
	// Endpoint is the service's base URL, e.g. https://s3.eu-west-1.amazonaws.com
	// or http://127.0.0.1:9000; its scheme decides TLS.
	Endpoint string
	// Bucket holds the blobs; it must exist.
	Bucket string
	// Region is the bucket's region; empty lets the client ask the service.
	Region string
	// AccessKeyID and SecretAccessKey are static credentials. Both empty
	// uses the AWS environment variables or the instance's IAM role (IRSA
	// included).
	AccessKeyID     string
	SecretAccessKey string
	// PathStyle addresses the bucket as <endpoint>/<bucket> (MinIO and most
	// self-hosted services); false lets the client choose (virtual-hosted
	// for AWS, path style elsewhere).
	PathStyle bool
	// Prefix, when set, is put before every key (e.g. "mango/files/").
	Prefix string
}

// ConfigFromEnv reads the MANGO_FILES_S3_* variables through getenv
// (os.Getenv in production). ok is false when none of them is set: S3
// storage is not configured. Errors name the variable at fault and never
// contain the secret.
func ConfigFromEnv(getenv func(string) string) (cfg Config, ok bool, err error) {
	cfg = Config{
		Endpoint:        strings.TrimSpace(getenv(EnvEndpoint)),
		Bucket:          strings.TrimSpace(getenv(EnvBucket)),
		Region:          strings.TrimSpace(getenv(EnvRegion)),
		AccessKeyID:     strings.TrimSpace(getenv(EnvAccessKeyID)),
		SecretAccessKey: getenv(EnvSecretAccessKey),
		Prefix:          getenv(EnvPrefix),
	}
	if cfg.Endpoint == "" && cfg.Bucket == "" {
		for _, name := range []string{EnvRegion, EnvAccessKeyID, EnvSecretAccessKey, EnvPathStyle, EnvPrefix} {
			if getenv(name) != "" {
				return Config{}, false, fmt.Errorf("%s is set but %s and %s are not", name, EnvEndpoint, EnvBucket)
			}
		}
		return Config{}, false, nil
	}
	if ps := strings.TrimSpace(getenv(EnvPathStyle)); ps != "" {
		v, perr := strconv.ParseBool(ps)
		if perr != nil {
			return Config{}, false, fmt.Errorf("%s: want true or false, got %q", EnvPathStyle, ps)
		}
		cfg.PathStyle = v
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, false, err
	}
	return cfg, true, nil
}

// Validate checks the configuration, naming the variable at fault.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return fmt.Errorf("%s is required with %s", EnvEndpoint, EnvBucket)
	}
	if _, _, err := parseEndpoint(c.Endpoint); err != nil {
		return err
	}
	if c.Bucket == "" {
		return fmt.Errorf("%s is required with %s", EnvBucket, EnvEndpoint)
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return fmt.Errorf("%s and %s are set together or not at all", EnvAccessKeyID, EnvSecretAccessKey)
	}
	if strings.HasPrefix(c.Prefix, "/") {
		return fmt.Errorf("%s must not start with a slash", EnvPrefix)
	}
	return nil
}

// String describes the configuration without the secret.
func (c Config) String() string {
	return fmt.Sprintf("s3 endpoint=%s bucket=%s region=%s path_style=%t prefix=%q static_credentials=%t",
		c.Endpoint, c.Bucket, c.Region, c.PathStyle, c.Prefix, c.AccessKeyID != "")
}

// LogValue logs the configuration without the secret.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("endpoint", c.Endpoint), slog.String("bucket", c.Bucket),
		slog.String("region", c.Region), slog.Bool("path_style", c.PathStyle), slog.String("prefix", c.Prefix),
		slog.Bool("static_credentials", c.AccessKeyID != ""))
}

// parseEndpoint returns the host[:port] and whether to use TLS.
func parseEndpoint(endpoint string) (host string, secure bool, err error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false, fmt.Errorf("%s: want an http:// or https:// URL, got %q", EnvEndpoint, endpoint)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("%s: want a base URL without path, query or user info", EnvEndpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

// Store is a [filestore.Blobs] and [filestore.Presigner] on one bucket.
type Store struct {
	client *minio.Client
	bucket string
	prefix string
}

// New returns a Store for cfg. It does not contact the service; see
// [Store.Check].
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	host, secure, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	var creds *credentials.Credentials
	if cfg.AccessKeyID != "" {
		creds = credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, "")
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.IAM{}})
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(host, &minio.Options{
		Creds:        creds,
		Secure:       secure,
		Region:       cfg.Region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 client for %s: %w", EnvEndpoint, err)
	}
	return &Store{client: client, bucket: cfg.Bucket, prefix: cfg.Prefix}, nil
}

// Check verifies that the bucket exists and the credentials reach it.
func (s *Store) Check(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("check s3 bucket %s: %w", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("check s3 bucket %s: no such bucket (%s)", s.bucket, EnvBucket)
	}
	return nil
}

// Put implements [filestore.Blobs]. The key is first checked to be free
// (and the upload sent with If-None-Match: *, which services that support
// conditional writes, AWS S3 included, enforce at completion).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error) {
	if err := filestore.CheckKey(key); err != nil {
		return 0, fmt.Errorf("put blob: %w", err)
	}
	name := s.prefix + key
	switch _, err := s.client.StatObject(ctx, s.bucket, name, minio.StatObjectOptions{}); {
	case err == nil:
		return 0, fmt.Errorf("put blob: %w", filestore.ErrExists)
	case !isNotFound(err):
		return 0, fmt.Errorf("put blob: check key: %w", err)
	}
	src := &filestore.ErrReader{R: filestore.LimitReader(r, limit)}
	// Parts carry CRC32C checksums (minio-go's default) and no payload
	// signature: over plain HTTP minio-go would otherwise sign in
	// aws-chunked encoding, which some S3-compatible servers (gofakes3
	// among them) do not decode on UploadPart. Over HTTPS nothing changes.
	opts := minio.PutObjectOptions{PartSize: PartSize, ContentType: "application/octet-stream", DisableContentSha256: true}
	opts.SetMatchETagExcept("*")
	// A blob that fits in smallBlob bytes goes up in one PUT of known
	// length (an empty one could not go as a multipart upload); a larger
	// one streams as a multipart upload of unknown length.
	head := make([]byte, smallBlob)
	n, rerr := io.ReadFull(src, head)
	var body io.Reader
	size := int64(-1)
	switch rerr { //nolint:errorlint // io.ReadFull returns these unwrapped
	case io.EOF, io.ErrUnexpectedEOF:
		body, size = bytes.NewReader(head[:n]), int64(n)
	case nil:
		body = io.MultiReader(bytes.NewReader(head), src)
	default:
		return 0, fmt.Errorf("put blob: read content: %w", src.Err)
	}
	info, err := s.client.PutObject(ctx, s.bucket, name, body, size, opts)
	if err != nil {
		if src.Err != nil {
			return 0, fmt.Errorf("put blob: read content: %w", src.Err)
		}
		if isPreconditionFailed(err) {
			return 0, fmt.Errorf("put blob: %w", filestore.ErrExists)
		}
		return 0, fmt.Errorf("put blob: %w", err)
	}
	return info.Size, nil
}

// Open implements [filestore.Blobs].
func (s *Store) Open(ctx context.Context, key string, offset int64) (io.ReadCloser, error) {
	if err := filestore.CheckKey(key); err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	name := s.prefix + key
	info, err := s.client.StatObject(ctx, s.bucket, name, minio.StatObjectOptions{})
	if err != nil {
		return nil, s.mapErr("open blob", err)
	}
	if offset < 0 || offset > info.Size {
		return nil, fmt.Errorf("open blob: offset %d of %d bytes: %w", offset, info.Size, filestore.ErrOffset)
	}
	if offset == info.Size {
		return io.NopCloser(strings.NewReader("")), nil
	}
	var opts minio.GetObjectOptions
	if err := opts.SetMatchETag(info.ETag); err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	if offset > 0 {
		if err := opts.SetRange(offset, 0); err != nil {
			return nil, fmt.Errorf("open blob: %w", err)
		}
	}
	obj, err := s.client.GetObject(ctx, s.bucket, name, opts)
	if err != nil {
		return nil, s.mapErr("open blob", err)
	}
	return &objectReader{obj: obj, op: "read blob", s: s}, nil
}

// objectReader maps the errors of a minio object.
type objectReader struct {
	obj *minio.Object
	op  string
	s   *Store
}

func (o *objectReader) Read(p []byte) (int, error) {
	n, err := o.obj.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		return n, o.s.mapErr(o.op, err)
	}
	return n, err
}

func (o *objectReader) Close() error { return o.obj.Close() }

// Stat implements [filestore.Blobs].
func (s *Store) Stat(ctx context.Context, key string) (int64, error) {
	if err := filestore.CheckKey(key); err != nil {
		return 0, fmt.Errorf("stat blob: %w", err)
	}
	info, err := s.client.StatObject(ctx, s.bucket, s.prefix+key, minio.StatObjectOptions{})
	if err != nil {
		return 0, s.mapErr("stat blob", err)
	}
	return info.Size, nil
}

// Delete implements [filestore.Blobs]. On a versioned bucket the object's
// older versions stay (bucket policy decides); Mango's bucket should not
// be versioned.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := filestore.CheckKey(key); err != nil {
		return fmt.Errorf("delete blob: %w", err)
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete blob: %w", err)
	}
	return nil
}

// ListKeys implements [filestore.Lister]: the objects under the store's
// prefix and [filestore.KeyPrefix], one ListObjectsV2 request per
// thousand.
func (s *Store) ListKeys(ctx context.Context, after string, limit int) ([]filestore.BlobInfo, error) {
	ctx, stop := context.WithCancel(ctx) // ends the listing once limit is reached
	defer stop()
	opts := minio.ListObjectsOptions{Prefix: s.prefix + filestore.KeyPrefix, Recursive: true, MaxKeys: min(limit, 1000)}
	if after != "" {
		opts.StartAfter = s.prefix + after
	}
	var out []filestore.BlobInfo
	for obj := range s.client.ListObjects(ctx, s.bucket, opts) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list blobs: %w", obj.Err)
		}
		out = append(out, filestore.BlobInfo{Key: strings.TrimPrefix(obj.Key, s.prefix), Modified: obj.LastModified})
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// Walk calls fn for every object whose key begins with the store's
// prefix, in key order, with its key less the prefix, its size and a
// function that opens its bytes. It is for trees that are not blobs (the
// skills catalog, MANGO_SKILLS_CATALOG): keys are not checked. An error of
// fn ends the walk and is returned.
func (s *Store) Walk(ctx context.Context, fn func(key string, size int64, open func() (io.ReadCloser, error)) error) error {
	ctx, stop := context.WithCancel(ctx) // ends the listing when fn fails
	defer stop()
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("list s3://%s/%s: %w", s.bucket, s.prefix, obj.Err)
		}
		name := obj.Key
		open := func() (io.ReadCloser, error) {
			o, err := s.client.GetObject(ctx, s.bucket, name, minio.GetObjectOptions{})
			if err != nil {
				return nil, fmt.Errorf("read s3://%s/%s: %w", s.bucket, name, err)
			}
			return o, nil
		}
		if err := fn(strings.TrimPrefix(name, s.prefix), obj.Size, open); err != nil {
			return err
		}
	}
	return nil
}

// PresignGet implements [filestore.Presigner]. It does not check that the
// blob exists.
func (s *Store) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	if err := filestore.CheckKey(key); err != nil {
		return "", fmt.Errorf("presign blob: %w", err)
	}
	u, err := s.client.PresignedGetObject(ctx, s.bucket, s.prefix+key, ttl, nil)
	if err != nil {
		return "", fmt.Errorf("presign blob: %w", err)
	}
	return u.String(), nil
}

func (s *Store) mapErr(op string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%s: %w", op, filestore.ErrNotFound)
	}
	if isPreconditionFailed(err) {
		// The object changed under an open reader: it was deleted and put again.
		return fmt.Errorf("%s: object replaced while read: %w", op, filestore.ErrNotFound)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func isNotFound(err error) bool {
	resp := minio.ToErrorResponse(err)
	if resp.Code == minio.NoSuchBucket {
		return false // a configuration error, not a missing blob
	}
	return resp.StatusCode == http.StatusNotFound || resp.Code == minio.NoSuchKey || resp.Code == "NoSuchUpload"
}

func isPreconditionFailed(err error) bool {
	resp := minio.ToErrorResponse(err)
	return resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed"
}

var (
	_ filestore.Blobs     = (*Store)(nil)
	_ filestore.Presigner = (*Store)(nil)
)
