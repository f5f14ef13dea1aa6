// Package pglisten runs the api-server's one PostgreSQL LISTEN connection
// and hands each notification to the handler of its channel.
//
// It is a thin layer over github.com/jackc/pgxlisten, which owns the
// connection, the LISTEN statements and the dispatch by channel. This
// package adds what the api-server's hubs need on top: a connection of its
// own outside the pool (a busy pool never delays a reconnect), capped
// exponential backoff between attempts, and [Handler.Gap], which tells every
// handler each time listening (re)starts that notifications sent before may
// have been missed.
package pglisten

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"
)

// Backoff between connection attempts: the first connection is opened at
// once; a retry waits MinBackoff, each further failed attempt twice as long
// up to MaxBackoff. It starts over once a connection listens on every
// channel.
const (
	MinBackoff = 100 * time.Millisecond
	MaxBackoff = 5 * time.Second
)

// Handler receives the notifications of one channel.
//
// Both methods are called on the listener's goroutine, one call at a time,
// in the order the notifications arrive; they must not block (hand slow
// work to another goroutine), since the next notification waits for them.
type Handler interface {
	// Notify is called with the payload of each notification on the channel.
	Notify(payload string)
	// Gap is called each time the listener starts listening on the channel:
	// once at start and again after every reconnect, before any
	// notification received on the new connection. Notifications sent
	// before it may have been lost; the handler re-reads or resets whatever
	// they would have told it.
	Gap()
}

// Listener listens on every channel registered with Handle, over one
// dedicated connection. Register the handlers, then call Run once.
type Listener struct {
	cfg *pgx.ConnConfig
	log *slog.Logger

	mu       sync.Mutex
	handlers map[string]Handler
	running  bool

	// waits paces the connection attempts after a failed or lost one; it
	// starts over once a connection listens on every channel. wait is
	// what the next attempt waits first (0: none, the first attempt).
	// listening counts the channels the current connection listens on.
	// Only Run's goroutine uses them.
	waits     backoff.ExponentialBackOff
	wait      time.Duration
	listening int
}

// New returns a Listener connecting with cfg (typically the pool's
// pgxpool.Config().ConnConfig) and logging lost connections to log.
func New(cfg *pgx.ConnConfig, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{cfg: cfg, log: log, handlers: map[string]Handler{},
		waits: backoff.ExponentialBackOff{InitialInterval: MinBackoff, Multiplier: 2, MaxInterval: MaxBackoff}}
}

// Handle registers h for the notifications of channel. It must be called
// before Run, at most once per channel; it panics otherwise, since either is
// a wiring mistake.
func (l *Listener) Handle(channel string, h Handler) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		panic(fmt.Sprintf("pglisten: Handle(%q) called after Run", channel))
	}
	if _, dup := l.handlers[channel]; dup {
		panic(fmt.Sprintf("pglisten: channel %q registered twice", channel))
	}
	l.handlers[channel] = h
}

// Run listens until ctx ends, reconnecting with backoff whenever the
// connection is lost or cannot be opened, and closes the connection before
// it returns. It returns nil when ctx ends, and an error only when no
// handler was registered.
func (l *Listener) Run(ctx context.Context) error {
	l.mu.Lock()
	if l.running {
		l.mu.Unlock()
		return errors.New("pglisten: Run called twice, want one Run per Listener")
	}
	l.running = true
	handlers := l.handlers
	l.mu.Unlock()
	if len(handlers) == 0 {
		return errors.New("pglisten: no channel registered, want Handle before Run")
	}
	listener := &pgxlisten.Listener{
		Connect: l.connect,
		// pgxlisten reports each failed or lost connection here, once
		// (the handlers never fail): the next attempt waits longer.
		LogError: func(ctx context.Context, err error) {
			l.wait = l.waits.NextBackOff()
			if ctx.Err() == nil {
				l.log.WarnContext(ctx, "not listening: connection failed or lost; reconnecting", "err", err, "backoff", l.wait)
			}
		},
		ReconnectDelay: -1, // connect waits the backoff itself
	}
	for channel, h := range handlers {
		listener.Handle(channel, &dispatch{l: l, h: h})
	}
	_ = listener.Listen(ctx) // returns only when ctx ends: ctx.Err()
	return nil
}

// connect waits the backoff owed to earlier failed attempts, then opens the
// dedicated connection.
func (l *Listener) connect(ctx context.Context) (*pgx.Conn, error) {
	if l.wait > 0 {
		t := time.NewTimer(l.wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	l.listening = 0
	return pgx.ConnectConfig(ctx, l.cfg)
}

// dispatch adapts a Handler to pgxlisten's handler interfaces.
type dispatch struct {
	l *Listener
	h Handler
}

// HandleNotification hands the payload to the handler.
func (d *dispatch) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	d.h.Notify(n.Payload)
	return nil
}

// HandleBacklog runs right after LISTEN on a new connection succeeded:
// the handler learns of the gap before any notification of the connection.
func (d *dispatch) HandleBacklog(context.Context, string, *pgx.Conn) error {
	d.h.Gap()
	if d.l.listening++; d.l.listening == len(d.l.handlers) {
		d.l.waits.Reset() // connected: the next loss waits MinBackoff only
	}
	return nil
}

var (
	_ pgxlisten.Handler        = (*dispatch)(nil)
	_ pgxlisten.BacklogHandler = (*dispatch)(nil)
)
