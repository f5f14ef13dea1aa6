package eventhub

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mangohq/mango/db"
)

// memLog is an in-memory event log with the two reads a feed makes,
// counting them (the PostgreSQL side is covered by the wire tests).
type memLog struct {
	mu       sync.Mutex
	events   []db.Event
	deleted  bool
	reads    int
	sessions int
}

func (l *memLog) add(n int) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		seq := int64(len(l.events) + 1)
		l.events = append(l.events, db.Event{Seq: seq, ID: fmt.Sprintf("sevt_%d", seq), Type: "user.message", Body: []byte(`{"content":[]}`)})
	}
	return int64(len(l.events))
}

func (l *memLog) EventsAfter(_ context.Context, _ string, seq int64, limit int) ([]db.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	out := l.events[min(int(seq), len(l.events)):]
	return append([]db.Event(nil), out[:min(limit, len(out))]...), nil
}

func (l *memLog) SessionGet(context.Context, string) (*db.Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sessions++
	if l.deleted {
		return nil, db.ErrNotFound
	}
	return &db.Session{LastSeq: int64(len(l.events))}, nil
}

func (l *memLog) counts() (reads, sessions int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads, l.sessions
}

// next waits until w has frames after pos or another status, and returns
// them.
func next(t *testing.T, w *Watch, pos int64) ([]Frame, Status) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		frames, st, changed := w.Next(pos)
		if len(frames) > 0 || st != Wait {
			return frames, st
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("nothing after seq %d within 10s", pos)
		}
	}
}

func seqs(fs []Frame) []int64 {
	out := make([]int64, len(fs))
	for i := range fs {
		out[i] = fs[i].Seq
	}
	return out
}

// TestFeedReadsOncePerWakeUpForAllStreams: however many streams watch a
// session, a commit notification costs one read of its log, and each
// stream gets the same encoded frames; a notification of events already
// read costs no read at all.
func TestFeedReadsOncePerWakeUpForAllStreams(t *testing.T) {
	t.Parallel()
	// In a bubble, synctest.Wait tells when the feed has done all a
	// notification can make it do.
	synctest.Test(t, testFeedReadsOncePerWakeUpForAllStreams)
}

func testFeedReadsOncePerWakeUpForAllStreams(t *testing.T) {
	h := New(prometheus.NewRegistry(), 0)
	defer h.Close()
	log := &memLog{}
	log.add(2) // before the streams: not sent to them
	const streams = 200
	watches := make([]*Watch, streams)
	for i := range watches {
		watches[i] = h.Subscribe(log, "sesn_a")
		defer watches[i].Close()
	}
	started(t, watches[0]) // the feed learns the position once
	for _, w := range watches {
		w.Next(2) // each stream writes what is there (nothing) and waits
	}

	last := log.add(3)
	h.Notify(fmt.Sprintf("sesn_a:%d", last))
	for i, w := range watches {
		frames, st := next(t, w, 2)
		if st != Wait || fmt.Sprint(seqs(frames)) != "[3 4 5]" {
			t.Fatalf("stream %d got %v (status %d), want events 3..5", i, seqs(frames), st)
		}
		if !strings.HasPrefix(string(frames[0].Data), "id: sevt_3\nevent: user.message\ndata: {\"id\":\"sevt_3\"") {
			t.Fatalf("Frame = %q, want the SSE Frame of sevt_3", frames[0].Data)
		}
	}
	if reads, sessions := log.counts(); reads != 1 || sessions != 1 {
		t.Fatalf("%d streams cost %d log reads and %d session reads, want 1 and 1", streams, reads, sessions)
	}
	h.Notify(fmt.Sprintf("sesn_a:%d", last)) // already read
	h.Notify("sesn_other:9")                 // no stream here
	synctest.Wait()                          // the feed, were it woken, has read by now
	if reads, _ := log.counts(); reads != 1 {
		t.Fatalf("notifications of events already read cost %d reads, want none", reads-1)
	}
	if got := testutil.ToFloat64(h.reads); got != 1 {
		t.Fatalf("mango_stream_feed_reads_total = %v, want 1", got)
	}
}

// TestSlowStreamIsCutOthersGoOn: a stream that stops writing holds the
// feed's frames only up to its bounds; past them it is cut (and told so
// with End) while the streams keeping up receive every event.
func TestSlowStreamIsCutOthersGoOn(t *testing.T) {
	t.Parallel()
	h := New(prometheus.NewRegistry(), 8)
	defer h.Close()
	log := &memLog{}
	slow, fast := h.Subscribe(log, "sesn_a"), h.Subscribe(log, "sesn_a")
	defer slow.Close()
	defer fast.Close()
	started(t, fast)
	slow.Next(0)
	fast.Next(0)
	last := log.add(3)
	h.Notify(fmt.Sprintf("sesn_a:%d", last))
	if frames, _ := next(t, slow, 0); len(frames) != 3 {
		t.Fatalf("slow stream got %d frames, want 3", len(frames))
	}
	// slow now stops at seq 0; fast keeps up with 20 more events.
	var pos int64
	for pos < 23 {
		if pos == last {
			last = log.add(1 + int(last)%3)
			h.Notify(fmt.Sprintf("sesn_a:%d", last))
		}
		frames, st := next(t, fast, pos)
		if st != Wait || frames[0].Seq != pos+1 {
			t.Fatalf("fast stream at %d got %v (status %d), want the next events", pos, seqs(frames), st)
		}
		pos = frames[len(frames)-1].Seq
	}
	if _, st, _ := slow.Next(0); st != End {
		t.Fatalf("slow stream status %d after falling %d events behind a feed of 8, want end (cut)", st, pos)
	}
	if got := testutil.ToFloat64(h.cuts.WithLabelValues("slow")); got != 1 {
		t.Fatalf("mango_stream_cut_total{reason=slow} = %v, want 1", got)
	}
	h.feeds["sesn_a"].mu.Lock()
	held := len(h.feeds["sesn_a"].frames)
	h.feeds["sesn_a"].mu.Unlock()
	if held > 8 {
		t.Fatalf("feed holds %d frames, want at most its bound 8", held)
	}
}

// TestStreamBehindTheFeedReadsWhatItMissed: a stream starting before the
// feed's frames (a reconnect with Last-Event-ID) is told to read the log
// itself, then joins the feed.
func TestStreamBehindTheFeedReadsWhatItMissed(t *testing.T) {
	t.Parallel()
	h := New(prometheus.NewRegistry(), 0)
	defer h.Close()
	log := &memLog{}
	log.add(10)
	w := h.Subscribe(log, "sesn_a")
	defer w.Close()
	started(t, w)
	if _, st := next(t, w, 4); st != Behind {
		t.Fatalf("status %d at seq 4 of 10, want behind", st)
	}
	if frames, st, _ := w.Next(10); st != Wait || len(frames) != 0 {
		t.Fatalf("at the feed's head: %v status %d, want nothing to write and wait", seqs(frames), st)
	}
}

// TestFeedSeesDeletionAndGaps: a deletion notification or a gap in
// listening makes the feed ask the session; a deleted session ends its
// streams with Deleted; after a gap, events committed meanwhile are
// read.
func TestFeedSeesDeletionAndGaps(t *testing.T) {
	t.Parallel()
	h := New(prometheus.NewRegistry(), 0)
	defer h.Close()
	log := &memLog{}
	w := h.Subscribe(log, "sesn_a")
	defer w.Close()
	started(t, w)
	w.Next(0)  // the stream joins the feed, as a real one does before waiting
	log.add(2) // committed while nobody listened
	h.Gap()
	if frames, _ := next(t, w, 0); len(frames) != 2 {
		t.Fatalf("after a gap got %v, want the 2 events committed meanwhile", seqs(frames))
	}
	log.mu.Lock()
	log.deleted = true
	log.mu.Unlock()
	h.Notify("sesn_a:deleted")
	if _, st := next(t, w, 2); st != Deleted {
		t.Fatalf("status %d after the deletion, want deleted", st)
	}
}

// TestHubForgetsFeedsAndCloses: the last stream's Close stops its feed;
// Close ends every stream (Done).
func TestHubForgetsFeedsAndCloses(t *testing.T) {
	t.Parallel()
	h := New(prometheus.NewRegistry(), 0)
	log := &memLog{}
	a, b := h.Subscribe(log, "sesn_a"), h.Subscribe(log, "sesn_a")
	a.Close()
	a.Close() // idempotent
	if got := testutil.ToFloat64(h.feedGauge); got != 1 {
		t.Fatalf("feeds = %v with one stream left, want 1", got)
	}
	b.Close()
	if got := testutil.ToFloat64(h.feedGauge); got != 0 || len(h.feeds) != 0 {
		t.Fatalf("feeds = %v (%d registered) with no stream, want 0", got, len(h.feeds))
	}
	h.Close()
	h.Close()
	select {
	case <-h.Done():
	default:
		t.Fatal("Done is open after Close, want it closed")
	}
}

// started waits until w's feed knows the session's position.
func started(t *testing.T, w *Watch) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		w.f.mu.Lock()
		state, changed := w.f.state, w.f.changed
		w.f.mu.Unlock()
		if state != feedStarting {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the feed did not start within 10s")
		}
	}
}
