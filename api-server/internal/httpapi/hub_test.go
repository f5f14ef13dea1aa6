package httpapi

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestHubWakesTheSessionsStreamsOncePerNotification checks the event hub's
// pglisten.Handler side: a commit notification wakes every stream of its
// session (coalesced while one is pending) and no other; a gap wakes them
// all; Close ends them.
func TestHubWakesTheSessionsStreamsOncePerNotification(t *testing.T) {
	t.Parallel()
	h := NewHub(prometheus.NewRegistry())
	a1, cancelA1 := h.Subscribe("sesn_a")
	defer cancelA1()
	a2, cancelA2 := h.Subscribe("sesn_a")
	defer cancelA2()
	b, cancelB := h.Subscribe("sesn_b")
	defer cancelB()
	woken := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	h.Notify("sesn_a:7")
	h.Notify("sesn_a:8") // coalesced with the pending wake-up
	if !woken(a1) || !woken(a2) {
		t.Fatal("a notification of sesn_a did not wake both of its streams")
	}
	if woken(a1) || woken(a2) || woken(b) {
		t.Fatal("two notifications while pending woke a stream twice, or woke another session's stream")
	}

	h.Gap()
	if !woken(a1) || !woken(a2) || !woken(b) {
		t.Fatal("a gap did not wake every stream")
	}

	cancelB()
	h.Notify("sesn_b:1")
	if woken(b) {
		t.Fatal("a cancelled subscription was woken")
	}

	h.Close()
	h.Close() // idempotent
	select {
	case <-h.Done():
	default:
		t.Fatal("Done is open after Close, want it closed")
	}
}
