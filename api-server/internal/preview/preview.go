// Package preview delivers ephemeral preview frames (event_start and
// event_delta of agent.message / agent.thinking) from execution workers to
// the SSE streams that asked for them with event_deltas[]. Frames are never
// stored: a worker sends them over the ControlPlane's StreamPreviews to one
// api-server replica, whose Hub hands them to its own subscribers at once
// and relays them to the other replicas through PostgreSQL NOTIFY on
// [Channel]. Every buffer is bounded and every hand-off is non-blocking:
// when a subscriber, the relay or PostgreSQL cannot keep up, frames are
// dropped (and counted), never waited for, so previews cannot slow a turn,
// the committed event stream or another subscriber.
package preview

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mangohq/mango/api-server/internal/pglisten"
)

// Channel is the PostgreSQL NOTIFY channel previews are relayed on between
// api-server replicas. It is separate from the committed events' channel, so
// preview traffic never wakes event streams.
const Channel = "mango_previews"

// Kind distinguishes the frames of one previewed event.
type Kind uint8

// Frame kinds.
const (
	// KindStart is an event_start: a previewed event begins.
	KindStart Kind = 1
	// KindDelta is an event_delta: more text of a previewed event.
	KindDelta Kind = 2
)

// Frame is one preview frame.
type Frame struct {
	// SessionID is the session the previewed event belongs to.
	SessionID string
	// EventID is the id the committed event will carry.
	EventID string
	// Kind says whether the frame starts the event or continues it.
	Kind Kind
	// EventType is the previewed event's type ("agent.message", ...).
	EventType string
	// Text is the text a delta adds.
	Text string
	// Index is the content block the text belongs to.
	Index int32
	// ProducedAt is when the worker produced the frame.
	ProducedAt time.Time
}

// Buffer sizes. A subscriber's buffer absorbs bursts while its stream
// writes to a slow client; the relay queue absorbs bursts while PostgreSQL
// answers the previous NOTIFY.
const (
	subscriberBuffer = 256
	relayBuffer      = 4096
	// maxTracked bounds the per-subscriber sets of started and broken
	// events; they are reset when full (a long-lived stream sees many).
	maxTracked = 1024
)

// Drop reasons (label values of mango_preview_frames_dropped_total).
const (
	DropSubscriberFull = "subscriber_full" // the subscriber's buffer was full
	DropBroken         = "broken"          // an earlier frame of the event was dropped for the subscriber
	DropNoStart        = "no_start"        // a delta of an event whose start the subscriber did not see
	DropCommitted      = "committed"       // the complete event was already written to the subscriber
	DropRelayFull      = "relay_full"      // the relay queue was full
	DropRelayError     = "relay_error"     // NOTIFY failed
	DropInvalid        = "invalid"         // a worker sent a malformed frame
)

// Hub fans preview frames out to subscribers. To relay frames between
// replicas, call Run (it publishes this replica's) and register the Hub for
// [Channel] on the api-server's pglisten.Listener (it receives the others');
// without them the Hub delivers locally only.
type Hub struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	origin string // this replica, so it skips the frames it relayed itself
	// ownPrefix starts every payload this replica sends.
	ownPrefix string

	mu   sync.RWMutex
	subs map[string]map[*Subscription]struct{}

	relay chan Frame

	// Progress, for Sync: frames are numbered as they are queued for the
	// relay; published is the number of the last one sent; received counts
	// each previewed event's frames; progress is closed and replaced
	// whenever a frame arrives or published moves.
	relayMu   sync.Mutex
	queued    uint64
	published uint64
	received  map[string]received // event id →
	progress  chan struct{}

	m *metrics
}

// received is what a Hub has received of one previewed event.
type received struct {
	frames uint32 // frames from the event's latest start on
	last   uint64 // relay number of the newest one queued for the relay
}

// maxReceived bounds the events a Hub tracks for Sync; it forgets them all
// when full (events previewed and never committed through this replica).
const maxReceived = 16384

// Want is what a commit waits for in Sync: the number of preview frames of
// an event the worker sent.
type Want struct {
	EventID string
	Frames  uint32
}

// NewHub returns a Hub relaying through pool (nil: local delivery only)
// and registering its metrics on reg (nil: none).
func NewHub(pool *pgxpool.Pool, log *slog.Logger, reg prometheus.Registerer) *Hub {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	h := &Hub{pool: pool, log: log, origin: hex.EncodeToString(b), subs: map[string]map[*Subscription]struct{}{},
		relay: make(chan Frame, relayBuffer), m: newMetrics(), received: map[string]received{}, progress: make(chan struct{})}
	h.ownPrefix = `{"o":` + quote(h.origin) + `,`
	if reg != nil {
		h.m.register(reg)
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mango_preview_relay_backlog_frames",
			Help: "Preview frames queued for relay to the other replicas and not yet sent.",
		}, func() float64 { return float64(h.relayBacklog()) }))
	}
	return h
}

// relayBacklog is the number of frames queued for the relay and not yet
// published (or dropped).
func (h *Hub) relayBacklog() uint64 {
	h.relayMu.Lock()
	defer h.relayMu.Unlock()
	return h.queued - h.published
}

// Subscription is one stream's interest in the previews of a session.
type Subscription struct {
	// C delivers the frames, in order per event.
	C <-chan Frame

	c         chan Frame
	hub       *Hub
	sessionID string
	types     []string
	once      sync.Once

	mu        sync.Mutex
	started   map[string]bool
	broken    map[string]bool
	committed map[string]bool
	relayed   map[string]bool // started events previewed through the relay
}

// Subscribe registers interest in the previews of a session's events of the
// given types. Close the subscription when the stream ends.
func (h *Hub) Subscribe(sessionID string, types []string) *Subscription {
	c := make(chan Frame, subscriberBuffer)
	s := &Subscription{C: c, c: c, hub: h, sessionID: sessionID, types: slices.Clone(types),
		started: map[string]bool{}, broken: map[string]bool{}, committed: map[string]bool{}, relayed: map[string]bool{}}
	h.mu.Lock()
	set := h.subs[sessionID]
	if set == nil {
		set = map[*Subscription]struct{}{}
		h.subs[sessionID] = set
	}
	set[s] = struct{}{}
	h.mu.Unlock()
	return s
}

// Close unregisters the subscription; it is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() {
		h := s.hub
		h.mu.Lock()
		if set := h.subs[s.sessionID]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(h.subs, s.sessionID)
			}
		}
		h.mu.Unlock()
	})
}

// Committed tells the subscription that the complete event was written to
// its stream: later previews of it are stale and dropped.
func (s *Subscription) Committed(eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	track(s.committed, eventID)
}

// Written records that f was written to the subscriber's client: it counts
// the frame out and observes its end-to-end latency.
func (s *Subscription) Written(f Frame, at time.Time) {
	s.hub.m.out.Inc()
	if !f.ProducedAt.IsZero() {
		s.hub.m.latency.Observe(max(at.Sub(f.ProducedAt), 0).Seconds())
	}
}

// breakRelayed marks the events the subscriber was previewing through the
// relay as broken: frames of them may have been lost.
func (s *Subscription) breakRelayed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.relayed {
		track(s.broken, id)
	}
	clear(s.relayed)
}

func track(m map[string]bool, id string) {
	if len(m) >= maxTracked {
		clear(m)
	}
	m[id] = true
}

// offer hands f to the subscriber without blocking and reports the drop
// reason, if any. Once a frame of an event is dropped, the rest of that
// event is dropped too, so a client never sees a preview with a hole in
// the middle: it sees one that stops, then the complete event. relayed
// says that f came from another replica.
func (s *Subscription) offer(f Frame, relayed bool) string {
	if !slices.Contains(s.types, f.EventType) {
		return "" // not asked for: not a drop
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.committed[f.EventID]:
		return DropCommitted
	case f.Kind == KindStart:
		// A retried turn previews the event again from the start.
		delete(s.broken, f.EventID)
	case s.broken[f.EventID]:
		return DropBroken
	case !s.started[f.EventID]:
		return DropNoStart
	}
	select {
	case s.c <- f:
		if f.Kind == KindStart {
			track(s.started, f.EventID)
			if relayed {
				track(s.relayed, f.EventID)
			} else {
				delete(s.relayed, f.EventID)
			}
		}
		return ""
	default:
		track(s.broken, f.EventID)
		return DropSubscriberFull
	}
}

// Publish delivers frames a worker sent to this replica: to the local
// subscribers at once, and to the relay for the other replicas. It never
// blocks.
func (h *Hub) Publish(frames []Frame) {
	for _, f := range frames {
		if f.SessionID == "" || f.EventID == "" || (f.Kind != KindStart && f.Kind != KindDelta) {
			h.m.dropped.WithLabelValues(DropInvalid).Inc()
			continue
		}
		h.m.in.WithLabelValues("worker").Inc()
		h.deliver(f, false)
		h.relayMu.Lock()
		r := h.received[f.EventID]
		if f.Kind == KindStart {
			r.frames = 0 // a retried turn previews the event afresh
		}
		r.frames++
		if h.pool != nil {
			select {
			case h.relay <- f:
				h.queued++
				r.last = h.queued
			default:
				h.m.dropped.WithLabelValues(DropRelayFull).Inc()
			}
		}
		if len(h.received) >= maxReceived {
			clear(h.received)
		}
		h.received[f.EventID] = r
		h.advance()
		h.relayMu.Unlock()
	}
}

// advance wakes the Sync calls waiting; relayMu is held.
func (h *Hub) advance() {
	close(h.progress)
	h.progress = make(chan struct{})
}

// Sync waits, at most until ctx ends or maxWait passes, until this replica
// has received the preview frames the worker sent of each wanted event and
// relayed them to the other replicas. The ControlPlane calls it before
// committing previewed events: a worker's frames and its commit travel on
// different calls, and without it a subscriber could receive the commit's
// notification before the last deltas.
func (h *Hub) Sync(ctx context.Context, wants []Want, maxWait time.Duration) {
	if len(wants) == 0 {
		return
	}
	var timeout <-chan time.Time
	for {
		h.relayMu.Lock()
		done := true
		for _, w := range wants {
			r := h.received[w.EventID]
			if r.frames < w.Frames || h.published < r.last {
				done = false
				break
			}
		}
		if done {
			for _, w := range wants {
				delete(h.received, w.EventID)
			}
			h.relayMu.Unlock()
			return
		}
		wait := h.progress
		h.relayMu.Unlock()
		if timeout == nil {
			t := time.NewTimer(maxWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-wait:
		case <-timeout:
			return
		case <-ctx.Done():
			return
		}
	}
}

// markPublished records that n more frames left the relay queue.
func (h *Hub) markPublished(n int) {
	h.relayMu.Lock()
	h.published += uint64(n)
	h.advance()
	h.relayMu.Unlock()
}

// deliver hands f to the local subscribers; relayed says that it came from
// another replica rather than from a worker.
func (h *Hub) deliver(f Frame, relayed bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for s := range h.subs[f.SessionID] {
		if reason := s.offer(f, relayed); reason != "" {
			h.m.dropped.WithLabelValues(reason).Inc()
		}
	}
}

// Run publishes this replica's frames to the other replicas with NOTIFY
// until ctx ends. Their frames come in through Notify: register the Hub
// for [Channel] on the api-server's pglisten.Listener. Without a pool Run
// only waits for ctx.
func (h *Hub) Run(ctx context.Context) {
	if h.pool == nil {
		<-ctx.Done()
		return
	}
	h.publishLoop(ctx)
}

// Notify delivers the frames of a notification another replica sent on
// [Channel] to the local subscribers; this replica's own notifications are
// skipped (their frames were delivered when published). It implements
// pglisten.Handler.
func (h *Hub) Notify(payload string) {
	if strings.HasPrefix(payload, h.ownPrefix) {
		return
	}
	origin, frames, err := decode(payload)
	if err != nil {
		h.log.Warn("preview hub: undecodable notification", "err", err)
		return
	}
	if origin == h.origin {
		return
	}
	for _, f := range frames {
		h.m.in.WithLabelValues("relay").Inc()
		h.deliver(f, true)
	}
}

// Gap is called when listening on [Channel] (re)starts: frames relayed
// meanwhile were lost, so every preview a subscriber was receiving from
// another replica stops there (its later deltas are dropped as broken)
// rather than going on with a hole; the committed event follows as usual,
// and the next event_start previews afresh. It implements
// pglisten.Handler.
func (h *Hub) Gap() {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, set := range h.subs {
		for s := range set {
			s.breakRelayed()
		}
	}
}

// publishLoop sends queued frames with NOTIFY. It takes whatever is queued
// at once, so under load consecutive deltas of an event are coalesced into
// one frame and many frames share one notification, without waiting for
// more (no added latency when idle).
func (h *Hub) publishLoop(ctx context.Context) {
	var batch []Frame
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case f := <-h.relay:
			batch = append(batch, f)
		}
	drain:
		for len(batch) < 512 {
			select {
			case f := <-h.relay:
				batch = append(batch, f)
			default:
				break drain
			}
		}
		payloads := encode(h.origin, coalesce(batch))
		taken := len(batch)
		for i, p := range payloads {
			if _, err := h.pool.Exec(ctx, "SELECT pg_notify($1, $2)", Channel, p.data); err != nil {
				if ctx.Err() != nil {
					return
				}
				lost := 0
				for _, q := range payloads[i:] {
					lost += q.frames
				}
				h.m.dropped.WithLabelValues(DropRelayError).Add(float64(lost))
				h.log.WarnContext(ctx, "preview hub: notify failed; frames dropped", "err", err, "frames", lost)
				break
			}
			h.m.notifies.Inc()
		}
		h.markPublished(taken) // sent or dropped: either way no longer waited for
	}
}

var _ pglisten.Handler = (*Hub)(nil)
