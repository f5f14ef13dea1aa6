// Package broadcast wakes the goroutines waiting on a key when a
// PostgreSQL notification names that key: a long poll of an environment's
// work queue waits on the environment's id, a worker awaiting a
// self-hosted tool result waits on the session's id.
//
// A wake-up only says "look again": waiters re-read the database, so a
// coalesced or lost notification loses nothing but time, and after a gap
// in listening (start, reconnect) every waiter is woken.
package broadcast

import (
	"strings"
	"sync"
)

// Keyed wakes waiters by key. It implements pglisten.Handler: Notify takes
// the notification's payload, whose key is what precedes the first ':' (the
// whole payload when there is none). The zero value is ready to use.
type Keyed struct {
	mu    sync.Mutex
	waits map[string]chan struct{}
}

// Wait returns a channel closed at the next notification for key (or the
// next gap). Take it before reading the state the notification would
// change, then read, then wait: a change committed after the read closes
// the channel.
func (k *Keyed) Wait(key string) <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.waits == nil {
		k.waits = map[string]chan struct{}{}
	}
	ch, ok := k.waits[key]
	if !ok {
		ch = make(chan struct{})
		k.waits[key] = ch
	}
	return ch
}

// Notify wakes the waiters of the payload's key.
func (k *Keyed) Notify(payload string) {
	key, _, _ := strings.Cut(payload, ":")
	k.Wake(key)
}

// Wake wakes the waiters of key, as a notification naming it does.
func (k *Keyed) Wake(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ch, ok := k.waits[key]; ok {
		close(ch)
		delete(k.waits, key)
	}
}

// Gap wakes every waiter: notifications may have been missed.
func (k *Keyed) Gap() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, ch := range k.waits {
		close(ch)
		delete(k.waits, key)
	}
}

// Handler is the pglisten.Handler interface, repeated here so that Tee
// needs no import of pglisten.
type Handler interface {
	Notify(payload string)
	Gap()
}

// Tee hands every notification and gap to each of handlers in order: one
// channel, several consumers (pglisten takes one handler per channel).
func Tee(handlers ...Handler) Handler { return tee(handlers) }

type tee []Handler

func (t tee) Notify(payload string) {
	for _, h := range t {
		h.Notify(payload)
	}
}

func (t tee) Gap() {
	for _, h := range t {
		h.Gap()
	}
}
