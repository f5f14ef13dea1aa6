package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/preview"
	"github.com/mangohq/mango/db"
)

// previewableTypes are the event types a stream may ask previews of.
var previewableTypes = []string{"agent.message", "agent.thinking"}

// streamBatch bounds how many events one read of the log returns.
const streamBatch = 500

// eventStream serves GET /v1/sessions/{id}/events/stream as Server-Sent
// Events. Each committed event is one frame, `id: <event id>`, `event:
// <type>`, `data: <event JSON>`, in log order. A client that reconnects with
// Last-Event-ID receives every event committed after that one, so nothing is
// lost across reconnects. Without it the stream starts at the end of the
// log. Comment frames (`: ping`) keep idle connections open. When the
// session is deleted the stream sends session.deleted and ends. With
// event_deltas[] the stream also carries previews (event_start and
// event_delta frames without id) from the preview hub; they are best
// effort and may end without a committed event.
func (a *API) eventStream(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	if err := checkQuery(c); err != nil {
		return err
	}
	q := c.QueryParams()
	var deltas []string
	for _, t := range append(q["event_deltas[]"], q["event_deltas"]...) {
		if !slices.Contains(previewableTypes, t) {
			return apierror.Invalid("event_deltas[]: previews are available for agent.message and agent.thinking, got %q", t)
		}
		deltas = append(deltas, t)
	}

	ctx := c.Request().Context()
	// Subscribe before reading the position, so no commit falls between.
	st := &sseStream{a: a, id: id, watch: a.deps.Hub.Subscribe(a.deps.Store, id)}
	if len(deltas) > 0 && a.deps.Previews != nil {
		st.sub = a.deps.Previews.Subscribe(id, deltas)
		st.previews = st.sub.C
	}
	sess, err := a.deps.Store.SessionGet(ctx, id)
	if err != nil {
		st.unsubscribe()
		return sessionError(id, err)
	}
	st.seq = sess.LastSeq
	if last := strings.TrimSpace(c.Request().Header.Get("Last-Event-ID")); last != "" {
		if !ids.Valid(ids.Event, last) {
			st.unsubscribe()
			return apierror.Invalid("Last-Event-ID: %q is not an event id", last)
		}
		if st.seq, err = a.deps.Store.EventSeq(ctx, id, last); err != nil {
			st.unsubscribe()
			if errors.Is(err, db.ErrNotFound) {
				return apierror.Invalid("Last-Event-ID: event %q is not part of session %q", last, id)
			}
			return err
		}
	}

	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	streamCtx, out, hijacked := openStream(c)
	st.out = out
	if hijacked {
		// The connection is the stream's now: serve it on a goroutine of
		// its own, which starts with a small stack, and let the handler's
		// (grown by the middleware and the reads above) go.
		go func() {
			// Outside the handler the panic middleware no longer applies.
			defer func() {
				if r := recover(); r != nil {
					a.deps.Logger.Error("event stream panic", "panic", r, "stack", string(debug.Stack()), "session", id)
				}
			}()
			st.run(streamCtx)
		}()
		return nil
	}
	st.run(streamCtx)
	return nil
}

// sseStream is one open event stream: its place in the session's feed,
// its preview subscription, and its writer.
type sseStream struct {
	a     *API
	id    string
	seq   int64 // of the last event written
	watch *Watch
	sub   *preview.Subscription
	// previews is sub.C, or nil (never ready) without event_deltas.
	previews <-chan preview.Frame
	pending  []preview.Frame
	out      *streamWriter
}

func (st *sseStream) unsubscribe() {
	st.watch.Close()
	if st.sub != nil {
		st.sub.Close()
	}
}

// run writes the stream until ctx ends (the client left), the server
// shuts down, the session is deleted or the stream is cut.
func (st *sseStream) run(ctx context.Context) {
	defer st.unsubscribe()
	defer st.out.close()
	out := st.out
	if out.write([]byte(": connected\n\n")) != nil || out.flush() != nil {
		return
	}
	heartbeat := time.NewTicker(st.a.deps.HeartbeatInterval)
	defer heartbeat.Stop()
	for {
		// Previews received before the wake-up precede the commit that
		// caused it: write them first.
		if st.previews != nil && st.writePreviews(nil) != nil {
			out.end(st.watch)
			return
		}
		frames, status, changed := st.watch.Next(st.seq)
		switch status {
		case watchEnd:
			out.end(st.watch) // cut, or the feed could not read the log
			return
		case watchDeleted:
			body := fmt.Sprintf(`{"id":%q,"type":"session.deleted","processed_at":%q}`, ids.New(ids.Event), st.a.now().Format(time.RFC3339Nano))
			writeFrame(&out.scratch, "", "session.deleted", []byte(body))
			_ = out.writeScratch()
			_ = out.flush()
			return
		case watchBehind:
			// The feed no longer holds what this stream has not written (a
			// reconnect with Last-Event-ID): read it from the log.
			events, err := st.a.deps.Store.EventsAfter(ctx, st.id, st.seq, streamBatch)
			if err != nil {
				if ctx.Err() == nil {
					st.a.deps.Logger.Warn("stream: read events", "session", st.id, "err", err)
				}
				return // the client reconnects with Last-Event-ID
			}
			for i := range events {
				writeFrame(&out.scratch, events[i].ID, events[i].Type, events[i].JSON())
				st.committed(events[i].ID, events[i].Type)
				st.seq = events[i].Seq
			}
			if out.writeScratch() != nil || out.flush() != nil {
				out.end(st.watch)
				return
			}
			continue
		}
		if len(frames) > 0 {
			for i := range frames {
				_ = out.write(frames[i].data)
				st.committed(frames[i].id, frames[i].typ)
				st.seq = frames[i].seq
			}
			if out.flush() != nil {
				out.end(st.watch)
				return
			}
			continue // more may have come meanwhile
		}
		if !st.wait(ctx, heartbeat.C, changed) {
			return
		}
	}
}

// wait waits for more events, writing pings and previews meanwhile; false
// ends the stream.
func (st *sseStream) wait(ctx context.Context, heartbeat <-chan time.Time, changed <-chan struct{}) bool {
	out := st.out
	for {
		select {
		case <-ctx.Done():
			return false
		case <-st.a.deps.Hub.Done():
			return false // shutting down; the client reconnects elsewhere
		case <-heartbeat:
			if out.write([]byte(": ping\n\n")) != nil || out.flush() != nil {
				out.end(st.watch)
				return false
			}
		case <-changed:
			return true
		case f := <-st.previews:
			// Nothing was committed: keep waiting without reading the log.
			if st.writePreviews(&f) != nil {
				out.end(st.watch)
				return false
			}
		}
	}
}

// committed tells the preview subscription that an event was written.
func (st *sseStream) committed(id, typ string) {
	if st.sub != nil && slices.Contains(previewableTypes, typ) {
		st.sub.Committed(id)
	}
}

// writePreviews writes first (if any) and whatever else is queued, then
// flushes. Previews carry no id: they cannot be replayed.
func (st *sseStream) writePreviews(first *preview.Frame) error {
	st.pending = st.pending[:0]
	if first != nil {
		st.pending = append(st.pending, *first)
	}
queued:
	for len(st.pending) < 128 {
		select {
		case f := <-st.previews:
			st.pending = append(st.pending, f)
		default:
			break queued
		}
	}
	if len(st.pending) == 0 {
		return nil
	}
	for i := range st.pending {
		writePreview(&st.out.scratch, &st.pending[i])
	}
	if err := st.out.writeScratch(); err != nil {
		return err
	}
	if err := st.out.flush(); err != nil {
		return err
	}
	now := time.Now()
	for i := range st.pending {
		st.sub.Written(st.pending[i], now)
	}
	return nil
}

// streamWriteTimeout bounds one write to a stream's client: a client that
// stops reading is cut instead of holding the stream forever.
const streamWriteTimeout = 30 * time.Second

// streamCut is the comment a stream ends with when the server cuts it; the
// client reconnects with Last-Event-ID and misses nothing.
const streamCut = ": stream cut: this client fell behind the session's events; reconnect with Last-Event-ID to resume\n\n"

// streamEnded is the comment a stream ends with when the server cannot go
// on serving it (its session's log could not be read).
const streamEnded = ": stream ended by the server; reconnect with Last-Event-ID to resume\n\n"

// streamWriter writes a stream's frames, each write bounded by
// streamWriteTimeout. On HTTP/1.1 it owns the connection: openStream
// hijacks it after the headers, so an open stream holds no buffers of the
// HTTP server's (about 10 KB a connection), only a small goroutine that
// notices the client leaving; its writes are chunks, one writev each.
// Where hijacking is not possible (HTTP/2, test recorders) it writes
// through the HTTP server's response. scratch encodes the frames only this
// stream writes (previews, replayed events); committed events arrive
// encoded, shared by the session's streams.
type streamWriter struct {
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

// openStream answers 200 with the headers set so far and returns the
// context that ends when the client goes away, the stream's writer, and
// whether it hijacked the connection (then the stream may outlive the
// handler and its request).
func openStream(c echo.Context) (context.Context, *streamWriter, bool) {
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
		return c.Request().Context(), &streamWriter{w: resp, rc: rc}, false
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
	s := &streamWriter{conn: conn}
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

// extend moves the write deadline to streamWriteTimeout from now, unless
// it was moved less than a second ago.
func (s *streamWriter) extend() {
	now := time.Now()
	if s.final || s.deadline.Sub(now) > streamWriteTimeout-time.Second {
		return
	}
	s.setDeadline(now.Add(streamWriteTimeout))
}

func (s *streamWriter) setDeadline(t time.Time) {
	s.deadline = t
	if s.conn != nil {
		_ = s.conn.SetWriteDeadline(s.deadline)
		return
	}
	// Not every ResponseWriter supports deadlines (tests' recorders do not).
	_ = s.rc.SetWriteDeadline(s.deadline)
}

// write adds b to what the next flush sends. b must not change until then
// (frames are immutable; scratch is copied).
func (s *streamWriter) write(b []byte) error {
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

// writeScratch writes and empties scratch, releasing a large one.
func (s *streamWriter) writeScratch() error {
	b := s.scratch.Bytes()
	if s.conn != nil {
		b = bytes.Clone(b)
	}
	err := s.write(b)
	if s.scratch.Cap() > 64<<10 {
		s.scratch = bytes.Buffer{}
	} else {
		s.scratch.Reset()
	}
	return err
}

// flush sends what was written: on the hijacked connection as one chunk
// in one writev.
func (s *streamWriter) flush() error {
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

// end finishes a stream that the server cuts or that failed to write: a
// timed-out write is counted and unregisters the stream from the feed; a
// stream the feed cut says so before ending.
func (s *streamWriter) end(watch *Watch) {
	if s.failed != nil {
		if errors.Is(s.failed, os.ErrDeadlineExceeded) {
			watch.Cut("write_timeout")
		}
		return
	}
	s.setDeadline(time.Now().Add(time.Second))
	s.final = true
	msg := streamEnded
	if watch.wasCut() {
		msg = streamCut
	}
	if s.write([]byte(msg)) == nil {
		_ = s.flush()
	}
}

// close ends the response: on the hijacked connection the last chunk,
// then the connection itself.
func (s *streamWriter) close() {
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

// writePreview writes an event_start or event_delta frame in the shapes of
// the SDK's BetaManagedAgentsStartEvent and BetaManagedAgentsDeltaEvent.
func writePreview(w *bytes.Buffer, f *preview.Frame) {
	var b []byte
	if f.Kind == preview.KindStart {
		b = fmt.Appendf(nil, `{"type":"event_start","event":{"id":%s,"type":%s}}`, jsonString(f.EventID), jsonString(f.EventType))
		writeFrame(w, "", "event_start", b)
		return
	}
	b = fmt.Appendf(nil, `{"type":"event_delta","event_id":%s,"delta":{"type":"content_delta","content":{"type":"text","text":%s},"index":%d}}`,
		jsonString(f.EventID), jsonString(f.Text), f.Index)
	writeFrame(w, "", "event_delta", b)
}

func jsonString(s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// writeFrame writes one SSE frame: `id: <id>` (when id is not empty),
// `event: <typ>`, `data: <data>` and a blank line. SSE has no escaping (a
// line break ends a field, a blank line the frame), so whatever the fields
// hold the frame stays one event with these three fields: id and typ are
// written without CR and LF (and id without NUL, which makes clients ignore
// it), and data is written one data: line per line, which clients join back
// with LF. Event JSON holds no raw line break, and in JSON one could only be
// whitespace, so the event always arrives whole.
func writeFrame(w *bytes.Buffer, id, typ string, data []byte) {
	if id = sseFieldValue(id, "\r\n\x00"); id != "" {
		w.WriteString("id: ")
		w.WriteString(id)
		w.WriteByte('\n')
	}
	w.WriteString("event: ")
	w.WriteString(sseFieldValue(typ, "\r\n"))
	for {
		line, rest, more := cutLine(data)
		w.WriteString("\ndata: ")
		w.Write(line)
		if !more {
			break
		}
		data = rest
	}
	w.WriteString("\n\n")
}

// sseFieldValue returns v without the (ASCII) bytes in drop.
func sseFieldValue(v, drop string) string {
	if !strings.ContainsAny(v, drop) {
		return v
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if strings.IndexByte(drop, v[i]) < 0 {
			out = append(out, v[i])
		}
	}
	return string(out)
}

// cutLine splits b at its first SSE line break (CRLF, CR or LF).
func cutLine(b []byte) (line, rest []byte, found bool) {
	i := bytes.IndexAny(b, "\r\n")
	if i < 0 {
		return b, nil, false
	}
	j := i + 1
	if b[i] == '\r' && j < len(b) && b[j] == '\n' {
		j++
	}
	return b[:i], b[j:], true
}
