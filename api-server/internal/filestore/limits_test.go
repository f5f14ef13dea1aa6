package filestore_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/mangohq/mango/api-server/internal/filestore"
)

func TestLimitReader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		size, limit int64
		wantErr     bool
	}{
		{0, 0, false},
		{1, 0, true},
		{10, 10, false},
		{11, 10, true},
		{5, math.MaxInt64, false},
		{5, -1, true},
	} {
		src := &countingReader{r: iotest.HalfReader(bytes.NewReader(make([]byte, tt.size)))}
		n, err := io.Copy(io.Discard, filestore.LimitReader(src, tt.limit))
		if gotErr := errors.Is(err, filestore.ErrTooLarge); gotErr != tt.wantErr || (err != nil && !gotErr) {
			t.Errorf("%d bytes, limit %d: error %v, want ErrTooLarge %v", tt.size, tt.limit, err, tt.wantErr)
		}
		if !tt.wantErr && n != tt.size {
			t.Errorf("%d bytes, limit %d: read %d", tt.size, tt.limit, n)
		}
		if tt.wantErr && n > max(tt.limit, 0) {
			t.Errorf("%d bytes, limit %d: passed on %d bytes, want at most the limit", tt.size, tt.limit, n)
		}
		if tt.limit >= 0 && tt.limit < math.MaxInt64 && src.n > tt.limit+1 {
			t.Errorf("%d bytes, limit %d: read %d bytes of the source, want at most %d", tt.size, tt.limit, src.n, tt.limit+1)
		}
	}
}

func TestCheckKey(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"a", "files/0123abcd", "a-b_c.d~e!", strings.Repeat("x", filestore.MaxKeyLen)} {
		if err := filestore.CheckKey(key); err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", key, err)
		}
	}
	for _, key := range []string{"", "/a", "a b", "a\nb", "\x7f", "caf\u00e9", strings.Repeat("x", filestore.MaxKeyLen+1)} {
		if err := filestore.CheckKey(key); !errors.Is(err, filestore.ErrInvalidKey) {
			t.Errorf("CheckKey(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
