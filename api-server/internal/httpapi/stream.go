package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/eventhub"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/preview"
	"github.com/mangohq/mango/api-server/internal/sse"
	"github.com/mangohq/mango/db"
)

// previewableTypes are the event types a stream may ask previews of.
var previewableTypes = []string{"agent.message", "agent.thinking"}

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
	return a.streamEvents(c, id)
}

// streamEvents streams the events of session (or child thread) id.
func (a *API) streamEvents(c echo.Context, id string) error {
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

	var err error
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
	streamCtx, out, hijacked := sse.Open(c)
	st.out = out
	if hijacked {
		// The connection is the stream's now: serve it on a goroutine of
		// its own, which starts with a small stack, and let the handler's
		// (grown by the middleware and the reads above) go.
		go func() {
			// Outside the handler the panic middleware no longer applies.
			defer func() {
				if r := recover(); r != nil {
					a.deps.Logger.ErrorContext(streamCtx, "event stream panic", "panic", r, "stack", string(debug.Stack()), "session", id)
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
	watch *eventhub.Watch
	sub   *preview.Subscription
	// previews is sub.C, or nil (never ready) without event_deltas.
	previews <-chan preview.Frame
	pending  []preview.Frame
	out      *sse.Writer
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
	defer st.out.Close()
	out := st.out
	if out.Write([]byte(": connected\n\n")) != nil || out.Flush() != nil {
		return
	}
	heartbeat := time.NewTicker(st.a.deps.HeartbeatInterval)
	defer heartbeat.Stop()
	for {
		// Previews received before the wake-up precede the commit that
		// caused it: write them first.
		if st.previews != nil && st.writePreviews(nil) != nil {
			out.End(st.watch)
			return
		}
		frames, status, changed := st.watch.Next(st.seq)
		switch status {
		case eventhub.End:
			out.End(st.watch) // cut, or the feed could not read the log
			return
		case eventhub.Deleted:
			body := fmt.Sprintf(`{"id":%q,"type":"session.deleted","processed_at":%q}`, ids.New(ids.Event), st.a.now().Format(time.RFC3339Nano))
			sse.WriteFrame(out.Scratch(), "", "session.deleted", []byte(body))
			_ = out.WriteScratch()
			_ = out.Flush()
			return
		case eventhub.Behind:
			// The feed no longer holds what this stream has not written (a
			// reconnect with Last-Event-ID): read it from the log.
			events, err := st.a.deps.Store.EventsAfter(ctx, st.id, st.seq, eventhub.ReadBatch)
			if err != nil {
				if ctx.Err() == nil {
					st.a.deps.Logger.WarnContext(ctx, "stream: read events", "session", st.id, "err", err)
				}
				return // the client reconnects with Last-Event-ID
			}
			for i := range events {
				sse.WriteFrame(out.Scratch(), events[i].ID, events[i].Type, events[i].JSON())
				st.committed(events[i].ID, events[i].Type)
				st.seq = events[i].Seq
			}
			if out.WriteScratch() != nil || out.Flush() != nil {
				out.End(st.watch)
				return
			}
			continue
		}
		if len(frames) > 0 {
			for i := range frames {
				_ = out.Write(frames[i].Data)
				st.committed(frames[i].ID, frames[i].Type)
				st.seq = frames[i].Seq
			}
			if out.Flush() != nil {
				out.End(st.watch)
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
			if out.Write([]byte(": ping\n\n")) != nil || out.Flush() != nil {
				out.End(st.watch)
				return false
			}
		case <-changed:
			return true
		case f := <-st.previews:
			// Nothing was committed: keep waiting without reading the log.
			if st.writePreviews(&f) != nil {
				out.End(st.watch)
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
		writePreview(st.out.Scratch(), &st.pending[i])
	}
	if err := st.out.WriteScratch(); err != nil {
		return err
	}
	if err := st.out.Flush(); err != nil {
		return err
	}
	now := time.Now()
	for i := range st.pending {
		st.sub.Written(st.pending[i], now)
	}
	return nil
}

// writePreview writes an event_start or event_delta frame in the shapes of
// the SDK's BetaManagedAgentsStartEvent and BetaManagedAgentsDeltaEvent.
func writePreview(w *bytes.Buffer, f *preview.Frame) {
	var b []byte
	if f.Kind == preview.KindStart {
		b = fmt.Appendf(nil, `{"type":"event_start","event":{"id":%s,"type":%s}}`, jsonString(f.EventID), jsonString(f.EventType))
		sse.WriteFrame(w, "", "event_start", b)
		return
	}
	b = fmt.Appendf(nil, `{"type":"event_delta","event_id":%s,"delta":{"type":"content_delta","content":{"type":"text","text":%s},"index":%d}}`,
		jsonString(f.EventID), jsonString(f.Text), f.Index)
	sse.WriteFrame(w, "", "event_delta", b)
}

func jsonString(s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}
