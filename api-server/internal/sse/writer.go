// Package sse writes Server-Sent Events: frames (WriteFrame) whose fields
// stay what they are whatever they hold, and a Writer that serves one
// long-lived stream, owning the connection on HTTP/1.1 (Open) and bounding
// each write.
package sse

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

// WriteTimeout bounds one write to a stream's client: a client that
// stops reading is cut instead of holding the stream forever.
const WriteTimeout = 30 * time.Second

// CutComment is the comment a stream ends with when the server cuts it; the
// client reconnects with Last-Event-ID and misses nothing.
const CutComment = ": stream cut: this client fell behind the session's events; reconnect with Last-Event-ID to resume\n\n"

// EndedComment is the comment a stream ends with when the server cannot go
// on serving it (its session's log could not be read).
const EndedComment = ": stream ended by the server; reconnect with Last-Event-ID to resume\n\n"

// Writer writes a stream's frames, each write bounded by
// WriteTimeout. On HTTP/1.1 it owns the connection: Open
// hijacks it after the headers, so an open stream holds no buffers of the
// HTTP server's (about 10 KB a connection), only a small goroutine that
// notices the client leaving; its writes are chunks, one writev each.
// Where hijacking is not possible (HTTP/2, test recorders) it writes
// through the HTTP server's response. Scratch encodes the frames only this
// stream writes (previews, replayed events); committed events arrive
// encoded, shared by the session's streams.
type Writer struct {
	// The hijacked connection and the pieces of the next chunk, or nil
	// and the HTTP server's writer.
	conn    net.Conn
	pending net.Buffers
	size    int
	vec     net.Buffers
	head    [20]byte

	w  io.Writer
	rc *http.ResponseController

	scratch bytes.Buffer
	failed  error
	// deadline is the write deadline set last; it is moved on at most once
	// a second (setting it costs more than a write), and no more once the
	// stream is ending (final).
	deadline time.Time
	final    bool
}

// Open answers 200 with the headers set so far and returns the
// context that ends when the client goes away, the stream's writer, and
// whether it hijacked the connection (then the stream may outlive the
// handler and its request).
func Open(c echo.Context) (context.Context, *Writer, bool) {
	resp := c.Response()
	rc := http.NewResponseController(resp)
	var conn net.Conn
	var brw *bufio.ReadWriter
	err := errors.ErrUnsupported // an HTTP/1.0 client cannot read chunks
	if c.Request().ProtoAtLeast(1, 1) {
		conn, brw, err = rc.Hijack()
	}
	if err != nil {
		resp.Header().Set("Connection", "keep-alive")
		resp.WriteHeader(http.StatusOK)
		return c.Request().Context(), &Writer{w: resp, rc: rc}, false
	}
	// The request was read whole (a GET has no body); what the client
	// pipelined after it is never answered: the stream ends the connection.
	h := resp.Header()
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("Transfer-Encoding", "chunked")
	h.Set("Connection", "close")
	h.Del("Content-Length")
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 200 OK\r\n")
	_ = h.Write(&b)
	b.WriteString("\r\n")
	s := &Writer{conn: conn}
	s.extend()
	if _, err := conn.Write(b.Bytes()); err != nil {
		s.failed = err
	}
	// Release the connection's read and write buffers (4 KB each): the
	// HTTP server keeps pointers to them until the handler returns, but
	// after a hijack they are the handler's and nothing else uses them.
	*brw.Reader, *brw.Writer = bufio.Reader{}, bufio.Writer{}
	resp.Status, resp.Committed = http.StatusOK, true // as the access log and metrics see it
	// Clients send nothing more: a read returns when the client closes the
	// connection (or it breaks), which ends the stream. The request's
	// context ends with the handler, which returns first.
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Request().Context()))
	go func() {
		var one [1]byte
		for {
			if _, err := conn.Read(one[:]); err != nil {
				cancel()
				return
			}
		}
	}()
	return ctx, s, true
}

// extend moves the write deadline to WriteTimeout from now, unless
// it was moved less than a second ago.
func (s *Writer) extend() {
	now := time.Now()
	if s.final || s.deadline.Sub(now) > WriteTimeout-time.Second {
		return
	}
	s.setDeadline(now.Add(WriteTimeout))
}

func (s *Writer) setDeadline(t time.Time) {
	s.deadline = t
	if s.conn != nil {
		_ = s.conn.SetWriteDeadline(s.deadline)
		return
	}
	// Not every ResponseWriter supports deadlines (tests' recorders do not).
	_ = s.rc.SetWriteDeadline(s.deadline)
}

// Write adds b to what the next Flush sends. b must not change until then
// (frames are immutable; Scratch is copied).
func (s *Writer) Write(b []byte) error {
	if s.failed != nil {
		return s.failed
	}
	if s.conn != nil {
		s.pending = append(s.pending, b)
		s.size += len(b)
		return nil
	}
	s.extend()
	_, s.failed = s.w.Write(b)
	return s.failed
}

// Scratch is where the frames only this stream writes are encoded before
// WriteScratch.
func (s *Writer) Scratch() *bytes.Buffer { return &s.scratch }

// WriteScratch writes and empties Scratch, releasing a large one.
func (s *Writer) WriteScratch() error {
	b := s.scratch.Bytes()
	if s.conn != nil {
		b = bytes.Clone(b)
	}
	err := s.Write(b)
	if s.scratch.Cap() > 64<<10 {
		s.scratch = bytes.Buffer{}
	} else {
		s.scratch.Reset()
	}
	return err
}

// Flush sends what was written: on the hijacked connection as one chunk
// in one writev.
func (s *Writer) Flush() error {
	if s.failed != nil {
		return s.failed
	}
	s.extend()
	if s.conn == nil {
		s.failed = s.rc.Flush()
		return s.failed
	}
	if s.size == 0 {
		return nil
	}
	head := append(strconv.AppendInt(s.head[:0], int64(s.size), 16), '\r', '\n')
	s.vec = append(append(append(s.vec[:0], head), s.pending...), crlf)
	v := s.vec // WriteTo consumes its receiver
	_, s.failed = v.WriteTo(s.conn)
	clear(s.pending)
	s.pending, s.size = s.pending[:0], 0
	clear(s.vec)
	return s.failed
}

var crlf = []byte("\r\n")

// Cutter is a stream's place in what feeds it, which End reports to.
type Cutter interface {
	// Cut ends the stream from the feed's side, counting it by reason.
	Cut(reason string)
	// WasCut reports whether the feed cut the stream.
	WasCut() bool
}

// End finishes a stream that the server cuts or that failed to write: a
// timed-out write is counted and unregisters the stream from the feed
// (watch.Cut("write_timeout")); a stream the feed cut says so
// (CutComment) before ending, any other says EndedComment.
func (s *Writer) End(watch Cutter) {
	if s.failed != nil {
		if errors.Is(s.failed, os.ErrDeadlineExceeded) {
			watch.Cut("write_timeout")
		}
		return
	}
	s.setDeadline(time.Now().Add(time.Second))
	s.final = true
	msg := EndedComment
	if watch.WasCut() {
		msg = CutComment
	}
	if s.Write([]byte(msg)) == nil {
		_ = s.Flush()
	}
}

// Close ends the response: on the hijacked connection the last chunk,
// then the connection itself.
func (s *Writer) Close() {
	if s.conn == nil {
		return
	}
	if s.failed == nil {
		if !s.final {
			_ = s.conn.SetWriteDeadline(time.Now().Add(time.Second))
		}
		_, _ = s.conn.Write([]byte("0\r\n\r\n"))
	}
	_ = s.conn.Close()
}
