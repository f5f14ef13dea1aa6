// Package eventhub fans each session's committed events out to the SSE
// streams of that session on this replica: one shared reader of the log
// per session (a feed), woken by PostgreSQL notifications, whose encoded
// frames every stream of the session writes.
package eventhub

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mangohq/mango/api-server/internal/pglisten"
	"github.com/mangohq/mango/api-server/internal/sse"
	"github.com/mangohq/mango/db"
)

// Hub shares each session's committed events among the SSE streams of that
// session on this replica. It handles db.NotifyChannel on the api-server's
// one pglisten.Listener, so a commit through any replica reaches streams on
// every replica.
//
// Per session with open streams the Hub keeps one feed: on a notification
// the feed reads the events after the last one it read, once, encodes each
// as its SSE frame, once, and wakes the session's streams, which write those
// shared frames. However many streams watch a session, a commit costs one
// read of the log. A notification only says "look again": the feed reads
// the authoritative log from its position, so coalesced or lost
// notifications lose nothing, and after a gap in listening (start,
// reconnect) every feed reads again.
//
// The feed keeps its frames until every live stream of the session has
// written them, within bounds (feedMaxFrames, feedMaxBytes): a stream that
// falls further behind is cut (see sse.CutComment), so a slow client never holds
// memory or delays the others. A stream that starts behind the feed (a
// reconnect with Last-Event-ID) reads what it missed from the log itself,
// then joins the feed.
type Hub struct {
	mu    sync.Mutex
	feeds map[string]*feed

	ctx      context.Context // ends at Close: feeds stop reading
	cancel   context.CancelFunc
	done     chan struct{}
	doneOnce sync.Once
	log      *slog.Logger
	// The feeds' bounds (feedMaxFrames, feedMaxBytes; smaller in tests).
	maxFrames, maxBytes int

	subscribers prometheus.Gauge
	feedGauge   prometheus.Gauge
	notified    prometheus.Counter
	reads       prometheus.Counter
	cuts        *prometheus.CounterVec
}

// Feed bounds: the frames a feed keeps for streams that have not written
// them yet (the frame count is MANGO_STREAM_MAX_LAG). Past either bound
// the streams furthest behind are cut.
const (
	feedMaxFrames = 4096
	feedMaxBytes  = 16 << 20
)

// feedReadTimeout bounds one read of the log by a feed.
const feedReadTimeout = 10 * time.Second

// ReadBatch bounds how many events one read of the log returns.
const ReadBatch = 500

// New returns a Hub registering its metrics on reg, cutting streams
// more than maxLag events behind (0: feedMaxFrames); register it with
// pglisten.Listener.Handle for db.NotifyChannel, and Close it at shutdown.
func New(reg prometheus.Registerer, maxLag int) *Hub {
	if maxLag <= 0 {
		maxLag = feedMaxFrames
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{feeds: map[string]*feed{}, ctx: ctx, cancel: cancel, done: make(chan struct{}), log: slog.New(slog.DiscardHandler),
		maxFrames: maxLag, maxBytes: feedMaxBytes,
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mango_stream_subscribers",
			Help: "Open SSE event streams on this api-server.",
		}),
		feedGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mango_stream_feeds",
			Help: "Sessions with open SSE event streams on this api-server (one log reader each).",
		}),
		notified: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mango_stream_notifications_total",
			Help: "Commit notifications received from PostgreSQL.",
		}),
		reads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mango_stream_feed_reads_total",
			Help: "Reads of a session's event log by its shared feed (one per wake-up, whatever the number of streams).",
		}),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mango_stream_cut_total",
			Help: "SSE event streams ended by the server, by reason (slow: the client fell behind the feed's bounds; write_timeout: a write did not complete in time; read_error: the log could not be read).",
		}, []string{"reason"}),
	}
	reg.MustRegister(h.subscribers, h.feedGauge, h.notified, h.reads, h.cuts)
	return h
}

// SetLogger sets where the Hub logs failed reads (default: nowhere).
func (h *Hub) SetLogger(log *slog.Logger) {
	if log != nil {
		h.log = log
	}
}

// Log is what a feed reads: *db.Store.
type Log interface {
	EventsAfter(ctx context.Context, sessionID string, seq int64, limit int) ([]db.Event, error)
	SessionGet(ctx context.Context, id string) (*db.Session, error)
}

// Frame is one committed event and its SSE frame, shared by every stream
// of the session.
type Frame struct {
	Seq  int64  // the event's position in the session's log
	Type string // the event's type
	ID   string // the event's id
	Data []byte // the whole frame: id:, event:, data: lines and the blank line
}

func encodeFrame(ev *db.Event) Frame {
	var b bytes.Buffer
	sse.WriteFrame(&b, ev.ID, ev.Type, ev.JSON())
	return Frame{Seq: ev.Seq, Type: ev.Type, ID: ev.ID, Data: b.Bytes()}
}

// feedState is where a feed stands.
type feedState uint8

const (
	feedStarting feedState = iota // its position is not known yet
	feedLive                      // reading on every notification
	feedDeleted                   // the session is gone
	feedFailed                    // the log could not be read: streams end, clients reconnect
)

// feed is one session's shared reader.
type feed struct {
	hub       *Hub
	sessionID string
	log       Log
	wake      chan struct{} // buffered 1: a read is due
	subs      int           // guarded by hub.mu

	// snap is what streams read, without locking: the fields below as of
	// the last change.
	snap atomic.Pointer[feedSnapshot]

	mu       sync.Mutex
	state    feedState
	head     int64 // seq of the newest event read
	notified int64 // highest seq announced by a notification
	recheck  bool  // a deletion or a gap in listening: ask the session
	frames   []Frame
	bytes    int
	watches  map[*Watch]struct{}
	changed  chan struct{} // closed and replaced whenever frames or state move
}

// feedSnapshot is a feed's state as streams read it; it never changes.
type feedSnapshot struct {
	state   feedState
	head    int64
	frames  []Frame
	changed <-chan struct{} // closed when a newer snapshot has more
}

// Watch is one stream's place in its session's feed.
type Watch struct {
	f    *feed
	once sync.Once

	pos  atomic.Int64 // seq of the last event the stream wrote
	live atomic.Bool  // the stream has joined the feed (pos is within it)
	cut  atomic.Bool  // the feed moved past its bounds while the stream lagged
}

// Subscribe registers a stream of a session, reading through store when it
// is the session's first on this replica. Close the Watch when the stream
// ends.
func (h *Hub) Subscribe(store Log, sessionID string) *Watch {
	h.mu.Lock()
	f := h.feeds[sessionID]
	if f == nil {
		f = &feed{hub: h, sessionID: sessionID, log: store, wake: make(chan struct{}, 1), changed: make(chan struct{}),
			watches: map[*Watch]struct{}{}}
		f.publish()
		h.feeds[sessionID] = f
		h.feedGauge.Inc()
		f.wake <- struct{}{} // learn the position
		go f.run()
	}
	f.subs++
	h.mu.Unlock()
	w := &Watch{f: f}
	f.mu.Lock()
	f.watches[w] = struct{}{}
	f.mu.Unlock()
	h.subscribers.Inc()
	return w
}

// Close unregisters the stream; the session's feed stops with its last
// stream. It is idempotent.
func (w *Watch) Close() {
	w.once.Do(func() {
		f, h := w.f, w.f.hub
		f.mu.Lock()
		delete(f.watches, w)
		f.trim()
		f.publish()
		f.mu.Unlock()
		h.mu.Lock()
		f.subs--
		if f.subs == 0 {
			h.forget(f)
			close(f.wake) // its reader returns
		}
		h.mu.Unlock()
		h.subscribers.Dec()
	})
}

// forget unregisters f unless a newer feed of its session replaced it
// (after f failed); h.mu is held.
func (h *Hub) forget(f *feed) {
	if h.feeds[f.sessionID] == f {
		delete(h.feeds, f.sessionID)
		h.feedGauge.Dec()
	}
}

// Status says what a stream should do next.
type Status uint8

// What Next tells a stream to do.
const (
	// Wait: write the frames (if any), then wait for the channel.
	Wait Status = iota
	// Behind: read the events after pos from the log: the feed no longer
	// has them.
	Behind
	// Deleted: the session is gone: send session.deleted and end.
	Deleted
	// End: end the stream (cut, or the feed failed); the client reconnects.
	End
)

// Next returns the shared frames after pos (not to be modified), what to do
// next, and a channel closed when there is more. pos is the seq of the last
// event the stream wrote; the stream passes each frame's seq back as it
// writes. Next takes no lock: the streams of a session all call it at once
// when a commit wakes them.
func (w *Watch) Next(pos int64) ([]Frame, Status, <-chan struct{}) {
	w.pos.Store(pos)
	sn := w.f.snap.Load()
	switch {
	case w.cut.Load() || sn.state == feedFailed:
		return nil, End, nil
	case sn.state == feedDeleted:
		return nil, Deleted, nil
	case sn.state == feedStarting:
		return nil, Wait, sn.changed
	case pos < sn.head && (len(sn.frames) == 0 || sn.frames[0].Seq > pos+1):
		w.live.Store(false)
		return nil, Behind, nil
	}
	w.live.Store(true)
	i := len(sn.frames)
	for i > 0 && sn.frames[i-1].Seq > pos {
		i--
	}
	return sn.frames[i:], Wait, sn.changed
}

// WasCut reports whether the feed cut the stream.
func (w *Watch) WasCut() bool { return w.cut.Load() }

// Cut ends the stream from the feed's side (its write timed out); the
// feed no longer keeps frames for it.
func (w *Watch) Cut(reason string) {
	f := w.f
	f.mu.Lock()
	if !w.cut.Swap(true) {
		f.hub.cuts.WithLabelValues(reason).Inc()
	}
	f.trim()
	f.publish()
	f.mu.Unlock()
}

// run reads the session's log on every wake-up until the feed's last
// stream leaves or the Hub closes.
func (f *feed) run() {
	for range f.wake {
		if f.hub.ctx.Err() != nil {
			f.fail()
			return
		}
		if err := f.read(); err != nil {
			if f.hub.ctx.Err() == nil {
				f.hub.log.Warn("stream: read events", "session", f.sessionID, "err", err)
				f.hub.cuts.WithLabelValues("read_error").Add(float64(f.streams()))
			}
			f.fail()
			// The streams end and reconnect; a reconnect that finds this
			// feed still registered waits for it to go.
			f.hub.mu.Lock()
			f.hub.forget(f)
			f.hub.mu.Unlock()
			for range f.wake { //nolint:revive // drain until the last stream closes the channel
			}
			return
		}
	}
}

func (f *feed) streams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watches)
}

func (f *feed) fail() {
	f.mu.Lock()
	f.state = feedFailed
	f.broadcast()
	f.mu.Unlock()
}

// read brings the feed up to date: at the start it learns the session's
// position; afterwards it reads the events after head, unless every
// notification since the last read announced events already read.
func (f *feed) read() error {
	ctx, cancel := context.WithTimeout(f.hub.ctx, feedReadTimeout)
	defer cancel()
	f.mu.Lock()
	state, head, notified, recheck := f.state, f.head, f.notified, f.recheck
	f.recheck = false
	f.mu.Unlock()
	if state == feedStarting || recheck {
		sess, err := f.log.SessionGet(ctx, f.sessionID)
		switch {
		case errors.Is(err, db.ErrNotFound):
			f.mu.Lock()
			f.state = feedDeleted
			f.broadcast()
			f.mu.Unlock()
			return nil
		case err != nil:
			return err
		case state == feedStarting:
			f.mu.Lock()
			f.state, f.head = feedLive, sess.LastSeq
			f.notified = max(f.notified, sess.LastSeq)
			f.broadcast()
			f.mu.Unlock()
			return nil
		}
		notified = max(notified, sess.LastSeq)
	}
	for head < notified {
		f.hub.reads.Inc()
		events, err := f.log.EventsAfter(ctx, f.sessionID, head, ReadBatch)
		if err != nil {
			return err
		}
		if len(events) == 0 {
			return nil
		}
		frames := make([]Frame, len(events))
		for i := range events {
			frames[i] = encodeFrame(&events[i])
		}
		head = events[len(events)-1].Seq
		f.mu.Lock()
		f.frames = append(f.frames, frames...)
		for i := range frames {
			f.bytes += len(frames[i].Data)
		}
		f.head = head
		f.notified = max(f.notified, head)
		notified = max(notified, f.notified)
		f.trim()
		f.broadcast()
		f.mu.Unlock()
	}
	return nil
}

// broadcast publishes the feed's state and wakes the streams; f.mu is
// held.
func (f *feed) broadcast() {
	woken := f.changed
	f.changed = make(chan struct{})
	f.publish() // before the wake-up, so the woken streams read the new state
	close(woken)
}

// publish makes the feed's state what streams read, without waking them
// (nothing they wait for changed); f.mu is held.
func (f *feed) publish() {
	f.snap.Store(&feedSnapshot{state: f.state, head: f.head, frames: f.frames, changed: f.changed})
}

// trim drops the frames every live stream has written, then, past the
// bounds, the oldest frames, cutting the streams that had not written
// them; f.mu is held.
func (f *feed) trim() {
	low := f.head
	for w := range f.watches {
		if w.live.Load() && !w.cut.Load() {
			low = min(low, w.pos.Load())
		}
	}
	n := 0
	for n < len(f.frames) && f.frames[n].Seq <= low {
		n++
	}
	dropped := 0
	for i := range f.frames[:n] {
		dropped += len(f.frames[i].Data)
	}
	for n < len(f.frames) && (len(f.frames)-n > f.hub.maxFrames || f.bytes-dropped > f.hub.maxBytes) {
		dropped += len(f.frames[n].Data)
		n++
	}
	if n == 0 {
		return
	}
	f.bytes -= dropped
	kept := f.frames[n-1].Seq
	for w := range f.watches {
		if w.live.Load() && w.pos.Load() < kept && !w.cut.Swap(true) {
			f.hub.cuts.WithLabelValues("slow").Inc()
		}
	}
	// Copy rather than reslice, so the dropped frames can be collected.
	f.frames = append([]Frame(nil), f.frames[n:]...)
}

// Notify handles a commit notification (payload "<session id>:<last seq>",
// or "<session id>:deleted"; see db.NotifyChannel): the session's feed, if
// this replica has one, reads what it has not read yet. It implements
// pglisten.Handler.
func (h *Hub) Notify(payload string) {
	h.notified.Inc()
	sessionID, rest, _ := strings.Cut(payload, ":")
	seq, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		seq = -1 // not a position (a deletion): ask the session
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.feeds[sessionID]; f != nil {
		f.announce(seq)
	}
}

// announce records a notification (seq -1: a deletion or a gap, ask the
// session) and wakes the reader when there is something to read; hub.mu is
// held.
func (f *feed) announce(seq int64) {
	f.mu.Lock()
	due := seq < 0 || seq > f.notified
	if seq < 0 {
		f.recheck = true
	} else {
		f.notified = max(f.notified, seq)
	}
	f.mu.Unlock()
	if due {
		select {
		case f.wake <- struct{}{}:
		default: // a read is already due: it reads up to the newest
		}
	}
}

// Gap makes every feed read again: commits notified while nobody listened
// are found in the log. It implements pglisten.Handler.
func (h *Hub) Gap() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.feeds {
		f.announce(-1)
	}
}

// Done is closed by Close (at shutdown): streams end then, so that the
// HTTP server can drain.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Close ends every stream (see Done) and stops the feeds; it is idempotent.
func (h *Hub) Close() {
	h.doneOnce.Do(func() {
		close(h.done)
		h.cancel()
	})
}

var _ pglisten.Handler = (*Hub)(nil)
var _ sse.Cutter = (*Watch)(nil)
