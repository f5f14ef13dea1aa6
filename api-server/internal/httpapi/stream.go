package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
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
	watch := a.deps.Hub.Subscribe(a.deps.Store, id)
	defer watch.Close()
	var sub *preview.Subscription
	var previews <-chan preview.Frame // nil (never ready) without event_deltas
	if len(deltas) > 0 && a.deps.Previews != nil {
		sub = a.deps.Previews.Subscribe(id, deltas)
		defer sub.Close()
		previews = sub.C
	}
	sess, err := a.deps.Store.SessionGet(ctx, id)
	if err != nil {
		return sessionError(id, err)
	}
	seq := sess.LastSeq
	if last := strings.TrimSpace(c.Request().Header.Get("Last-Event-ID")); last != "" {
		if !ids.Valid(ids.Event, last) {
			return apierror.Invalid("Last-Event-ID: %q is not an event id", last)
		}
		if seq, err = a.deps.Store.EventSeq(ctx, id, last); errors.Is(err, db.ErrNotFound) {
			return apierror.Invalid("Last-Event-ID: event %q is not part of session %q", last, id)
		} else if err != nil {
			return err
		}
	}

	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	c.Response().WriteHeader(http.StatusOK)
	out := &streamWriter{w: c.Response(), rc: http.NewResponseController(c.Response())}
	if out.write([]byte(": connected\n\n")) != nil || out.flush() != nil {
		return nil
	}
	// writePreviews writes first (if any) and whatever else is queued, then
	// flushes. Previews carry no id: they cannot be replayed.
	var pending []preview.Frame
	writePreviews := func(first *preview.Frame) error {
		pending = pending[:0]
		if first != nil {
			pending = append(pending, *first)
		}
	queued:
		for len(pending) < 128 {
			select {
			case f := <-previews:
				pending = append(pending, f)
			default:
				break queued
			}
		}
		if len(pending) == 0 {
			return nil
		}
		for i := range pending {
			writePreview(&out.scratch, &pending[i])
		}
		if err := out.writeScratch(); err != nil {
			return err
		}
		if err := out.flush(); err != nil {
			return err
		}
		now := time.Now()
		for i := range pending {
			sub.Written(pending[i], now)
		}
		return nil
	}
	committed := func(id, typ string) {
		if sub != nil && slices.Contains(previewableTypes, typ) {
			sub.Committed(id)
		}
	}

	heartbeat := time.NewTicker(a.heartbeatInterval())
	defer heartbeat.Stop()
	for {
		// Previews received before the wake-up precede the commit that
		// caused it: write them first.
		if previews != nil {
			if err := writePreviews(nil); err != nil {
				return out.end(watch)
			}
		}
		frames, status, changed := watch.Next(seq)
		switch status {
		case watchEnd:
			return out.end(watch)
		case watchDeleted:
			body := fmt.Sprintf(`{"id":%q,"type":"session.deleted","processed_at":%q}`, ids.New(ids.Event), a.now().Format(time.RFC3339Nano))
			writeFrame(&out.scratch, "", "session.deleted", []byte(body))
			_ = out.writeScratch()
			_ = out.flush()
			return nil
		case watchBehind:
			// The feed no longer holds what this stream has not written (a
			// reconnect with Last-Event-ID): read it from the log.
			events, err := a.deps.Store.EventsAfter(ctx, id, seq, streamBatch)
			if err != nil {
				if ctx.Err() == nil {
					a.deps.Logger.Warn("stream: read events", "session", id, "err", err)
				}
				return nil // the client reconnects with Last-Event-ID
			}
			for i := range events {
				writeFrame(&out.scratch, events[i].ID, events[i].Type, events[i].JSON())
				committed(events[i].ID, events[i].Type)
				seq = events[i].Seq
			}
			if out.writeScratch() != nil || out.flush() != nil {
				return out.end(watch)
			}
			continue
		}
		if len(frames) > 0 {
			for i := range frames {
				if out.write(frames[i].data) != nil {
					return out.end(watch)
				}
				committed(frames[i].id, frames[i].typ)
				seq = frames[i].seq
			}
			if out.flush() != nil {
				return out.end(watch)
			}
			continue // more may have come meanwhile
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-a.deps.Hub.Done():
				return nil // shutting down; the client reconnects elsewhere
			case <-heartbeat.C:
				if out.write([]byte(": ping\n\n")) != nil || out.flush() != nil {
					return out.end(watch)
				}
			case <-changed:
				break wait
			case f := <-previews:
				// Nothing was committed: keep waiting without reading the log.
				if err := writePreviews(&f); err != nil {
					return out.end(watch)
				}
			}
		}
	}
}

// streamWriteTimeout bounds one write to a stream's client: a client that
// stops reading is cut instead of holding the stream forever.
const streamWriteTimeout = 30 * time.Second

// streamCut is the comment a stream ends with when the server cuts it; the
// client reconnects with Last-Event-ID and misses nothing.
const streamCut = ": stream cut: this client fell behind the session's events; reconnect with Last-Event-ID to resume\n\n"

// streamWriter writes a stream's frames straight to the response (the HTTP
// server buffers them until flush), each write bounded by
// streamWriteTimeout. scratch encodes the frames only this stream writes
// (previews, replayed events); committed events arrive encoded, shared by
// the session's streams.
type streamWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	scratch bytes.Buffer
	failed  error
	// deadline is the write deadline set last; it is moved on at most once
	// a second (setting it costs more than a write).
	deadline time.Time
}

// extend moves the write deadline to streamWriteTimeout from now, unless
// it was moved less than a second ago.
func (s *streamWriter) extend() {
	now := time.Now()
	if s.deadline.Sub(now) > streamWriteTimeout-time.Second {
		return
	}
	s.deadline = now.Add(streamWriteTimeout)
	// Not every ResponseWriter supports deadlines (tests' recorders do not).
	_ = s.rc.SetWriteDeadline(s.deadline)
}

func (s *streamWriter) write(b []byte) error {
	if s.failed != nil {
		return s.failed
	}
	s.extend()
	_, s.failed = s.w.Write(b)
	return s.failed
}

// writeScratch writes and empties scratch, releasing a large one.
func (s *streamWriter) writeScratch() error {
	err := s.write(s.scratch.Bytes())
	if s.scratch.Cap() > 64<<10 {
		s.scratch = bytes.Buffer{}
	} else {
		s.scratch.Reset()
	}
	return err
}

func (s *streamWriter) flush() error {
	if s.failed != nil {
		return s.failed
	}
	s.extend()
	s.failed = s.rc.Flush()
	return s.failed
}

// end finishes a stream that the server cuts or that failed to write: a
// timed-out write is counted and unregisters the stream from the feed; a
// stream the feed cut says so before ending.
func (s *streamWriter) end(watch *Watch) error {
	if s.failed != nil {
		if errors.Is(s.failed, os.ErrDeadlineExceeded) {
			watch.Cut("write_timeout")
		}
		return nil
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := s.w.Write([]byte(streamCut)); err == nil {
		_ = s.rc.Flush()
	}
	return nil
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

func (a *API) heartbeatInterval() time.Duration {
	if a.deps.HeartbeatInterval > 0 {
		return a.deps.HeartbeatInterval
	}
	return 15 * time.Second
}
