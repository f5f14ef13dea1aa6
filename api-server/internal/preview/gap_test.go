package preview

import "testing"

// TestGapStopsRelayedPreviewsOnly checks that after a gap in listening a
// preview relayed from another replica stops (its frames may have been
// lost, and a hole must not show), while a preview from a local worker goes
// on, and that a new event_start previews the relayed event afresh.
func TestGapStopsRelayedPreviewsOnly(t *testing.T) {
	t.Parallel()
	h := NewHub(nil, nil, nil)
	sub := h.Subscribe("s", []string{"agent.message"})
	defer sub.Close()
	frame := func(ev string, k Kind) Frame {
		return Frame{SessionID: "s", EventID: ev, Kind: k, EventType: "agent.message", Text: "t"}
	}
	relay := func(frames ...Frame) {
		t.Helper()
		for _, p := range encode("other-replica", frames) {
			h.Notify(p.data)
		}
	}
	receive := func(want int, what string) {
		t.Helper()
		if got := len(sub.C); got != want {
			t.Fatalf("%s: %d frames buffered, want %d", what, got, want)
		}
		for range want {
			<-sub.C
		}
	}
	relay(frame("remote", KindStart), frame("remote", KindDelta))
	h.Publish([]Frame{frame("local", KindStart), frame("local", KindDelta)})
	receive(4, "before the gap")

	h.Gap()
	relay(frame("remote", KindDelta))
	h.Publish([]Frame{frame("local", KindDelta)})
	receive(1, "after the gap (the local delta only)")

	relay(frame("remote", KindStart), frame("remote", KindDelta))
	receive(2, "after a new start of the relayed event")
}
