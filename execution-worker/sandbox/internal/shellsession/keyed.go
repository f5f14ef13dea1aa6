package shellsession

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Keyed is a sandbox value's persistent shells, one [Session] per shell key
// ([sandbox.ShellKey]), each created on first use. It keeps at most limit
// sessions besides the default one (key ""): making one more closes the
// least recently used keyed session, preferring one no call is running.
// The next use of an evicted key starts a new shell in the last working
// directory its old one reported, as a replacement
// ([sandbox.ShellResult.NewShell]).
type Keyed struct {
	newSession func() *Session
	limit      int

	mu       sync.Mutex
	sessions map[string]*keyedSession
	evicted  map[string]string // last directory of evicted keys, at most limit
	clock    uint64            // counts uses, for least-recently-used eviction
	closed   bool
}

// keyedSession is a session and when it was last used.
type keyedSession struct {
	s    *Session
	used uint64
}

// NewKeyed returns an empty set of sessions made by newSession, keeping at
// most limit keyed sessions besides the default one.
func NewKeyed(newSession func() *Session, limit int) *Keyed {
	return &Keyed{newSession: newSession, limit: limit, sessions: map[string]*keyedSession{}, evicted: map[string]string{}}
}

// Get returns the session of key, creating it if needed. After Close it
// returns a closed session, whose calls return ErrClosed.
func (k *Keyed) Get(key string) *Session {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		s := k.newSession()
		s.Close()
		return s
	}
	k.clock++
	if e, ok := k.sessions[key]; ok {
		e.used = k.clock
		k.mu.Unlock()
		return e.s
	}
	s := k.newSession()
	if dir, ok := k.evicted[key]; ok {
		delete(k.evicted, key)
		s.dir, s.replaced = dir, true
	}
	k.sessions[key] = &keyedSession{s: s, used: k.clock}
	victimKey, victim := k.victim(key)
	if victim != nil {
		delete(k.sessions, victimKey)
		k.forget(victimKey, victim)
	}
	k.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return s
}

// victim returns the session to evict when there are more than limit keyed
// sessions: the least recently used idle one, else the least recently
// used, never the default one nor that of key (just made). The caller
// holds k.mu.
func (k *Keyed) victim(key string) (string, *Session) {
	if len(k.sessions)-k.hasDefault() <= k.limit {
		return "", nil
	}
	var victim string
	var best *keyedSession
	for kk, e := range k.sessions {
		if kk == "" || kk == key {
			continue
		}
		if best == nil || better(e, best) {
			victim, best = kk, e
		}
	}
	if best == nil {
		return "", nil
	}
	return victim, best.s
}

// better reports whether a should be evicted before b.
func better(a, b *keyedSession) bool {
	if ai, bi := a.s.Idle(), b.s.Idle(); ai != bi {
		return ai
	}
	return a.used < b.used
}

func (k *Keyed) hasDefault() int {
	if _, ok := k.sessions[""]; ok {
		return 1
	}
	return 0
}

// forget records the last directory of an evicted session, for the next
// session of its key. The caller holds k.mu.
func (k *Keyed) forget(key string, s *Session) {
	s.mu.Lock()
	dir := s.dir
	s.mu.Unlock()
	if len(k.evicted) >= k.limit {
		for kk := range k.evicted {
			delete(k.evicted, kk)
			break
		}
	}
	k.evicted[key] = dir
}

// Run runs req in the session of key (see [Session.Run]). A session
// evicted between its lookup and the call is looked up again.
func (k *Keyed) Run(ctx context.Context, key string, req sandbox.ExecRequest, timeout time.Duration, limit int) (*sandbox.ShellResult, error) {
	for tries := 0; ; tries++ {
		res, err := k.Get(key).Run(ctx, req, timeout, limit)
		if errors.Is(err, ErrClosed) && !k.isClosed() && tries < 3 {
			continue
		}
		return res, err
	}
}

// Start starts the shell of key (see [Session.Start]), looking the session
// up again when it was evicted meanwhile.
func (k *Keyed) Start(ctx context.Context, key string) error {
	for tries := 0; ; tries++ {
		err := k.Get(key).Start(ctx)
		if errors.Is(err, ErrClosed) && !k.isClosed() && tries < 3 {
			continue
		}
		return err
	}
}

// Restart kills the shell of key (see [Session.Restart]); a key without a
// session has nothing to restart.
func (k *Keyed) Restart(ctx context.Context, key string) error {
	k.mu.Lock()
	delete(k.evicted, key) // the next session starts in Root, as new
	e, ok := k.sessions[key]
	k.mu.Unlock()
	if !ok {
		return nil
	}
	return e.s.Restart(ctx)
}

// Each calls f with every session (outside Keyed's lock).
func (k *Keyed) Each(f func(*Session)) {
	k.mu.Lock()
	all := make([]*Session, 0, len(k.sessions))
	for _, e := range k.sessions {
		all = append(all, e.s)
	}
	k.mu.Unlock()
	for _, s := range all {
		f(s)
	}
}

// Close closes every session; later ones are made closed. It is
// idempotent.
func (k *Keyed) Close() {
	k.mu.Lock()
	all := k.sessions
	k.sessions, k.evicted, k.closed = map[string]*keyedSession{}, map[string]string{}, true
	k.mu.Unlock()
	for _, e := range all {
		e.s.Close()
	}
}

func (k *Keyed) isClosed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.closed
}
