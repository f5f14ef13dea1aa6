package httpapi

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/mangohq/mango/api-server/internal/pglisten"
	"github.com/mangohq/mango/db"
)

// Hub wakes SSE streams when their session's log changes. It handles
// db.NotifyChannel on the api-server's one pglisten.Listener, so a commit
// through any replica reaches streams on every replica: each notification
// wakes every stream of its session on this replica once. A wake-up only
// says "look again": streams re-read the authoritative log from their last
// sequence number, so coalesced or lost notifications lose nothing. After
// a gap in listening (start, reconnect) every stream is woken, covering
// what was missed.
type Hub struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}

	done     chan struct{}
	doneOnce sync.Once

	// reads coalesces identical log reads: the streams of one session wake
	// together and ask for the same events, which are read once.
	reads singleflight.Group

	subscribers prometheus.Gauge
	notified    prometheus.Counter
}

// NewHub returns a Hub registering its metrics on reg; register it with
// pglisten.Listener.Handle for db.NotifyChannel, and Close it at shutdown.
func NewHub(reg prometheus.Registerer) *Hub {
	h := &Hub{subs: map[string]map[chan struct{}]struct{}{}, done: make(chan struct{}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mango_stream_subscribers",
			Help: "Open SSE event streams on this api-server.",
		}),
		notified: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mango_stream_notifications_total",
			Help: "Commit notifications received from PostgreSQL.",
		}),
	}
	reg.MustRegister(h.subscribers, h.notified)
	return h
}

// Subscribe registers interest in a session. The returned channel receives
// (coalesced) wake-ups; cancel unregisters.
func (h *Hub) Subscribe(sessionID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	set := h.subs[sessionID]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		h.subs[sessionID] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	h.subscribers.Inc()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			delete(set, ch)
			if len(set) == 0 {
				delete(h.subs, sessionID)
			}
			h.mu.Unlock()
			h.subscribers.Dec()
		})
	}
}

func (h *Hub) wake(sessionID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[sessionID] {
		select {
		case ch <- struct{}{}:
		default: // already pending: coalesce
		}
	}
}

func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.subs {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Notify handles a commit notification (payload "<session id>:<last
// seq>", see db.NotifyChannel): it wakes the session's streams. It
// implements pglisten.Handler.
func (h *Hub) Notify(payload string) {
	h.notified.Inc()
	sessionID, _, _ := strings.Cut(payload, ":")
	h.wake(sessionID)
}

// Gap wakes every stream: commits notified while nobody listened are found
// by re-reading the log. It implements pglisten.Handler.
func (h *Hub) Gap() { h.wakeAll() }

// Done is closed by Close (at shutdown): streams end then, so that the
// HTTP server can drain.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Close ends every stream (see Done); it is idempotent.
func (h *Hub) Close() { h.doneOnce.Do(func() { close(h.done) }) }

// EventsAfter reads up to limit events of a session after seq, sharing one
// database read among all streams asking for the same position at once.
func (h *Hub) EventsAfter(ctx context.Context, store *db.Store, sessionID string, seq int64, limit int) ([]db.Event, error) {
	key := sessionID + ":" + strconv.FormatInt(seq, 10) + ":" + strconv.Itoa(limit)
	ch := h.reads.DoChan(key, func() (any, error) {
		// Detached from any one caller, so a disconnecting client does not
		// fail the read for the others.
		readCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return store.EventsAfter(readCtx, sessionID, seq, limit)
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.([]db.Event), nil
	}
}

var _ pglisten.Handler = (*Hub)(nil)
