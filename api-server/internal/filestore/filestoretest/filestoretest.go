// Package filestoretest is the conformance suite every [filestore.Blobs]
// runs: [Run] checks the contract (round trips, offsets, limits, failed
// and cancelled Puts leaving nothing, write-once keys, deletion,
// concurrency), [Streaming] that a Put and a read hold bounded memory, and
// [Measure] reports memory and throughput figures for a large blob.
package filestoretest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/api-server/internal/filestore"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// noLimit is a Put limit no test reaches.
const noLimit = 1 << 40

// Run runs the suite against stores made by newBlobs, one per subtest (a
// store may be shared, as long as keys from different calls of newBlobs do
// not collide: the suite's keys are fixed names).
func Run(t *testing.T, newBlobs func(t *testing.T) filestore.Blobs) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, b filestore.Blobs)
	}{
		{"RoundTrip", testRoundTrip},
		{"OpenAtOffsets", testOpenAtOffsets},
		{"Missing", testMissing},
		{"TooLarge", testTooLarge},
		{"FailingReader", testFailingReader},
		{"CancelledPut", testCancelledPut},
		{"WriteOnce", testWriteOnce},
		{"Delete", testDelete},
		{"ConcurrentPuts", testConcurrentPuts},
		{"InvalidKeys", testInvalidKeys},
		{"Presign", testPresign},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newBlobs(t))
		})
	}
}

func testRoundTrip(t *testing.T, b filestore.Blobs) {
	for _, size := range []int{0, 5, 20 * mib} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			key := fmt.Sprintf("roundtrip/%d", size)
			want := randomBytes(t, size)
			put(t, b, key, want)
			if got := stat(t, b, key); got != int64(size) {
				t.Errorf("Stat(%q) = %d, want %d", key, got, size)
			}
			if got := readAll(t, b, key, 0); !bytes.Equal(got, want) {
				t.Errorf("Open(%q, 0) read %d bytes differing from the %d put (first difference at %d)",
					key, len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

func testOpenAtOffsets(t *testing.T, b filestore.Blobs) {
	const key = "offsets/blob"
	size := 3*mib + 123
	want := randomBytes(t, size)
	put(t, b, key, want)
	for _, off := range []int{0, 1, size / 2, mib - 1, mib, mib + 1, 2 * mib, size - 1, size} {
		got := readAll(t, b, key, int64(off))
		if !bytes.Equal(got, want[off:]) {
			t.Errorf("Open(%q, %d) read %d bytes, want the %d bytes from the offset (first difference at %d)",
				key, off, len(got), size-off, firstDiff(got, want[off:]))
		}
	}
	for _, off := range []int64{int64(size) + 1, int64(size) + 10*mib} {
		r, err := b.Open(context.Background(), key, off)
		if err == nil {
			_ = r.Close()
		}
		if !errors.Is(err, filestore.ErrOffset) {
			t.Errorf("Open(%q, %d) beyond the size %d: error %v, want ErrOffset", key, off, size, err)
		}
	}
}

func testMissing(t *testing.T, b filestore.Blobs) {
	const key = "missing/blob"
	ctx := context.Background()
	if r, err := b.Open(ctx, key, 0); !errors.Is(err, filestore.ErrNotFound) {
		if err == nil {
			_ = r.Close()
		}
		t.Errorf("Open(%q) of a missing key: error %v, want ErrNotFound", key, err)
	}
	if n, err := b.Stat(ctx, key); !errors.Is(err, filestore.ErrNotFound) {
		t.Errorf("Stat(%q) of a missing key = %d, %v, want ErrNotFound", key, n, err)
	}
}

func testTooLarge(t *testing.T, b filestore.Blobs) {
	ctx := context.Background()
	const limit = 1000
	atLimit := randomBytes(t, limit)
	if n, err := b.Put(ctx, "limit/exact", bytes.NewReader(atLimit), limit); err != nil || n != limit {
		t.Fatalf("Put of exactly the limit %d = %d, %v, want %d, nil", limit, n, err, limit)
	}
	if got := readAll(t, b, "limit/exact", 0); !bytes.Equal(got, atLimit) {
		t.Errorf("blob of exactly the limit read back %d bytes differing from the put", len(got))
	}
	for _, size := range []int{limit + 1, 10 * mib} {
		key := fmt.Sprintf("limit/over-%d", size)
		src := &countingReader{r: bytes.NewReader(randomBytes(t, size))}
		n, err := b.Put(ctx, key, src, limit)
		if !errors.Is(err, filestore.ErrTooLarge) {
			t.Errorf("Put of %d bytes with limit %d = %d, %v, want ErrTooLarge", size, limit, n, err)
		}
		if src.n > limit+1 {
			t.Errorf("Put with limit %d read %d bytes of its source, want at most %d", limit, src.n, limit+1)
		}
		assertAbsent(t, b, key)
		// The key is free again.
		put(t, b, key, atLimit)
	}
}

// errSource is the error a failing source returns.
var errSource = errors.New("source failed")

func testFailingReader(t *testing.T, b filestore.Blobs) {
	ctx := context.Background()
	// Past the first chunk and part sizes, so a multipart upload has begun.
	for _, after := range []int{0, 100, 9*mib + 5} {
		key := fmt.Sprintf("failing/%d", after)
		src := io.MultiReader(bytes.NewReader(randomBytes(t, after)), &failingReader{err: errSource})
		n, err := b.Put(ctx, key, src, noLimit)
		if !errors.Is(err, errSource) {
			t.Errorf("Put from a source failing after %d bytes = %d, %v, want an error wrapping %v", after, n, err, errSource)
		}
		assertAbsent(t, b, key)
		want := randomBytes(t, 2*mib+1)
		put(t, b, key, want)
		if got := readAll(t, b, key, 0); !bytes.Equal(got, want) {
			t.Errorf("Put after a failed Put of %q stored %d bytes differing from the %d put", key, len(got), len(want))
		}
	}
}

func testCancelledPut(t *testing.T, b filestore.Blobs) {
	const key = "cancelled/blob"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The source cancels the Put's context once 9 MiB are read, then keeps
	// yielding bytes, as a client's upload body would.
	src := &cancellingReader{r: io.LimitReader(rand.Reader, 40*mib), after: 9 * mib, cancel: cancel}
	n, err := b.Put(ctx, key, src, noLimit)
	if err == nil {
		t.Fatalf("Put whose context was cancelled midway = %d, nil, want an error", n)
	}
	if !errors.Is(err, context.Canceled) {
		t.Logf("Put whose context was cancelled midway: %v (does not wrap context.Canceled)", err)
	}
	assertAbsent(t, b, key)
	want := randomBytes(t, mib+7)
	put(t, b, key, want)
	if got := readAll(t, b, key, 0); !bytes.Equal(got, want) {
		t.Errorf("Put after a cancelled Put of %q stored %d bytes differing from the %d put", key, len(got), len(want))
	}
}

func testWriteOnce(t *testing.T, b filestore.Blobs) {
	const key = "once/blob"
	first := randomBytes(t, 1000)
	put(t, b, key, first)
	n, err := b.Put(context.Background(), key, bytes.NewReader(randomBytes(t, 10)), noLimit)
	if !errors.Is(err, filestore.ErrExists) {
		t.Errorf("second Put of %q = %d, %v, want ErrExists", key, n, err)
	}
	if got := readAll(t, b, key, 0); !bytes.Equal(got, first) {
		t.Errorf("after a refused second Put, %q reads %d bytes, want the first Put's %d", key, len(got), len(first))
	}
}

func testDelete(t *testing.T, b filestore.Blobs) {
	ctx := context.Background()
	const key = "delete/blob"
	put(t, b, key, randomBytes(t, 2*mib+3))
	if err := b.Delete(ctx, key); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
	assertAbsent(t, b, key)
	if err := b.Delete(ctx, key); err != nil {
		t.Errorf("second Delete(%q) = %v, want nil", key, err)
	}
	if err := b.Delete(ctx, "delete/never-put"); err != nil {
		t.Errorf("Delete of a key never put = %v, want nil", err)
	}
	want := randomBytes(t, 10)
	put(t, b, key, want)
	if got := readAll(t, b, key, 0); !bytes.Equal(got, want) {
		t.Errorf("Put after Delete of %q reads %q, want %q", key, got, want)
	}
}

func testConcurrentPuts(t *testing.T, b filestore.Blobs) {
	const n = 8
	blobs := make([][]byte, n)
	for i := range blobs {
		blobs[i] = randomBytes(t, mib+i*100*kib)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = b.Put(context.Background(), fmt.Sprintf("concurrent/%d", i), bytes.NewReader(blobs[i]), noLimit)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Put %d: %v", i, err)
			continue
		}
		if got := readAll(t, b, fmt.Sprintf("concurrent/%d", i), 0); !bytes.Equal(got, blobs[i]) {
			t.Errorf("concurrent Put %d reads %d bytes differing from the %d put", i, len(got), len(blobs[i]))
		}
	}
}

func testInvalidKeys(t *testing.T, b filestore.Blobs) {
	ctx := context.Background()
	for _, key := range []string{"", "/leading", "with space", "tab\t", "caf\u00e9", strings.Repeat("k", filestore.MaxKeyLen+1)} {
		if _, err := b.Put(ctx, key, strings.NewReader("x"), noLimit); !errors.Is(err, filestore.ErrInvalidKey) {
			t.Errorf("Put(%q): error %v, want ErrInvalidKey", key, err)
		}
		if _, err := b.Stat(ctx, key); !errors.Is(err, filestore.ErrInvalidKey) {
			t.Errorf("Stat(%q): error %v, want ErrInvalidKey", key, err)
		}
		if r, err := b.Open(ctx, key, 0); !errors.Is(err, filestore.ErrInvalidKey) {
			if err == nil {
				_ = r.Close()
			}
			t.Errorf("Open(%q): error %v, want ErrInvalidKey", key, err)
		}
		if err := b.Delete(ctx, key); !errors.Is(err, filestore.ErrInvalidKey) {
			t.Errorf("Delete(%q): error %v, want ErrInvalidKey", key, err)
		}
	}
	long := strings.Repeat("k", filestore.MaxKeyLen)
	put(t, b, long, []byte("longest key"))
	if got := readAll(t, b, long, 0); string(got) != "longest key" {
		t.Errorf("blob under a %d-byte key reads %q, want %q", len(long), got, "longest key")
	}
}

func testPresign(t *testing.T, b filestore.Blobs) {
	p, ok := b.(filestore.Presigner)
	if !ok {
		t.Skip("store does not implement filestore.Presigner")
	}
	const key = "presign/blob"
	want := randomBytes(t, 3*mib)
	put(t, b, key, want)
	u, err := p.PresignGet(context.Background(), key, time.Minute)
	if err != nil {
		t.Fatalf("PresignGet(%q): %v", key, err)
	}
	resp, err := http.Get(u) //nolint:noctx // a test GET of a URL the store made
	if err != nil {
		t.Fatalf("GET the pre-signed URL: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read the pre-signed URL's body: %v", err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
		t.Errorf("GET the pre-signed URL: status %d and %d bytes, want 200 and the %d bytes put", resp.StatusCode, len(got), len(want))
	}
}

// put stores data under key, failing the test on error.
func put(t *testing.T, b filestore.Blobs, key string, data []byte) {
	t.Helper()
	n, err := b.Put(context.Background(), key, bytes.NewReader(data), noLimit)
	if err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
	if n != int64(len(data)) {
		t.Fatalf("Put(%q, %d bytes) = %d", key, len(data), n)
	}
}

func stat(t *testing.T, b filestore.Blobs, key string) int64 {
	t.Helper()
	n, err := b.Stat(context.Background(), key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	return n
}

// readAll reads the blob under key from offset.
func readAll(t *testing.T, b filestore.Blobs, key string, offset int64) []byte {
	t.Helper()
	r, err := b.Open(context.Background(), key, offset)
	if err != nil {
		t.Fatalf("Open(%q, %d): %v", key, offset, err)
	}
	defer func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close the reader of %q: %v", key, err)
		}
	}()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %q from %d: %v", key, offset, err)
	}
	return got
}

// assertAbsent checks that key holds no visible blob.
func assertAbsent(t *testing.T, b filestore.Blobs, key string) {
	t.Helper()
	ctx := context.Background()
	if n, err := b.Stat(ctx, key); !errors.Is(err, filestore.ErrNotFound) {
		t.Errorf("Stat(%q) = %d, %v, want ErrNotFound", key, n, err)
	}
	r, err := b.Open(ctx, key, 0)
	if err == nil {
		_ = r.Close()
	}
	if !errors.Is(err, filestore.ErrNotFound) {
		t.Errorf("Open(%q): error %v, want ErrNotFound", key, err)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return b
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

type failingReader struct{ err error }

func (f *failingReader) Read([]byte) (int, error) { return 0, f.err }

type cancellingReader struct {
	r      io.Reader
	after  int
	n      int
	cancel context.CancelFunc
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	if c.n >= c.after {
		c.cancel()
	}
	return n, err
}
