package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

func threadEvents(t *testing.T, store *db.Store, sid string) []db.Event {
	t.Helper()
	evs, _, err := store.EventList(context.Background(), sid, db.EventListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func typesOfEvents(evs []db.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func sessionStatus(t *testing.T, store *db.Store, id string) *db.Session {
	t.Helper()
	s, err := store.SessionGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestThreadLifecycle: a message to a new thread creates it running, with
// its events copied (same ids, session_thread_id added) into the parent's
// log; its reply at the end of its turn is pending in the parent's log and
// taken by the coordinator's wait, once, with the same answer on a retry;
// the primary thread's turn end is held while a thread runs, and the
// session goes idle with it when the last thread stops.
func TestThreadLifecycle(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	parent := "sesn_team0000000000000000001"
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: parent, AgentID: "agent_lead", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"lead"}`), Provider: "local", Metadata: map[string]string{}, Now: t0}, nil); err != nil {
		t.Fatal(err)
	}
	// The coordinator's turn runs.
	running(t, store, parent, t0)
	tid := db.ThreadID(parent, "toolu_1")
	send := &db.ThreadSend{ParentID: parent, ThreadID: tid, Spawn: &db.ThreadSpawn{AgentID: "agent_w", AgentVersion: 2,
		Agent: json.RawMessage(`{"type":"agent","id":"agent_w","version":2,"name":"writer"}`)},
		FromThreadID: db.PrimaryThreadID(parent), FromAgentName: "lead", Content: json.RawMessage(`[{"type":"text","text":"write it"}]`),
		Key: "toolu_1", Now: t0.Add(time.Second)}
	th, err := store.ThreadSend(ctx, send)
	if err != nil {
		t.Fatal(err)
	}
	if th.Status != db.StatusRunning || th.ParentID == nil || *th.ParentID != parent || th.AgentName() != "writer" {
		t.Fatalf("thread after the first message: %+v", th)
	}
	if _, err := store.ThreadSend(ctx, send); err != nil { // a retry
		t.Fatal(err)
	}
	own := threadEvents(t, store, tid)
	if got := strings.Join(typesOfEvents(own), ","); got != "session.thread_created,agent.thread_message_received,session.thread_status_running" {
		t.Fatalf("thread log %s", got)
	}
	copies := threadEvents(t, store, parent)
	for i, ev := range own {
		c := copies[len(copies)-len(own)+i]
		if c.ID != ev.ID || !strings.Contains(string(c.Body), `"session_thread_id":"`+tid+`"`) {
			t.Fatalf("parent's copy %d: %s %s, want %s with the thread id", i, c.ID, c.Body, ev.ID)
		}
	}
	if s := sessionStatus(t, store, tid); s.AwaitingReplies != 1 {
		t.Fatalf("awaiting replies %d, want 1 (a retried send counts once)", s.AwaitingReplies)
	}
	// Not done while the thread owes its reply.
	if got, err := store.ThreadTakeReplies(ctx, parent, nil, "wait/1", t0.Add(2*time.Second)); err != nil || got.Done {
		t.Fatalf("take replies before the reply: %+v, %v", got, err)
	}
	// The primary thread's turn ends while the thread runs: held.
	idle(t, store, parent, "end_turn", t0.Add(3*time.Second))
	if s := sessionStatus(t, store, parent); s.Status != db.StatusRunning || s.HeldStopReason == nil {
		t.Fatalf("session after its primary thread's turn ended with a thread running: %s held %s", s.Status, s.HeldStopReason)
	}
	replyAndIdle(t, store, tid, parent, t0.Add(4*time.Second))
	// The reply is work for the primary thread: the session runs again.
	if s := sessionStatus(t, store, parent); s.Status != db.StatusRunning || s.HeldStopReason != nil {
		t.Fatalf("session after the reply: %s held %s; want running, nothing held", s.Status, s.HeldStopReason)
	}
	got, err := store.ThreadTakeReplies(ctx, parent, nil, "wait/2", t0.Add(5*time.Second))
	if err != nil || !got.Done || len(got.Replies) != 1 || got.Replies[0].Type != db.ThreadMessageReceivedType {
		t.Fatalf("take replies: %+v, %v", got, err)
	}
	again, err := store.ThreadTakeReplies(ctx, parent, nil, "wait/2", t0.Add(6*time.Second))
	if err != nil || len(again.Replies) != 1 || again.Replies[0].ID != got.Replies[0].ID {
		t.Fatalf("a retried wait got %+v, %v; want the same reply", again, err)
	}
	if other, err := store.ThreadTakeReplies(ctx, parent, nil, "wait/3", t0.Add(7*time.Second)); err != nil || !other.Done || len(other.Replies) != 0 {
		t.Fatalf("another wait took %+v, %v; want nothing", other, err)
	}
	archived, err := store.ThreadArchive(ctx, parent, tid, t0.Add(8*time.Second))
	if err != nil || archived.Status != db.StatusTerminated || archived.ArchivedAt == nil {
		t.Fatalf("archived thread %+v, %v; want terminated and archived", archived, err)
	}
	if evs := threadEvents(t, store, parent); evs[len(evs)-1].Type != "session.thread_status_terminated" {
		t.Fatalf("the session's log ends with %s, want the thread's termination", evs[len(evs)-1].Type)
	}
	if s := sessionStatus(t, store, parent); s.Status != db.StatusRunning {
		t.Fatalf("the session is %s after archiving an idle thread, want still running (its own turn)", s.Status)
	}
	send.Key, send.Spawn = "toolu_2", nil
	if _, err := store.ThreadSend(ctx, send); !errors.Is(err, db.ErrThreadClosed) {
		t.Fatalf("a message to an archived thread: %v, want ErrThreadClosed", err)
	}
}

func running(t *testing.T, store *db.Store, id string, at time.Time) {
	t.Helper()
	_, _, err := store.Append(context.Background(), id, &db.AppendRequest{Now: at,
		Decide: func(*db.Session) (*db.Change, error) {
			return &db.Change{To: db.StatusRunning, EventID: "sevt_run" + at.Format("150405.000000")}, nil
		}})
	if err != nil {
		t.Fatalf("running %s: %v", id, err)
	}
}

// replyAndIdle ends thread tid's turn with its reply to the primary
// thread, as a worker's CompleteTurn does.
func replyAndIdle(t *testing.T, store *db.Store, tid, parent string, at time.Time) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"to_session_thread_id": db.PrimaryThreadID(parent), "to_agent_name": nil,
		"content": []map[string]string{{"type": "text", "text": "done"}}})
	_, _, err := store.Append(context.Background(), tid, &db.AppendRequest{Now: at,
		Events: []db.NewEvent{{ID: "sevt_reply_" + tid, Type: db.ThreadMessageSentType, Body: body, Key: "turn/thread_reply"}},
		Decide: func(*db.Session) (*db.Change, error) {
			return &db.Change{To: db.StatusIdle, EventID: "sevt_tidle_" + tid}, nil
		}})
	if err != nil {
		t.Fatalf("reply of %s: %v", tid, err)
	}
}
