package preview

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestEncodeSplitsUnderTheNotifyLimit(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é\"\n", 9000) // escapes grow the JSON
	in := []Frame{
		{SessionID: "sesn_1", EventID: "sevt_1", Kind: KindStart, EventType: "agent.message", ProducedAt: time.Unix(0, 42)},
		{SessionID: "sesn_1", EventID: "sevt_1", Kind: KindDelta, EventType: "agent.message", Text: long},
	}
	payloads := encode("origin", coalesce(in))
	var text strings.Builder
	for _, p := range payloads {
		if len(p.data) >= 8000 {
			t.Fatalf("payload of %d bytes, want < 8000", len(p.data))
		}
		origin, frames, err := decode(p.data)
		if err != nil || origin != "origin" {
			t.Fatalf("decode = %q, %v", origin, err)
		}
		for _, f := range frames {
			text.WriteString(f.Text)
		}
	}
	if len(payloads) < 2 || text.String() != long {
		t.Fatalf("%d payloads carrying %d bytes of text, want several carrying the %d bytes", len(payloads), text.Len(), len(long))
	}
}

func TestCoalesceKeepsOrderPerEvent(t *testing.T) {
	t.Parallel()
	d := func(ev, text string) Frame {
		return Frame{SessionID: "s", EventID: ev, Kind: KindDelta, EventType: "agent.message", Text: text}
	}
	out := coalesce([]Frame{{SessionID: "s", EventID: "a", Kind: KindStart}, d("a", "1"), d("b", "x"), d("a", "2"), d("b", "y")})
	if len(out) != 3 || out[1].Text != "12" || out[2].Text != "xy" {
		t.Fatalf("coalesce = %+v, want start a, a:12, b:xy", out)
	}
}

func TestSubscriptionDropsConsistently(t *testing.T) {
	t.Parallel()
	h := NewHub(nil, nil, nil)
	sub := h.Subscribe("s", []string{"agent.message"})
	defer sub.Close()
	plain := h.Subscribe("s", []string{"agent.thinking"})
	defer plain.Close()
	start := Frame{SessionID: "s", EventID: "e", Kind: KindStart, EventType: "agent.message"}
	delta := Frame{SessionID: "s", EventID: "e", Kind: KindDelta, EventType: "agent.message", Text: "t"}
	h.Publish([]Frame{delta}) // no start seen: dropped
	h.Publish([]Frame{start})
	for range subscriberBuffer + 10 {
		h.Publish([]Frame{delta}) // overflows, then the event is broken
	}
	if got := len(sub.C); got != subscriberBuffer {
		t.Fatalf("buffered %d frames, want %d", got, subscriberBuffer)
	}
	for range subscriberBuffer {
		<-sub.C
	}
	h.Publish([]Frame{delta})
	if len(sub.C) != 0 {
		t.Fatal("a delta after a dropped one was delivered, want the rest of the event dropped")
	}
	h.Publish([]Frame{start, delta}) // a retried turn starts over
	if len(sub.C) != 2 {
		t.Fatalf("after a new start got %d frames, want 2", len(sub.C))
	}
	<-sub.C
	<-sub.C
	sub.Committed("e")
	h.Publish([]Frame{start, delta})
	if len(sub.C) != 0 || len(plain.C) != 0 {
		t.Fatal("frames delivered after the commit or to a subscriber of other types")
	}
}

// TestSyncWaitsForTheFramesTheWorkerSent: a commit that announces n
// frames of its event waits until the Hub has received n (the worker's
// frames travel on another call than its commit, and may arrive after
// it), counting from the event's latest start, and gives up after maxWait
// when they never come.
func TestSyncWaitsForTheFramesTheWorkerSent(t *testing.T) {
	t.Parallel()
	h := NewHub(nil, nil, nil)
	start := Frame{SessionID: "s", EventID: "e", Kind: KindStart, EventType: "agent.message"}
	delta := Frame{SessionID: "s", EventID: "e", Kind: KindDelta, EventType: "agent.message", Text: "t"}
	h.Publish([]Frame{start, delta, delta})
	h.Publish([]Frame{start}) // a retried turn previews it afresh: 1 frame now
	synced := make(chan struct{})
	go func() {
		h.Sync(context.Background(), []Want{{EventID: "e", Frames: 3}}, time.Minute)
		close(synced)
	}()
	h.Publish([]Frame{delta})
	select {
	case <-synced:
		t.Fatal("Sync returned with 2 of the 3 frames since the latest start received")
	case <-time.After(20 * time.Millisecond):
	}
	h.Publish([]Frame{delta})
	<-synced // returns once the third arrives

	begun := time.Now()
	h.Sync(context.Background(), []Want{{EventID: "never", Frames: 1}}, 30*time.Millisecond)
	if waited := time.Since(begun); waited < 30*time.Millisecond {
		t.Fatalf("Sync for frames that never come returned after %v, want maxWait (30ms)", waited)
	}
	h.Sync(context.Background(), nil, time.Minute) // nothing previewed: no wait
}
