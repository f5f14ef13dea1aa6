// Package interrupts relays committed user.interrupt events to the
// execution workers' interrupt streams (ControlPlane WatchInterrupts).
//
// The store announces every interrupt that wakes a session's workflow on
// [db.InterruptChannel], in the transaction that commits it. Each replica's
// one pglisten.Listener hands those notifications to its [Hub], which
// forwards each interrupt to every worker stream connected to this replica:
// the replica that accepted the interrupt need not be the one holding the
// stream of the worker running the turn. Interrupts are rare, so every
// stream gets every interrupt and workers ignore the sessions they do not
// run.
//
// The push is an accelerator, not the source of truth: the Session
// Workflow still cancels the turn's activity, which reaches the worker with
// the next heartbeat response. So the hub never blocks the listener: a
// stream whose buffer is full loses the interrupt (counted), and
// interrupts committed while the listener reconnects are not replayed.
package interrupts

import (
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mangohq/mango/db"
)

// Channel is the PostgreSQL channel the hub handles.
const Channel = db.InterruptChannel

// Buffer bounds the interrupts waiting to be sent on one stream; more are
// dropped (the heartbeat path still stops the turn).
const Buffer = 64

// Interrupt is one committed user.interrupt of a running session.
type Interrupt = db.Interrupt

// Hub forwards the interrupts announced on Channel to the subscribed
// streams. It implements pglisten.Handler. The zero value is not usable;
// create one with NewHub.
type Hub struct {
	log *slog.Logger

	mu   sync.Mutex
	subs map[*Subscription]struct{}

	received prometheus.Counter
	sent     prometheus.Counter
	dropped  prometheus.Counter
	streams  prometheus.GaugeFunc
}

// NewHub returns a hub registering its metrics with reg (nil: none).
func NewHub(log *slog.Logger, reg prometheus.Registerer) *Hub {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Hub{log: log, subs: map[*Subscription]struct{}{},
		received: prometheus.NewCounter(prometheus.CounterOpts{Name: "mango_interrupts_received_total",
			Help: "user.interrupt notifications this replica received from PostgreSQL (committed on any replica)."}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "mango_interrupts_sent_total",
			Help: "Interrupts queued to worker interrupt streams (one per stream per interrupt)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "mango_interrupts_dropped_total",
			Help: "Interrupts not queued to a worker stream whose buffer was full; the heartbeat path still stops the turn."}),
	}
	h.streams = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mango_interrupts_streams",
		Help: "Worker interrupt streams connected to this replica."}, func() float64 { return float64(h.Streams()) })
	if reg != nil {
		reg.MustRegister(h.received, h.sent, h.dropped, h.streams)
	}
	return h
}

// Subscription is one worker stream's view of the hub.
type Subscription struct {
	h *Hub
	c chan Interrupt
}

// C delivers the interrupts, in the order they were committed on each
// session.
func (s *Subscription) C() <-chan Interrupt { return s.c }

// Close unsubscribes; C receives nothing more. It is idempotent.
func (s *Subscription) Close() {
	s.h.mu.Lock()
	delete(s.h.subs, s)
	s.h.mu.Unlock()
}

// Subscribe returns a subscription receiving every interrupt notified from
// now on, buffered up to Buffer.
func (h *Hub) Subscribe() *Subscription {
	s := &Subscription{h: h, c: make(chan Interrupt, Buffer)}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

// Streams counts the current subscriptions.
func (h *Hub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Notify forwards the interrupt a notification announces to every
// subscription without blocking. It implements pglisten.Handler.
func (h *Hub) Notify(payload string) {
	var in Interrupt
	if err := json.Unmarshal([]byte(payload), &in); err != nil || in.SessionID == "" || in.EventID == "" {
		h.log.Warn("interrupt hub: undecodable notification, want {session_id, event_id, seq}", "payload_bytes", len(payload), "err", err)
		return
	}
	h.received.Inc()
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.c <- in:
			h.sent.Inc()
		default:
			h.dropped.Inc()
		}
	}
}

// Gap is called when the listener (re)starts listening: interrupts
// committed meanwhile were not pushed, and are not replayed, since the
// Session Workflow's cancellation stops their turns anyway. It implements
// pglisten.Handler.
func (h *Hub) Gap() {}
