package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// TestAppendWithTranscript: transcript entries commit with the events or
// not at all, and a retry skips what is stored.
func TestAppendWithTranscript(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	wakeSession(t, store, "sesn_transcript", 0)
	now := time.Now().UTC()
	entry := func(key, body string) db.TranscriptEntry {
		return db.TranscriptEntry{Key: key, Body: json.RawMessage(body)}
	}
	refused := errors.New("refused")
	_, _, err := store.Append(ctx, "sesn_transcript", &db.AppendRequest{
		Events:     []db.NewEvent{{ID: "sevt_t1", Type: "span.model_request_start", Body: json.RawMessage(`{}`), Key: "t/1"}},
		Transcript: []db.TranscriptEntry{entry("t/0", `{"role":"user"}`)},
		Decide:     func(*db.Session) (*db.Change, error) { return nil, refused },
		Now:        now,
	})
	if !errors.Is(err, refused) {
		t.Fatalf("refused append = %v", err)
	}
	if tr, err := store.Transcript(ctx, "sesn_transcript", 0); err != nil || len(tr) != 0 {
		t.Fatalf("transcript after a refused append = %v, %v; want nothing stored", tr, err)
	}
	for range 2 { // the second is a retry: nothing new
		_, evs, err := store.Append(ctx, "sesn_transcript", &db.AppendRequest{
			Events:     []db.NewEvent{{ID: "sevt_t1", Type: "span.model_request_start", Body: json.RawMessage(`{}`), Key: "t/1"}},
			Transcript: []db.TranscriptEntry{entry("t/0", `{"role":"user"}`), entry("t/1", `{"role":"assistant"}`)},
			Now:        now,
		})
		if err != nil || len(evs) != 1 || evs[0].Seq != 1 {
			t.Fatalf("append = %+v, %v; want the one event at seq 1", evs, err)
		}
	}
	tr, err := store.Transcript(ctx, "sesn_transcript", 0)
	if err != nil || len(tr) != 2 || tr[0].Key != "t/0" || tr[1].Key != "t/1" || tr[0].Seq <= 0 || tr[1].Seq <= tr[0].Seq {
		t.Fatalf("transcript = %+v, %v; want t/0 then t/1 at increasing positions", tr, err)
	}
	// Reading after a position gives what was appended since, through
	// either writer.
	if _, err := store.TranscriptAppend(ctx, "sesn_transcript", []db.TranscriptEntry{entry("t/2", `{"role":"user"}`)}); err != nil {
		t.Fatal(err)
	}
	after, err := store.Transcript(ctx, "sesn_transcript", tr[1].Seq)
	if err != nil || len(after) != 1 || after[0].Key != "t/2" || after[0].Seq <= tr[1].Seq {
		t.Fatalf("transcript after %d = %+v, %v; want only t/2, after it", tr[1].Seq, after, err)
	}
	if rest, err := store.Transcript(ctx, "sesn_transcript", after[0].Seq); err != nil || len(rest) != 0 {
		t.Fatalf("transcript after the last entry = %+v, %v; want nothing", rest, err)
	}
	if _, err := store.TranscriptAppend(ctx, "sesn_missing", []db.TranscriptEntry{entry("t/0", `{}`)}); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("TranscriptAppend to a missing session = %v; want ErrNotFound", err)
	}

	// With new events, the entries and the processed marks go in the
	// events' statement: a stored key among the entries is skipped, the
	// new ones keep their order, and the pending trigger is marked.
	if _, _, err := store.Append(ctx, "sesn_transcript", &db.AppendRequest{
		Events: []db.NewEvent{{ID: "sevt_t3", Type: "user.message", Body: json.RawMessage(`{"content":[]}`), Pending: true}}, Now: now,
	}); err != nil {
		t.Fatal(err)
	}
	if pending, err := store.SessionPendingTriggers(ctx, "sesn_transcript", now); err != nil || len(pending) != 1 {
		t.Fatalf("pending triggers = %+v, %v; want sevt_t3", pending, err)
	}
	_, evs, err := store.Append(ctx, "sesn_transcript", &db.AppendRequest{
		Events:     []db.NewEvent{{ID: "sevt_t4", Type: "span.model_request_start", Body: json.RawMessage(`{}`), Key: "t/4"}},
		Transcript: []db.TranscriptEntry{entry("t/4", `{"n":4}`), entry("t/1", `{"role":"changed"}`), entry("t/3", `{"n":3}`)},
		Processed:  []string{"sevt_t3"},
		Now:        now.Add(time.Second),
	})
	if err != nil || len(evs) != 1 || evs[0].Seq != 3 {
		t.Fatalf("append with entries and marks = %+v, %v; want the one event at seq 3", evs, err)
	}
	all, err := store.Transcript(ctx, "sesn_transcript", 0)
	var keys []string
	for i, e := range all {
		keys = append(keys, e.Key)
		if i > 0 && e.Seq <= all[i-1].Seq {
			t.Errorf("entry %s at %d, not after %s at %d", e.Key, e.Seq, all[i-1].Key, all[i-1].Seq)
		}
	}
	if err != nil || strings.Join(keys, " ") != "t/0 t/1 t/2 t/4 t/3" || string(all[1].Body) != `{"role":"assistant"}` {
		t.Fatalf("transcript = %v (t/1 %s), %v; want t/0 t/1 t/2 t/4 t/3, t/1 as first stored", keys, all[1].Body, err)
	}
	if pending, err := store.SessionPendingTriggers(ctx, "sesn_transcript", now); err != nil || len(pending) != 0 {
		t.Fatalf("pending triggers = %+v, %v; want none: sevt_t3 was marked", pending, err)
	}
}

// TestTranscriptReadAfterMissesNothing: writers append to one session's
// transcript concurrently, through Append and TranscriptAppend, while a
// reader keeps reading only the entries after the last one it saw, as a
// worker's transcript cache does. The reader ends with every entry, each
// once: an entry never appears below a position already read.
func TestTranscriptReadAfterMissesNothing(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	wakeSession(t, store, "sesn_race", 0)
	const writers, each = 6, 25
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range each {
				key := fmt.Sprintf("w%d/%d", w, i)
				e := []db.TranscriptEntry{{Key: key, Body: json.RawMessage(`{}`)}}
				var err error
				if (w+i)%2 == 0 {
					_, err = store.TranscriptAppend(ctx, "sesn_race", e)
				} else {
					_, _, err = store.Append(ctx, "sesn_race", &db.AppendRequest{Transcript: e,
						Events: []db.NewEvent{{ID: "sevt_" + strings.ReplaceAll(key, "/", "_"), Type: "span.model_request_start", Body: json.RawMessage(`{}`), Key: key}},
						Now:    time.Now().UTC()})
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	seen := map[string]int{}
	var after int64
	read := func() {
		entries, err := store.Transcript(ctx, "sesn_race", after)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			seen[e.Key]++
			after = e.Seq
		}
	}
	for finished := 0; finished < writers; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished++
		default:
			read()
		}
	}
	read()
	if len(seen) != writers*each {
		t.Fatalf("the incremental reader saw %d distinct entries, want %d", len(seen), writers*each)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("entry %s seen %d times, want once", k, n)
		}
	}
}

// TestAppendRetriedKeys: an append whose keys are partly stored (a retry
// with more events, a status change already made) returns the stored
// events as they are, appends only the new ones right after the log's
// end, and makes the change once; a fresh one appends everything.
func TestAppendRetriedKeys(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	wakeSession(t, store, "sesn_keys", 0)
	now := time.Now().UTC()
	ev := func(id, key string) db.NewEvent {
		return db.NewEvent{ID: id, Type: "agent.message", Body: json.RawMessage(`{"content":[]}`), Key: key}
	}
	_, first, err := store.Append(ctx, "sesn_keys", &db.AppendRequest{Events: []db.NewEvent{ev("sevt_k1", "k/1"), ev("sevt_k2", "k/2")}, Now: now})
	if err != nil || len(first) != 2 || first[0].Existed || first[1].Seq != first[0].Seq+1 {
		t.Fatalf("first append = %+v, %v; want two new events in a row", first, err)
	}
	running := func(*db.Session) (*db.Change, error) {
		return &db.Change{To: db.StatusRunning, EventID: "sevt_running", Key: "k/status"}, nil
	}
	for i := range 2 { // the second is a retry of the first
		sess, evs, err := store.Append(ctx, "sesn_keys", &db.AppendRequest{
			Events: []db.NewEvent{ev("sevt_k2", "k/2"), ev("sevt_k3", "k/3")}, Decide: running, Now: now})
		if want := 3 - i; err != nil || len(evs) != want { // the retry finds the change made
			t.Fatalf("append %d = %+v, %v; want %d events: k/2, k/3 and (first) the running status", i, evs, err, want)
		}
		if !evs[0].Existed || evs[0].Seq != first[1].Seq || evs[0].ID != "sevt_k2" {
			t.Errorf("append %d: k/2 = %+v; want the stored event", i, evs[0])
		}
		if evs[1].Existed != (i == 1) || evs[1].Seq != first[1].Seq+1 {
			t.Errorf("append %d: k/3 at %d (existed %v); want %d, existed %v", i, evs[1].Seq, evs[1].Existed, first[1].Seq+1, i == 1)
		}
		if i == 0 && (evs[2].Type != "session.status_running" || evs[2].Seq != first[1].Seq+2) {
			t.Errorf("append 0: %s at %d; want session.status_running at %d", evs[2].Type, evs[2].Seq, first[1].Seq+2)
		}
		if sess.Status != db.StatusRunning || sess.LastSeq != first[1].Seq+2 {
			t.Errorf("append %d: session %s at seq %d; want running at %d", i, sess.Status, sess.LastSeq, first[1].Seq+2)
		}
	}
	all, err := store.EventsAfter(ctx, "sesn_keys", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	statuses := 0
	for i, e := range all {
		if e.Seq != all[0].Seq+int64(i) {
			t.Fatalf("log seqs %d at %d: want no gap", e.Seq, i)
		}
		if e.Type == "session.status_running" {
			statuses++
		}
	}
	if statuses != 1 {
		t.Errorf("%d running events, want 1", statuses)
	}
}
