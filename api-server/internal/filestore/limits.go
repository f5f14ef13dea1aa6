package filestore

import (
	"errors"
	"fmt"
	"io"
	"math"
)

// MaxKeyLen is the longest key a [Blobs] accepts, in bytes.
const MaxKeyLen = 200

// CheckKey returns an error wrapping ErrInvalidKey unless key is 1 to
// MaxKeyLen bytes of printable ASCII (space excluded) that does not start
// with a slash.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidKey, len(key), MaxKeyLen)
	case key[0] == '/':
		return fmt.Errorf("%w: leading slash", ErrInvalidKey)
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return fmt.Errorf("%w: byte %#x at %d is not printable ASCII", ErrInvalidKey, key[i], i)
		}
	}
	return nil
}

// LimitReader returns a reader of r that fails with ErrTooLarge once r has
// yielded more than limit bytes. It reads at most limit+1 bytes of r, so
// an oversized upload is refused without reading it all.
func LimitReader(r io.Reader, limit int64) io.Reader {
	left := int64(math.MaxInt64)
	if limit < math.MaxInt64 {
		left = max(limit, 0) + 1
	}
	return &limitReader{r: r, left: left}
}

type limitReader struct {
	r    io.Reader
	left int64 // bytes of r still allowed, one more than the limit's rest
	err  error
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left == 0 {
		// The byte past the limit arrived: report it, not the bytes.
		l.err = ErrTooLarge
		return n - 1, l.err
	}
	return n, err
}

// ErrReader is a reader of R that remembers R's first error other than
// io.EOF in Err, so a failed Put can tell a failing source (or
// ErrTooLarge) from a failing store.
type ErrReader struct {
	R   io.Reader
	Err error
}

func (e *ErrReader) Read(p []byte) (int, error) {
	n, err := e.R.Read(p)
	if err != nil && e.Err == nil && !errors.Is(err, io.EOF) {
		e.Err = err
	}
	return n, err
}
