// Package poll waits in tests for a state that other goroutines or
// processes reach on their own time, and says what it waited for when the
// state never came.
//
// Use it where no readiness signal (a channel, a hook, an event ordered
// after the awaited one) exists, typically when the state lives in another
// process, a container or a database. Inside a testing/synctest bubble the
// waits run on the bubble's fake clock.
package poll

import (
	"testing"
	"time"
)

// The pause between two checks of a condition starts at FirstInterval
// and doubles up to MaxInterval: a state reached at once is seen at once,
// and a slow one (a container, another process) is not asked about more
// than ten times a second.
const (
	FirstInterval = 10 * time.Millisecond
	MaxInterval   = 100 * time.Millisecond
)

// Until calls cond until it reports ok (pausing between calls as
// described at FirstInterval), and fails tb (Fatalf) when timeout passes
// first; the last call is made at the deadline. The failure names what was awaited
// and the status cond reported last, so a timeout reads as "expected X,
// last seen Y". cond is called at least once, also with a timeout of zero.
// Until must be called from the test's goroutine.
func Until(tb testing.TB, timeout time.Duration, what string, cond func() (ok bool, status string)) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for pause := FirstInterval; ; pause = min(2*pause, MaxInterval) {
		ok, status := cond()
		if ok {
			return
		}
		if !time.Now().Before(deadline) {
			tb.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, status)
			return
		}
		time.Sleep(min(pause, time.Until(deadline)))
	}
}

// Never checks for window (pausing as Until does, the last check at the
// end of the window) that happened reports false, and fails tb (Fatalf) as
// soon as it reports true. It is the bounded wait behind a
// test that proves something did NOT happen when nothing observable is
// ordered after the thing that could have caused it: what names the event
// that must not happen, and the status comes into the failure message.
// Prefer a positive signal (a later event, synctest.Wait) where one exists.
// Never must be called from the test's goroutine.
func Never(tb testing.TB, window time.Duration, what string, happened func() (yes bool, status string)) {
	tb.Helper()
	deadline := time.Now().Add(window)
	for pause := FirstInterval; ; pause = min(2*pause, MaxInterval) {
		if yes, status := happened(); yes {
			tb.Fatalf("expected no %s within %v, but it happened: %s", what, window, status)
			return
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(min(pause, time.Until(deadline)))
	}
}
